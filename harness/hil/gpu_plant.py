"""The real co-located GPU behind the :class:`harness.sim.protocol.Plant` protocol.

:class:`GPUPlant` runs, on one GPU:

* a private MPS control daemon (:func:`harness.hil.mps_session.mps_session`; sleep-only when MPS is
  unavailable), stopped with ``quit`` when the plant closes;
* the inference process (:mod:`harness.hil.inference`, ResNet-50), its batch size in a control
  file that :meth:`GPUPlant.set_load` rewrites (the burst);
* the training emulator (:mod:`harness.hil.training_emulator`), calibrated once on the idle,
  full GPU, then run through :class:`gpucontrol.node.actuators.mps.MPSActuator`, which restarts it
  with a new ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (shadow pre-start by default: the new
  process initializes while the old one still trains);
* the sleep knob through the cooperative hook (:class:`gpucontrol.node.hooks.HookWriter`; the
  emulator calls ``after_iteration()``).

:meth:`GPUPlant.step` applies an actuation, waits one control period in real time, and builds
the :class:`~harness.sim.protocol.PeriodResult` from the processes' CSV logs. MPS restarts run in a
background thread, so periods keep their length and the inference keeps being measured while
the training restarts (``restarting`` marks those periods), as on the GPUColo paper's testbed.

Every process and the MPS daemon are stopped by :meth:`GPUPlant.close` (also registered with
``atexit``); use the plant as a context manager. Nothing here changes compute mode, clocks,
power limits or MIG, or resets the GPU.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucontrol.node.actuators.mps import MPSActuator
from gpucontrol.node.hooks import ENV_HOOK_FILE, HookWriter
from harness.hil._accounting import TrainingAccount
from harness.hil._signals import sigterm_as_exit
from harness.hil._tail import CSVTail, first_and_last_rows
from harness.hil.device_info import gpu_info
from harness.hil.mps_session import client_env, mps_session, validate_pct
from harness.results import read_json, write_int
from harness.sim.protocol import PeriodResult, actuation_knobs, inference_mps_of

if TYPE_CHECKING:  # typing.Self is 3.11+; annotations are not evaluated at run time
    from typing_extensions import Self

__all__ = ["PRESETS", "GPUPlant", "GPUPlantConfig", "gpu_info"]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The PyTorch training (``GPUPlantConfig(training="torch")``).
TORCH_TRAINING_ARGV = (sys.executable, "-m", "harness.hil.torch_training")


@dataclass(frozen=True)
class GPUPlantConfig:
    """How the GPU plant is set up. Validated at construction.

    ``mps_enabled`` False runs without MPS (time slicing; the Fig 4 "Sleep" run); when MPS is
    requested but unavailable the plant falls back to sleep-only as well.
    ``inference_argv`` / ``training_argv`` are the command prefixes (the plant appends its
    flags); ``inference_args`` / ``training_args`` are extra flags appended after them.
    ``latency`` picks the per-batch latency the controller sees: ``"wall"`` (submit to result,
    what the service sees) or ``"gpu"`` (CUDA events around the forward pass).
    ``size_inference_to_ms``: when set, the plant measures the inference alone at start and
    runs the batch that takes this long (every batch asked for scaled by the same factor;
    :mod:`harness.hil.sizing`); the paper presets set it to the RTX 3090's time.
    ``training`` picks the training process: ``"emulator"`` (the CuPy matmul emulator, the
    GPUColo paper's) or ``"torch"`` (a PyTorch ResNet-18, :mod:`harness.hil.torch_training`),
    both sized to ``target_iter_s`` on the idle GPU.
    """

    batch: int = 105
    fp16: bool = False
    channels_last: bool = False
    inference_mps_pct: float | None = None
    initial_mps_pct: float = 100.0
    initial_sleep_s: float = 0.0
    max_sleep_s: float = 60.0
    target_iter_s: float = 0.2
    matrix_n: int = 4096
    copy_mb: float = 64.0
    mps_enabled: bool = True
    shadow: bool = True
    latency: str = "wall"
    keep_samples: bool = False
    workdir: str | None = None
    mps_binary: str = "nvidia-cuda-mps-control"
    start_timeout_s: float = 600.0
    hook_stale_after_s: float = 30.0
    mps_tolerance_pct: float = 0.5
    inference_argv: tuple[str, ...] = (sys.executable, "-m", "harness.hil.inference")
    training_argv: tuple[str, ...] = (sys.executable, "-m", "harness.hil.training_emulator")
    inference_args: tuple[str, ...] = ()
    training_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = field(default=())
    training: str = "emulator"
    size_inference_to_ms: float | None = None

    def __post_init__(self) -> None:
        if not (1 <= self.batch <= 4096):
            raise ValueError(f"batch must be in [1, 4096], got {self.batch!r}")
        if self.inference_mps_pct is not None:
            validate_pct(self.inference_mps_pct)
        validate_pct(self.initial_mps_pct)
        if not (0 < self.max_sleep_s <= 60):
            raise ValueError(f"max_sleep_s must be in (0, 60], got {self.max_sleep_s!r}")
        if not (0 <= self.initial_sleep_s <= self.max_sleep_s):
            raise ValueError(f"initial_sleep_s must be in [0, max_sleep_s], "
                             f"got {self.initial_sleep_s!r}")
        if self.size_inference_to_ms is not None and not (
                math.isfinite(self.size_inference_to_ms) and self.size_inference_to_ms > 0):
            raise ValueError(f"size_inference_to_ms must be a number > 0 or None, "
                             f"got {self.size_inference_to_ms!r}")
        if self.training not in ("emulator", "torch"):
            raise ValueError(f"training must be 'emulator' or 'torch', got {self.training!r}")
        if self.latency not in ("wall", "gpu"):
            raise ValueError(f"latency must be 'wall' or 'gpu', got {self.latency!r}")
        for name in ("target_iter_s", "start_timeout_s", "hook_stale_after_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not self.inference_argv or not self.training_argv:
            raise ValueError("inference_argv and training_argv must not be empty")


#: Named setups mirroring :data:`harness.sim.simulated.PRESETS`. ``size_to_paper``: the
#: inference batch is sized so that inference alone takes what it took on the paper's RTX 3090
#: (:mod:`harness.hil.sizing`); without it the batch runs as named.
PRESETS: dict[str, dict[str, Any]] = {
    # GPUColo paper, Fig. 4: ResNet-50 inference with the matmul training emulator, both at
    # MPS 80 %.
    "fig4": {"batch": 5, "inference_mps_pct": 80.0, "initial_mps_pct": 80.0,
             "size_to_paper": True},
    # GPUColo paper, Figs. 8/9: ResNet-50 batch 105 (115 in the burst), inference MPS 100 %.
    "fig8": {"batch": 105, "inference_mps_pct": None, "initial_mps_pct": 80.0,
             "size_to_paper": True},
    # The H100 runs of 2026-11-27: batch 105 as measured there (inference alone 18.1 ms), the
    # workload the simulated ``h100`` preset is calibrated on; not resized.
    "h100": {"batch": 105, "inference_mps_pct": None, "initial_mps_pct": 100.0},
}


def _check_fields(overrides: dict[str, Any]) -> dict[str, Any]:
    known = {f.name for f in fields(GPUPlantConfig)}
    bad = sorted(set(overrides) - known)
    if bad:
        raise ValueError(f"GPUPlant does not take {', '.join(bad)}; its settings are "
                         f"{', '.join(sorted(known))}")
    return overrides


class GPUPlant:
    """The real co-location; implements :class:`harness.sim.protocol.Plant`.

    Processes start on the first :meth:`step` / :meth:`set_load` (or :meth:`start`); the
    plant's clock starts when the training is ready. See the module docstring.

    Attributes
    ----------
    mps_enabled : bool
        False when MPS is unavailable (sleep-only: MPS requests are ignored, with a warning).
    restarts : list of dict
        One record per MPS restart (see :meth:`restart_report`).
    """

    LOAD_FIELDS = ("batch",)

    def __init__(self, config: GPUPlantConfig | None = None, **overrides: Any) -> None:
        cfg = config if config is not None else GPUPlantConfig()
        self.cfg = replace(cfg, **_check_fields(overrides)) if overrides else cfg
        self.started = False
        self.closed = False
        self.mps_enabled = False
        self.batch = self.cfg.batch
        self.sleep_s = self.cfg.initial_sleep_s
        self.inference_mps_pct = self.cfg.inference_mps_pct
        self.restarts: list[dict[str, Any]] = []
        self._stack = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._want_mps: float = self.cfg.initial_mps_pct
        self._want_inf_mps: float | None = self.cfg.inference_mps_pct
        self._failed_target: float | None = None
        self._worker: threading.Thread | None = None
        self._working = False
        self._windows: list[list[float]] = []  # [begin, end] unix times of training restarts
        self._inf_windows: list[list[float]] = []
        self._pending: list[dict[str, Any]] = []
        self._account = TrainingAccount()
        self._warned: set[str] = set()
        self._inference: subprocess.Popen | None = None
        self.batch_scale = 1.0
        self.sizing: dict[str, Any] | None = None

    @classmethod
    def preset(cls, name: str = "fig8", *, seed: int | None = None,
               **overrides: Any) -> GPUPlant:
        """A plant set up like :meth:`harness.sim.simulated.SimulatedColocation.preset` (``seed``
        is accepted for symmetry and ignored: the hardware brings its own noise)."""
        if name not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
        entry = dict(PRESETS[name])
        if entry.pop("size_to_paper", False):
            from harness.hil.sizing import paper_alone_ms

            entry["size_inference_to_ms"] = paper_alone_ms(name)
        return cls(GPUPlantConfig(**_check_fields({**entry, **overrides})))

    # ---- paths and environments ---------------------------------------------------------------
    def _path(self, name: str) -> str:
        return str(self.workdir / name)

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.update(dict(self.cfg.extra_env))
        return env

    def _training_argv(self) -> list[str]:
        c = self.cfg
        if c.training == "torch":
            argv = [*TORCH_TRAINING_ARGV] if c.training_argv == GPUPlantConfig.training_argv \
                else [*c.training_argv]
            return [*argv, "--target-iter-s", f"{c.target_iter_s:g}",
                    "--calibration-file", self._path("calibration.json"), *c.training_args]
        return [*c.training_argv, "--target-iter-s", f"{c.target_iter_s:g}",
                "--matrix-n", str(c.matrix_n), "--copy-mb", f"{c.copy_mb:g}",
                "--calibration-file", self._path("calibration.json"), *c.training_args]

    def _inference_argv(self) -> list[str]:
        c = self.cfg
        argv = [*c.inference_argv, "--batch-size", str(c.batch),
                "--batch-file", self._path("batch"), "--log", self._path("inference-{pid}.csv"),
                "--ready-file", self._path("inference.ready")]
        if c.fp16:
            argv.append("--fp16")
        if c.channels_last:
            argv.append("--channels-last")
        return argv + list(c.inference_args)

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> GPUPlant:
        """Start MPS, calibrate the training on the idle GPU, start inference and training."""
        if self.started:
            return self
        if self.closed:
            raise RuntimeError("this GPUPlant was closed; make a new one")
        self.started = True
        atexit.register(self.close)
        self._install_sigterm()
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _install_sigterm(self) -> None:
        """Turn SIGTERM into SystemExit while the plant runs, so that ``finally`` blocks and
        :meth:`close` stop MPS and the processes (:func:`harness.hil._signals.sigterm_as_exit`)."""
        sigterm_as_exit(self._stack)

    def _start(self) -> None:
        c = self.cfg
        if c.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="gpucontrol-gpuplant-"))
        else:
            self.workdir = Path(c.workdir)
            self.workdir.mkdir(parents=True, exist_ok=True)
        self._mps = self._stack.enter_context(mps_session(c.mps_enabled, binary=c.mps_binary))
        self.mps_enabled = self._mps is not None
        self._hook = HookWriter(self._path("gpu.hook"), stale_after_s=c.hook_stale_after_s,
                                max_sleep_s=c.max_sleep_s)
        self._stack.callback(self._hook.close)
        self._hook.set_sleep(self.sleep_s)
        write_int(self._path("batch"), self.batch)

        # 1. size the training iteration on the idle, full GPU (no inference running yet)
        base = self._base_env()
        calib = subprocess.run([*self._training_argv(), "--iterations", "0"],
                               env=client_env(self._mps, None, base), cwd=self.workdir,
                               timeout=c.start_timeout_s, stdin=subprocess.DEVNULL,
                               check=False)
        if calib.returncode != 0:
            raise RuntimeError(f"training calibration failed (exit {calib.returncode})")
        self.calibration = read_json(self._path("calibration.json"))

        # 2. inference, warmed up (registered first: a start-up timeout still stops it)
        self._stack.callback(self._stop_inference)
        self._start_inference(self._want_inf_mps)
        if c.size_inference_to_ms is not None:  # on the idle GPU, before the training starts
            from harness.hil.sizing import size_inference

            size_inference(self, c.size_inference_to_ms)

        # 3. training through the MPS actuator
        env = {ENV_HOOK_FILE: self._path("gpu.hook"), "PYTHONPATH": base["PYTHONPATH"],
               **dict(c.extra_env)}
        argv = [*self._training_argv(), "--log", self._path("training-{pid}.csv")]
        self._actuator = MPSActuator(argv, env=env, mps=self._mps, shadow=c.shadow,
                                     ready="notify", ready_timeout_s=c.start_timeout_s,
                                     cwd=str(self.workdir))
        self._stack.callback(self._actuator.stop)
        first = self._want_mps if self.mps_enabled else 100.0
        self._actuator.start(first)
        self._inf_tail = CSVTail(self._path("inference-*.csv"))
        self._train_tail = CSVTail(self._path("training-*.csv"))
        self.t0 = time.time()

    def _start_inference(self, pct: float | None) -> None:
        ready = Path(self._path("inference.ready"))
        ready.unlink(missing_ok=True)
        env = client_env(self._mps, pct if self.mps_enabled else None, self._base_env())
        with open(self._path("inference.out"), "ab") as out:
            p = subprocess.Popen(self._inference_argv(), env=env, cwd=self.workdir,
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self._inference = p
        deadline = time.monotonic() + self.cfg.start_timeout_s
        while read_json(ready) is None:
            if p.poll() is not None:
                raise RuntimeError(f"the inference process exited during start-up (code "
                                   f"{p.returncode}); see {self._path('inference.out')}")
            if time.monotonic() > deadline:
                raise RuntimeError("the inference process was not ready within "
                                   f"{self.cfg.start_timeout_s:g} s")
            time.sleep(0.05)
        self.inference_mps_pct = pct

    def setup(self) -> dict[str, Any]:
        """What this plant ran, for the results' metadata: the training, the batch (and the
        sizing, when the batch was sized to the GPU), MPS, the calibration of the training."""
        cal = getattr(self, "calibration", None) or {}
        return {"training": self.cfg.training, "batch": self.batch,
                "sizing": self.sizing, "mps_enabled": self.mps_enabled,
                "target_iter_s": self.cfg.target_iter_s,
                "training_calibration": {k: cal.get(k) for k in
                                         ("matmuls", "per_matmul_s", "matrix_n", "accumulate",
                                          "model") if k in cal}}

    def _stop_inference(self) -> None:
        p, self._inference = self._inference, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def close(self) -> None:
        """Stop training, inference and the MPS daemon (``quit``). Idempotent."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        w = self._worker
        if w is not None:
            w.join(timeout=self.cfg.start_timeout_s)
        self._stack.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- MPS changes (background) -------------------------------------------------------------
    def _request(self, train_pct: float | None, inf_pct: float | None, inf_given: bool) -> None:
        with self._lock:
            if train_pct is not None:
                self._want_mps = train_pct
            if inf_given:
                self._want_inf_mps = inf_pct
            if not self._working and self._needs_work():
                self._working = True
                self._worker = threading.Thread(target=self._work, name="gpuplant-mps",
                                                daemon=True)
                self._worker.start()

    def _needs_work(self) -> bool:
        tol = self.cfg.mps_tolerance_pct
        cur = self._actuator.mps_pct
        train = (cur is None or abs(self._want_mps - cur) > tol) and (
            self._failed_target is None or abs(self._want_mps - self._failed_target) > tol)
        a, b = self._want_inf_mps, self.inference_mps_pct
        inf = (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > tol)
        return train or inf

    def _work(self) -> None:
        try:
            self._work_loop()
        finally:
            with self._lock:
                self._working = False

    def _work_loop(self) -> None:
        tol = self.cfg.mps_tolerance_pct
        while not self.closed:
            with self._lock:
                if not self._needs_work():
                    self._working = False  # under the lock: a new request starts a worker
                    return
                want, want_inf = self._want_mps, self._want_inf_mps
            a, b = want_inf, self.inference_mps_pct
            if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > tol):
                win = [time.time(), math.nan]
                self._inf_windows.append(win)
                try:
                    self._stop_inference()
                    self._start_inference(want_inf)
                finally:
                    win[1] = time.time()
            cur = self._actuator.mps_pct
            if cur is not None and abs(want - cur) <= tol:
                continue
            win = [time.time(), math.nan]
            self._windows.append(win)
            try:
                res = self._actuator.apply(want)
            finally:
                win[1] = time.time()
            rec = {"t_begin_s": win[0] - self.t0, "t_end_s": win[1] - self.t0,
                   "old_pct": res.old_pct, "new_pct": res.new_pct, "old_pid": res.old_pid,
                   "new_pid": res.new_pid, "shadow": res.shadow, "ok": res.ok,
                   "downtime_s": res.downtime_s, "overlap_s": res.overlap_s,
                   "total_s": res.total_s, "error": res.error}
            self.restarts.append(rec)
            if not res.ok:
                self._failed_target = want
                warnings.warn(f"MPS change {res.old_pct:g}% -> {want:g}% failed: {res.error}",
                              RuntimeWarning, stacklevel=2)
            else:
                self._failed_target = None

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait for a running MPS change to finish (True when none is left)."""
        w = self._worker
        if w is not None:
            w.join(timeout_s)
            return not w.is_alive()
        return True

    # ---- the Plant protocol ---------------------------------------------------------------------
    def set_load(self, **changes: Any) -> None:
        """``batch=N``: the inference's batch size from its next batch on (times the sizing's
        ``batch_scale`` when the plant sized its batch to the GPU)."""
        bad = set(changes) - set(self.LOAD_FIELDS)
        if bad:
            raise ValueError(f"set_load accepts {', '.join(self.LOAD_FIELDS)}; "
                             f"got {', '.join(sorted(bad))}")
        if "batch" in changes:
            b = int(changes["batch"])
            if not (1 <= b <= 4096):
                raise ValueError(f"batch must be in [1, 4096], got {changes['batch']!r}")
            self.start()
            b = min(max(round(b * self.batch_scale), 1), 4096)  # the GPU's equivalent batch
            write_int(self._path("batch"), b)
            self.batch = b

    def _warn_once(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def _apply_sleep(self, act: Any) -> None:
        """The commanded sleep, clamped to the plant's range, through the hook file."""
        s = getattr(act, "sleep_s", None)
        if s is not None and math.isfinite(float(s)):
            self.sleep_s = min(max(float(s), 0.0), self.cfg.max_sleep_s)
        self._hook.set_sleep(self.sleep_s)

    def _apply(self, act: Any) -> None:
        self._apply_sleep(act)
        m = getattr(act, "mps_pct", None)
        train_pct = None
        if m is not None and math.isfinite(float(m)):
            train_pct = min(max(float(m), 1.0), 100.0)
        inf_pct = inference_mps_of(act)
        inf_given = inf_pct is not None
        if not self.mps_enabled:
            if (train_pct is not None and train_pct < 100.0) or inf_given:
                self._warn_once("no-mps", "MPS is unavailable: the plant runs sleep-only and "
                                "ignores MPS requests")
            return
        self._request(train_pct, min(max(inf_pct, 1.0), 100.0) if inf_pct is not None else None,
                      inf_given)

    def _check_alive(self) -> None:
        if self._working:
            return
        if self._inference is None or self._inference.poll() is not None:
            raise RuntimeError(f"the inference process is gone; see {self._path('inference.out')}")
        if not self._actuator.running():
            raise RuntimeError("the training process is gone (see its output above)")

    def step(self, actuation: Any, period_s: float) -> PeriodResult:
        """Apply ``actuation``, run ``period_s`` seconds of real time, report the period.

        An actuation with a sleep that is not a finite number >= 0 s or an MPS share outside
        [1, 100] % is refused (:func:`~harness.sim.protocol.actuation_knobs`) before anything
        starts or moves; a sleep above ``max_sleep_s`` is held there (the result says so).
        """
        T = float(period_s)
        if not (math.isfinite(T) and T > 0):
            raise ValueError(f"period_s must be a finite number > 0, got {period_s!r}")
        actuation_knobs(actuation)
        self.start()
        self._check_alive()
        t_start = time.time()
        self._apply(actuation)
        deadline = t_start + T
        while True:
            left = deadline - time.time()
            if left <= 0:
                break
            time.sleep(min(left, 1.0))
            self._hook.beat()
        t_end = time.time()
        return self._period(t_start, t_end)

    # ---- measurement ----------------------------------------------------------------------------
    @staticmethod
    def _overlaps(windows: list[list[float]], a: float, b: float) -> bool:
        return any(w0 < b and (math.isnan(w1) or w1 > a) for w0, w1 in windows)

    def _period(self, t_start: float, t_end: float) -> PeriodResult:
        inf = self._pending + self._inf_tail.read()
        self._pending = [r for r in inf if (r.get("t_unix") or 0) >= t_end]
        rows = [r for r in inf if t_start <= (r.get("t_unix") or -1) < t_end]
        key = "wall_ms" if self.cfg.latency == "wall" else "gpu_ms"
        lats = np.array([r[key] for r in rows if isinstance(r.get(key), float)], dtype=float)
        n = int(lats.size)
        self._account.add(self._train_tail.read())
        restarting = self._overlaps(self._windows, t_start, t_end)
        work = self._account.period(t_start, t_end, estimate=not restarting)
        T = t_end - t_start
        mps = self._actuator.mps_pct if self.mps_enabled else 100.0
        return PeriodResult(
            mean_ms=float(lats.mean()) if n else math.nan,
            p99_ms=float(np.percentile(lats, 99)) if n else math.nan, count=n,
            t_end_s=t_end - self.t0, period_s=T, inference_batches=n,
            inference_images=int(sum(int(r.get("batch_size") or 0) for r in rows)),
            training_iterations=work.iterations, training_sm_share=work.sm_share(T),
            iteration_s=work.iteration_s, restarting=restarting,
            inference_restarting=self._overlaps(self._inf_windows, t_start, t_end),
            sleep_s=self.sleep_s, mps_pct=float(mps if mps is not None else math.nan),
            inference_mps_pct=float(self.inference_mps_pct or 100.0), batch=self.batch,
            samples_ms=tuple(lats.tolist()) if self.cfg.keep_samples else ())

    def restart_report(self) -> list[dict[str, Any]]:
        """The MPS restarts with the training gap measured from the logs.

        ``gap_s`` is the new process's first iteration start minus the old process's last
        iteration end (negative: they overlapped, as with shadow pre-start); ``downtime_s``
        is the actuator's view (no ready training process)."""
        out = []
        for r in self.restarts:
            rec = dict(r)
            rec["gap_s"] = math.nan
            if r["ok"] and r["old_pid"] and r["new_pid"]:
                _, old_last = first_and_last_rows(self._path(f"training-{r['old_pid']}.csv"))
                new_first, _ = first_and_last_rows(self._path(f"training-{r['new_pid']}.csv"))
                if old_last and new_first:
                    rec["gap_s"] = new_first["t_unix"] - (old_last["t_unix"] + old_last["iter_s"]
                                                          + (old_last["sleep_s"] or 0.0))
            out.append(rec)
        return out


def make_gpu_plant(preset: str = "fig8", *, seed: int | None = None, **overrides: Any) -> GPUPlant:
    """The ``gpu`` entry of the plant registry (:mod:`harness.experiments.plants`): a
    :class:`GPUPlant` with the named preset (a calibration file's base preset: the calibration
    describes the model, not the hardware set-up). Raises
    :class:`~gpucontrol.errors.PlantUnavailable` when no CUDA GPU is usable here."""
    import harness.hil as hil
    from gpucontrol.errors import PlantUnavailable
    from harness.sim.simulated import base_preset_name

    name = base_preset_name(preset)  # a bad preset is a configuration error, GPU or not
    if not (hil.torch_cuda_available() or hil.cupy_device_count() > 0):
        raise PlantUnavailable(
            "--plant gpu needs the GPU harness on a machine with a CUDA GPU, and none is "
            "usable here (no CUDA device, or torch/cupy missing: pip install -e '.[gpu]'). "
            "Use --plant sim for the simulated plant.")
    return GPUPlant.preset(name, seed=seed, **overrides)
