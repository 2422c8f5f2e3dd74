"""Training emulator: CuPy matmuls sized to a target iteration time (the GPUColo paper (Chen et
al., ICDCS 2024), Sec. IV-B, Fig. 4).

The seed emulates DNN training "using some matrix computations in CUDA and any needed data
copying is emulated too", because PyTorch hides which SMs its kernels reach. Each iteration
here does:

1. an emulated host-to-device copy (``copy_mb`` from pinned host memory),
2. ``matmuls`` square matmuls of size ``matrix_n`` on the training stream, with one
   ``%smid`` sample (:mod:`harness.hil.smid`) launched half-way through,
3. the cooperative sleep hook ``gpucontrol.node.hooks.after_iteration`` (the inner loop's knob).

``matmuls`` is calibrated so that one iteration takes ``target_iter_s`` (0.2 s) on the idle,
full GPU; pass ``--matmuls`` or ``--calibration-file`` so that a restart under a lower MPS
percentage keeps the same work per iteration (only then does a smaller MPS share show up as a
longer iteration). The MPS percentage is whatever ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` says
in the environment (MPS applies it when the CUDA context is created); it is reported, not set.

Shadow pre-start: after the context, buffers, kernels and calibration are ready the process
writes ``--ready-file`` (JSON, atomically) and, when ``--start-file`` is given, waits for that
file to appear before its first timed iteration. The MPS actuator starts the new process while
the old one still runs, and swaps when the new one is ready, so the downtime is the swap only.

Per iteration it writes one CSV row (``--log``) and, with ``--json``, one JSON line on stdout:
``iteration, t_s, iter_s, copy_s, compute_s, sleep_s, n_sms, sm_fraction, sm_share, mps_pct,
n_sms_peak, sm_peak_fraction``, where ``n_sms`` / ``sm_fraction`` are the SMs the sample
visited (the union of its blocks' SM ids), ``n_sms_peak`` / ``sm_peak_fraction`` the most it
held at one instant (:func:`harness.hil.smid.peak_concurrent_sms`; under MPS the union
overstates the share, the peak does not), and ``sm_share`` weights the peak (the union when the
peak is not measured) by the time not slept, ``fraction * iter_s / (iter_s + sleep_s)``.

Run ``python -m harness.hil.training_emulator --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.hil._lazy import gpu_entry_point
from harness.hil._signals import stop_on_signals
from harness.hil.emulator_backends import Backend, IterationTiming, make_backend
from harness.results import CSVLog, json_line, write_json

MPS_PCT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
LOG_FIELDS = ("iteration", "t_s", "t_unix", "iter_s", "copy_s", "compute_s", "sleep_s", "n_sms",
              "sm_fraction", "sm_share", "mps_pct", "n_sms_peak", "sm_peak_fraction")


# ---------------------------------------------------------------------------------------------
# configuration and pure helpers
@dataclass(frozen=True)
class EmulatorConfig:
    """What one emulator process does. Validated at construction."""

    target_iter_s: float = 0.2
    matrix_n: int = 4096
    dtype: str = "float32"
    copy_mb: float = 64.0
    matmuls: int | None = None
    iterations: int | None = None
    duration_s: float | None = None
    sample_sm: bool = True
    ready_file: str | None = None
    start_file: str | None = None
    log_path: str | None = None
    calibration_file: str | None = None
    json_lines: bool = False
    start_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if not (0.001 <= self.target_iter_s <= 60.0):
            raise ValueError(f"target_iter_s must be in [0.001, 60], got {self.target_iter_s!r}")
        if not (16 <= self.matrix_n <= 32768):
            raise ValueError(f"matrix_n must be in [16, 32768], got {self.matrix_n!r}")
        if self.dtype not in ("float16", "float32", "float64"):
            raise ValueError(f"dtype must be one of 'float16', 'float32', 'float64', "
                             f"got {self.dtype!r}")
        if not (0.0 <= self.copy_mb <= 16384.0):
            raise ValueError(f"copy_mb must be in [0, 16384], got {self.copy_mb!r}")
        if self.matmuls is not None and self.matmuls < 1:
            raise ValueError(f"matmuls must be >= 1, got {self.matmuls!r}")
        if self.iterations is not None and self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations!r}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {self.duration_s!r}")
        if not self.start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be > 0, got {self.start_timeout_s!r}")


def mps_pct_from_env(environ: dict[str, str] | None = None) -> float | None:
    """The MPS active-thread percentage this process was started with, or None.

    >>> mps_pct_from_env({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30"})
    30.0
    >>> mps_pct_from_env({}) is None
    True
    """
    env = os.environ if environ is None else environ
    raw = env.get(MPS_PCT_ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"{MPS_PCT_ENV} must be a number in (0, 100], got {raw!r}") from None
    if not (0.0 < v <= 100.0):
        raise ValueError(f"{MPS_PCT_ENV} must be in (0, 100], got {raw!r}")
    return v


def matmuls_for_target(target_s: float, per_matmul_s: float, copy_s: float = 0.0) -> int:
    """Matmuls per iteration so that ``copy_s + n * per_matmul_s`` is closest to ``target_s``.

    >>> matmuls_for_target(0.2, 0.004, 0.002)
    50
    >>> matmuls_for_target(0.2, 1.0)          # one matmul already exceeds the target
    1
    """
    if not per_matmul_s > 0:
        raise ValueError(f"per_matmul_s must be > 0, got {per_matmul_s!r}")
    return max(1, round((target_s - max(copy_s, 0.0)) / per_matmul_s))


def sm_share(sm_fraction: float, iter_s: float, sleep_s: float) -> float:
    """Time-weighted SM share of one iteration: the fraction while running, zero while asleep.

    >>> round(sm_share(0.4, 0.2, 0.2), 12)
    0.2
    """
    total = iter_s + max(sleep_s, 0.0)
    if not (total > 0 and math.isfinite(sm_fraction)):
        return math.nan
    return sm_fraction * iter_s / total


@dataclass(frozen=True)
class IterationRecord:
    iteration: int
    t_s: float
    t_unix: float
    iter_s: float
    copy_s: float
    compute_s: float
    sleep_s: float
    n_sms: int | None
    sm_fraction: float
    sm_share: float
    mps_pct: float | None
    n_sms_peak: int | None = None
    sm_peak_fraction: float = math.nan

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EmulatorSummary:
    iterations: int = 0
    matmuls: int = 0
    per_matmul_s: float = math.nan
    mps_pct: float | None = None
    iter_s: list[float] = field(default_factory=list)
    sm_fraction: list[float] = field(default_factory=list)
    sm_share: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        def med(xs: list[float]) -> float:
            xs = [x for x in xs if math.isfinite(x)]
            return statistics.median(xs) if xs else math.nan

        def mean(xs: list[float]) -> float:
            xs = [x for x in xs if math.isfinite(x)]
            return statistics.fmean(xs) if xs else math.nan

        return {"iterations": self.iterations, "matmuls": self.matmuls,
                "per_matmul_s": self.per_matmul_s, "mps_pct": self.mps_pct,
                "median_iter_s": med(self.iter_s), "mean_iter_s": mean(self.iter_s),
                "mean_sm_fraction": mean(self.sm_fraction), "mean_sm_share": mean(self.sm_share)}


# ---------------------------------------------------------------------------------------------
def resolve_hook() -> Callable[[], Any]:
    """``gpucontrol.node.hooks.after_iteration`` if importable, else a no-op (with a warning)."""
    try:
        from gpucontrol.node.hooks import after_iteration  # lazy: written by the actuators area
    except ImportError as exc:
        warnings.warn(f"gpucontrol.node.hooks.after_iteration is unavailable ({exc}); the training "
                      "emulator will not sleep between iterations", RuntimeWarning, stacklevel=2)
        return lambda: None
    return after_iteration


def resolve_notify() -> Callable[[], Any]:
    """``gpucontrol.node.hooks.notify_ready`` (writes to ``$GPUCONTROL_READY_FD`` for the MPS
    actuator's shadow restart) if importable, else a no-op."""
    try:
        from gpucontrol.node.hooks import notify_ready
    except ImportError:
        return lambda: False
    return notify_ready


def load_calibration(path: str | os.PathLike[str], cfg: EmulatorConfig) -> dict[str, Any] | None:
    """The saved calibration if it was made for the same workload shape, else None."""
    p = Path(path)
    if not p.exists():
        return None
    data = json.loads(p.read_text())
    same = (data.get("matrix_n") == cfg.matrix_n and data.get("dtype") == cfg.dtype
            and data.get("copy_mb") == cfg.copy_mb
            and math.isclose(data.get("target_iter_s", -1), cfg.target_iter_s))
    return data if same and int(data.get("matmuls", 0)) >= 1 else None


class TrainingEmulator:
    """The iteration loop. ``backend`` does the GPU work; ``hook`` is the sleep hook.

    ``clock`` and ``sleep`` are injectable so the loop is testable with a fake backend.
    """

    def __init__(self, config: EmulatorConfig, backend: Backend, *,
                 hook: Callable[[], Any] | None = None, environ: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, out=None,
                 notify: Callable[[], Any] | None = None) -> None:
        self.cfg = config
        self.backend = backend
        self.hook = hook if hook is not None else resolve_hook()
        self.mps_pct = mps_pct_from_env(environ)
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.notify = notify if notify is not None else resolve_notify()
        self.out = out if out is not None else sys.stdout
        self.stop_requested = False
        self.matmuls: int | None = config.matmuls
        self.per_matmul_s = math.nan

    # -- calibration --------------------------------------------------------------------------
    def calibrate(self, probe: int = 5, repeats: int = 3) -> int:
        """Size the iteration to ``target_iter_s``: time ``probe`` matmuls and a copy, pick
        the count, then correct it once from a full timed iteration."""
        self.backend.time_matmuls(1)  # warm-up: cuBLAS handle, kernel selection
        per = statistics.median(self.backend.time_matmuls(probe) / probe
                                for _ in range(repeats))
        copy_s = statistics.median(self.backend.time_copy() for _ in range(repeats))
        n = matmuls_for_target(self.cfg.target_iter_s, per, copy_s)
        t = self.backend.run_iteration(n)
        measured = t.copy_s + t.compute_s
        if measured > 0:
            per = max(t.compute_s, 1e-9) / n
            n = matmuls_for_target(self.cfg.target_iter_s, per, t.copy_s)
        self.per_matmul_s = per
        return n

    def prepare(self) -> int:
        """Decide the matmuls per iteration (given, saved, or calibrated now)."""
        if self.matmuls is not None:
            self.backend.time_matmuls(1)  # warm-up only
            return self.matmuls
        cal = None
        if self.cfg.calibration_file:
            cal = load_calibration(self.cfg.calibration_file, self.cfg)
        if cal is not None:
            self.matmuls = int(cal["matmuls"])
            self.per_matmul_s = float(cal.get("per_matmul_s", math.nan))
            self.backend.time_matmuls(1)
            return self.matmuls
        if self.mps_pct is not None and self.mps_pct < 100:
            warnings.warn(f"calibrating under MPS {self.mps_pct:g}%: the iteration is sized to "
                          "this share, not to the full GPU; calibrate once at 100% and pass "
                          "--matmuls or --calibration-file", RuntimeWarning, stacklevel=2)
        self.matmuls = self.calibrate()
        if self.cfg.calibration_file:
            write_json({
                "matmuls": self.matmuls, "per_matmul_s": self.per_matmul_s,
                "matrix_n": self.cfg.matrix_n, "dtype": self.cfg.dtype,
                "copy_mb": self.cfg.copy_mb, "target_iter_s": self.cfg.target_iter_s,
                "mps_pct": self.mps_pct}, self.cfg.calibration_file)
        return self.matmuls

    # -- ready / start handshake --------------------------------------------------------------
    def signal_ready(self) -> None:
        """Initialized: write the ready file and notify a launcher (MPS actuator)."""
        pool = getattr(self.backend, "pool", None)
        if self.cfg.ready_file:
            write_json({
                "pid": os.getpid(), "time": self.wall(), "mps_pct": self.mps_pct,
                "matmuls": self.matmuls, "per_matmul_s": self.per_matmul_s,
                "multiprocessor_count": getattr(self.backend, "multiprocessor_count", None),
                "green_pool": pool.describe() if pool is not None else None},
                self.cfg.ready_file)
        self.notify()

    def wait_for_start(self, poll_s: float = 0.002) -> bool:
        """Block until ``start_file`` exists (True) or stop/timeout (False)."""
        if not self.cfg.start_file:
            return True
        deadline = self.clock() + self.cfg.start_timeout_s
        while not os.path.exists(self.cfg.start_file):
            if self.stop_requested or self.clock() > deadline:
                return False
            self.sleep(poll_s)
        return True

    # -- main loop ----------------------------------------------------------------------------
    def _done(self, i: int, t0: float) -> bool:
        if self.stop_requested:
            return True
        if self.cfg.iterations is not None and i >= self.cfg.iterations:
            return True
        return self.cfg.duration_s is not None and self.clock() - t0 >= self.cfg.duration_s

    def run(self) -> EmulatorSummary:
        matmuls = self.prepare()
        self.signal_ready()
        summary = EmulatorSummary(matmuls=matmuls, per_matmul_s=self.per_matmul_s,
                                  mps_pct=self.mps_pct)
        if not self.wait_for_start():
            return summary
        with CSVLog(self.cfg.log_path, LOG_FIELDS) as log:
            t0 = self.clock()
            i = 0
            while not self._done(i, t0):
                start = self.clock()
                start_unix = self.wall()
                timing = self.backend.run_iteration(matmuls)
                end = self.clock()
                self.hook()
                slept = self.clock() - end
                rec = self._record(i, start - t0, start_unix, end - start, slept, timing)
                summary.iterations += 1
                summary.iter_s.append(rec.iter_s)
                summary.sm_fraction.append(rec.sm_fraction)
                summary.sm_share.append(rec.sm_share)
                log.write(rec.as_row())
                if self.cfg.json_lines:
                    self.out.write(json_line(rec.as_row()) + "\n")
                    self.out.flush()
                i += 1
        return summary

    def _record(self, i: int, t_s: float, t_unix: float, iter_s: float, slept: float,
                timing: IterationTiming) -> IterationRecord:
        sm = timing.sm
        frac = sm.fraction if sm is not None else math.nan
        peak = sm.peak_fraction if sm is not None else math.nan
        return IterationRecord(
            iteration=i, t_s=t_s, t_unix=t_unix, iter_s=iter_s, copy_s=timing.copy_s,
            compute_s=timing.compute_s, sleep_s=slept,
            n_sms=sm.n_sms if sm is not None else None, sm_fraction=frac,
            sm_share=sm_share(peak if math.isfinite(peak) else frac, iter_s, slept),
            mps_pct=self.mps_pct, n_sms_peak=sm.peak_sms if sm is not None else None,
            sm_peak_fraction=peak)

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT finish the current step and stop cleanly."""
        stop_on_signals(self)


# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m harness.hil.training_emulator",
        description="CuPy training emulator: matmuls sized to a target iteration time, an "
                    "emulated H2D copy, the cooperative sleep hook, %smid SM sampling.")
    d = EmulatorConfig()
    ap.add_argument("--target-iter-s", type=float, default=d.target_iter_s,
                    help="iteration time on the idle, full GPU (default %(default)s)")
    ap.add_argument("--matrix-n", type=int, default=d.matrix_n)
    ap.add_argument("--dtype", default=d.dtype, choices=("float16", "float32", "float64"))
    ap.add_argument("--copy-mb", type=float, default=d.copy_mb,
                    help="emulated host-to-device copy per iteration, MiB")
    ap.add_argument("--matmuls", type=int, default=None,
                    help="matmuls per iteration (skip calibration)")
    ap.add_argument("--calibration-file", default=None,
                    help="reuse this calibration if present, else calibrate and save it")
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--duration-s", type=float, default=None)
    ap.add_argument("--no-smid", action="store_true", help="do not sample %%smid")
    ap.add_argument("--ready-file", default=os.environ.get("GPUCONTROL_READY_FILE"),
                    help="write this JSON file when initialized (shadow pre-start)")
    ap.add_argument("--start-file", default=os.environ.get("GPUCONTROL_START_FILE"),
                    help="after ready, wait for this file before the first iteration")
    ap.add_argument("--start-timeout-s", type=float, default=d.start_timeout_s)
    ap.add_argument("--log", dest="log_path", default=None,
                    help="per-iteration CSV; '{pid}' in the path becomes the process id")
    ap.add_argument("--json", dest="json_lines", action="store_true",
                    help="print one JSON line per iteration")
    ap.add_argument("--backend", choices=("cupy", "cupy-green", "numpy", "numpy-green"),
                    default="cupy",
                    help="cupy (the GPU, default), cupy-green (the GPU, switching to the "
                         "commanded green-context partition each iteration), numpy (CPU dry "
                         "run, no SM sample) or numpy-green (CPU dry run of the switching)")
    ap.add_argument("--green-shares", default="25,50,75,100",
                    help="cupy-green: the partitions created up front, %% (default %(default)s)")
    ap.add_argument("--green-pool", default="auto",
                    choices=("auto", "cuda.core", "torch", "ctypes"),
                    help="cupy-green: which green-context pool (auto: cuda.core, then the "
                         "ctypes driver layer)")
    ap.add_argument("--spatial-log", default=None,
                    help="cupy-green: CSV of partition switches; '{pid}' becomes the process id")
    return ap


def config_from_args(args: argparse.Namespace) -> EmulatorConfig:
    return EmulatorConfig(
        target_iter_s=args.target_iter_s, matrix_n=args.matrix_n, dtype=args.dtype,
        copy_mb=args.copy_mb, matmuls=args.matmuls, iterations=args.iterations,
        duration_s=args.duration_s, sample_sm=not args.no_smid, ready_file=args.ready_file,
        start_file=args.start_file, log_path=args.log_path,
        calibration_file=args.calibration_file, json_lines=args.json_lines,
        start_timeout_s=args.start_timeout_s)


@gpu_entry_point("python -m harness.hil.training_emulator")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        mps_pct_from_env()  # validate early
    except ValueError as exc:
        print(f"training_emulator: error: {exc}", file=sys.stderr)
        return 2
    green: dict[str, Any] = {}
    if args.backend in ("cupy-green", "numpy-green"):
        from harness.hil.green_emulator import parse_shares

        try:
            green = {"shares_pct": parse_shares(args.green_shares), "spatial_log": args.spatial_log}
            if args.backend == "cupy-green":
                green["pool_backend"] = args.green_pool
        except ValueError as exc:
            print(f"training_emulator: error: --green-shares: {exc}", file=sys.stderr)
            return 2
    backend = make_backend(args.backend, cfg, **green)
    emu = TrainingEmulator(cfg, backend)
    emu.install_signal_handlers()
    summary = emu.run()
    pool = getattr(backend, "pool", None)
    print(json_line({"summary": summary.as_dict(), "green_pool": pool.describe() if pool
                     else None}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
