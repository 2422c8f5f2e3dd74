"""``CPUPlant``: real inference and training processes sharing this machine's CPUs.

The registry's ``cpu`` plant (:func:`make_cpu_plant`). It starts the inference service
(:mod:`harness.hil.cpu.inference`, two BLAS threads) and the training
(:mod:`harness.hil.cpu.training`, one BLAS thread plus a loader worker child) and exposes the
Plant protocol: ``step(actuation, period_s)`` applies the sleep with the node agent's own
SIGSTOP/SIGCONT duty cycler (:class:`gpucontrol.node.actuators.sleep.SignalDutyCycler`) and the
training's CPU share with :class:`gpucontrol.node.actuators.cpu_share.CpuShare` (the analogue
of the MPS share, changed without a restart; fixed at 100 % when no cgroup CPU controller is
writable), waits one period and reads the latency from the service's Prometheus histogram
with :class:`gpucontrol.node.prom_source.PrometheusSource` -- the daemon's own readers.

For the daemon pipeline (``gpucontrol demo --plant cpu``) the plant also gives
``training_pid``, ``metrics_url``, :meth:`CPUPlant.release` (hand the knobs over: resume and
uncap the training) and :meth:`CPUPlant.training_iterations`. :meth:`CPUPlant.close` stops
both services, resumed first; nothing is left stopped or orphaned.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpucontrol import Actuation
from gpucontrol.errors import ConfigurationError, PlantUnavailable
from gpucontrol.node.actuators.cpu_share import CpuShare
from gpucontrol.node.actuators.sleep import SignalDutyCycler
from gpucontrol.node.prom_source import PrometheusSource
from harness.sim.protocol import PeriodResult, actuation_knobs

__all__ = ["CPUPlant", "CPUPlantConfig", "make_cpu_plant", "presets_text"]


@dataclass(frozen=True)
class CPUPlantConfig:
    """The CPU plant's settings.

    Parameters
    ----------
    backend : {'auto', 'numpy', 'torch'}
        Library of both services (``auto``: torch when importable).
    rate_hz : float
        Inference batches per second.
    batch, burst_batch : int
        Inference batch size, normally and during a burst (``set_load(batch=...)`` picks
        between the two).
    train_batch : int
        Training batch size.
    sizes : str
        MLP layer widths, comma-separated.
    infer_threads, train_threads : int
        BLAS threads of the inference (2: it wants both cores, as an inference kernel wants
        the whole GPU) and of the training (1, plus its loader worker: more BLAS threads on a
        shared 2-core machine spin and slow every step).
    run_quantum_s : float
        Run time between two pauses of the sleep actuator (0.03 s: tens of run/stop cycles
        per second, so a control period averages many of them; at 0.2 s a 2 s period held
        only 3-10 cycles, and their count and phase against the inference batches scattered
        the period's mean latency by up to 45 % rms, against 5-27 % at 0.02-0.04 s under
        the same shared load, ``benchmarks/cpu_noise.py``).
    share : bool
        Use the cgroup CPU share knob when the host allows it.
    weight : int
        CPU weight of the plant's own cgroup (both services) against the rest of the machine,
        cgroup v2 units (100 = one ordinary process group); a high weight keeps other load on a
        shared machine from dominating the plant, as a GPU is usually not shared further.
    """

    backend: str = "numpy"
    rate_hz: float = 30.0
    batch: int = 256
    burst_batch: int = 320
    train_batch: int = 256
    sizes: str = "512,1024,1024,10"
    infer_threads: int = 2
    train_threads: int = 1
    run_quantum_s: float = 0.03
    share: bool = True
    weight: int = 1000


PRESETS: dict[str, CPUPlantConfig] = {
    "default": CPUPlantConfig(),
    "small": CPUPlantConfig(rate_hz=30.0, batch=128, burst_batch=160, train_batch=128,
                            sizes="256,512,512,10"),
}
#: Other plants' preset names that the CPU plant takes as one of its own: the experiments'
#: default preset name, ``fig8``, runs the default.
PRESET_ALIASES: dict[str, str] = {"fig8": "default"}
PRESETS.update({a: PRESETS[n] for a, n in PRESET_ALIASES.items()})


def presets_text() -> str:
    """The CPU plant's presets as the command line's help and errors name them: its own, and
    the other plants' default name that maps to one (:data:`PRESET_ALIASES`)."""
    own = [n for n in PRESETS if n not in PRESET_ALIASES]
    alias = "; ".join(f"{a} means {n}" for a, n in PRESET_ALIASES.items())
    return " or ".join(own) + (f" ({alias})" if alias else "")


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class CPUPlant:
    """The live CPU co-location (see the module docstring).

    Parameters
    ----------
    config : CPUPlantConfig
        Settings.
    workdir : str, os.PathLike or None
        Folder for the port and progress files (None: a temporary one).
    start_timeout_s : float
        How long the services may take to come up.
    """

    #: What the plant's spatial share is (labels of figures and reports): the training's
    #: cgroup CPU quota, not an MPS active-thread percentage.
    share_name = "CPU share"

    def __init__(self, config: CPUPlantConfig | None = None, *,
                 workdir: str | os.PathLike[str] | None = None,
                 start_timeout_s: float = 30.0) -> None:
        self.config = c = config or CPUPlantConfig()
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="gpucontrol-cpu-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port_file = str(self.workdir / "inference.port")
        self.progress_file = str(self.workdir / "training.progress")
        for f in (self.port_file, self.progress_file):
            Path(f).unlink(missing_ok=True)
        self.cycler: SignalDutyCycler | None = None
        self.share: CpuShare | None = None
        self.group: CpuShare | None = None
        self.group_name = f"gpucontrol-cpuplant-{os.getpid()}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.batch = c.batch
        self.t = 0.0
        self.mps_enabled = False
        self._iters = 0
        try:
            self.inference = self._spawn(
                ["harness.hil.cpu.inference", "--backend", c.backend, "--rate", str(c.rate_hz),
                 "--batch", str(c.batch), "--burst-batch", str(c.burst_batch), "--sizes",
                 c.sizes, "--port", "0", "--port-file", self.port_file], c.infer_threads)
            self.training = self._spawn(
                ["harness.hil.cpu.training", "--backend", c.backend, "--batch",
                 str(c.train_batch), "--sizes", c.sizes, "--progress-file",
                 self.progress_file], c.train_threads)
            self._wait_ready(start_timeout_s)
            self.metrics_url = f"http://127.0.0.1:{Path(self.port_file).read_text()}/metrics"
            self.source = PrometheusSource(self.metrics_url).start()
            self.cycler = SignalDutyCycler([self.training.pid], run_quantum_s=c.run_quantum_s,
                                           max_sleep_s=60.0).start()
            if c.share:
                try:
                    self.group = CpuShare([self.inference.pid, self.training.pid],
                                          name=self.group_name, weight=c.weight)
                    self.share = CpuShare([self.training.pid], name=self.training_cgroup)
                    self.mps_enabled = True
                except (ConfigurationError, OSError):
                    self.share = None
            self._iters = self.training_iterations()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ processes
    def _spawn(self, args: list[str], threads: int) -> subprocess.Popen[bytes]:
        with open(self.workdir / f"{args[0].rsplit('.', 1)[-1]}.err", "wb") as err:
            p = subprocess.Popen([sys.executable, "-m", *args], env=_env(threads),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        self.procs.append(p)
        return p

    def _wait_ready(self, timeout: float) -> None:
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            if all(Path(f).exists() for f in (self.port_file, self.progress_file)) and \
                    self.training_iterations() > 0:
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise PlantUnavailable(f"CPU plant service exited with {p.returncode} "
                                           f"(see {self.workdir})")
            time.sleep(0.05)
        raise PlantUnavailable(f"CPU plant services not ready in {timeout:g} s")

    @property
    def training_pid(self) -> int:
        """PID of the training process (its loader worker is a child)."""
        return self.training.pid

    @property
    def training_cgroup(self) -> str:
        """The training's CPU-share group, relative to the controller root (``--share-cgroup``)."""
        return f"{self.group_name}/training"

    @property
    def inference_pid(self) -> int:
        """PID of the inference service."""
        return self.inference.pid

    def training_iterations(self) -> int:
        """Training iterations so far (from the progress file; 0 before the first).

        Returns
        -------
        int
            The count.
        """
        try:
            return int(Path(self.progress_file).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return self._iters

    # ------------------------------------------------------------------ protocol
    def set_load(self, **changes: Any) -> None:
        """``batch=`` the burst batch (SIGUSR1) or anything else (SIGUSR2, the normal one).

        Parameters
        ----------
        **changes : Any
            ``batch``; other fields are refused.
        """
        bad = set(changes) - {"batch"}
        if bad:
            raise ValueError(f"the CPU plant's load has only 'batch', got {sorted(bad)}")
        if "batch" in changes:
            burst = int(changes["batch"]) >= self.config.burst_batch
            self.inference.send_signal(signal.SIGUSR1 if burst else signal.SIGUSR2)
            self.batch = self.config.burst_batch if burst else self.config.batch

    def step(self, actuation: Actuation, period_s: float) -> PeriodResult:
        """Apply the sleep and share, run ``period_s`` of wall time, report the period.

        Parameters
        ----------
        actuation : Actuation
            ``sleep_s`` and ``mps_pct`` (the training's CPU share, %).
        period_s : float
            Wall-clock seconds.

        Returns
        -------
        PeriodResult
            Latency from the histogram deltas, training iterations, knobs in force.
        """
        sleep_s, mps_pct, _ = actuation_knobs(actuation)  # a bad one is refused, not clamped
        if self.cycler is None:
            raise RuntimeError("the plant's knobs were released")
        self.cycler.set_sleep(sleep_s)
        share = 100.0
        if self.share is not None:
            share = max(mps_pct, 5.0)  # the quota's floor; the result reports the share held
            if share != self.share.share_pct:
                self.share.set_share_pct(share)
        self.source.collect()  # the period starts now (drops what came before)
        time.sleep(period_s)
        st = self.source.collect()
        it = self.training_iterations()
        d_it, self._iters = it - self._iters, it
        self.t += period_s
        return PeriodResult(mean_ms=st.mean_ms, p99_ms=st.p99_ms, count=st.count,
                            t_end_s=self.t, period_s=period_s, inference_batches=st.count,
                            inference_images=st.count * self.batch, training_iterations=d_it,
                            sleep_s=sleep_s, mps_pct=share, batch=self.batch)

    def expected_latency_ms(self, *_: Any, **__: Any) -> float:
        """A real plant has no noise-free view (NaN)."""
        return math.nan

    # ------------------------------------------------------------------ teardown
    def release(self) -> None:
        """Resume and uncap the training and stop driving it (a daemon takes over; the
        training goes back into the plant's weighted group)."""
        if self.cycler is not None:
            self.cycler.close()
            self.cycler = None
        if self.share is not None:
            self.share.close()
            self.share = None
            if self.group is not None and self.training.poll() is None:
                self.group.add([self.training.pid])

    def close(self) -> None:
        """Release the knobs, stop both services (resumed first), wait for them."""
        self.release()
        if self.group is not None:
            self.group.close()
            self.group = None
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.terminate()
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> CPUPlant:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_cpu_plant(preset: str = "default", *, seed: int = 0, **overrides: Any) -> CPUPlant:
    """The registry's factory for ``"cpu"``.

    Parameters
    ----------
    preset : str
        ``"default"`` (also ``"fig8"``, the experiments' default name) or ``"small"``.
    seed : int
        Unused (the plant's noise is the machine's own); kept for the factory signature.
    **overrides : Any
        :class:`CPUPlantConfig` fields, plus ``workdir``.

    Returns
    -------
    CPUPlant
        A started plant; close it when done.
    """
    if preset not in PRESETS:
        raise ValueError(f"the CPU plant's preset must be {presets_text()}, got {preset!r}")
    workdir = overrides.pop("workdir", None)
    return CPUPlant(replace(PRESETS[preset], **overrides), workdir=workdir)
