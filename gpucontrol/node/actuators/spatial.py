"""Spatial-share actuators: one interface for every way of changing the training's SM share.

The GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-B, changes the training's share with the
MPS active-thread percentage, which MPS fixes when a process starts: every change is a restart
(5-15 s in the paper), which is why its outer loop runs rarely. Other mechanisms change the
share without a restart, so the controller must be told what a change costs. Backends:

* ``mps-restart`` -- :class:`MPSRestartBackend`, wrapping
  :class:`gpucontrol.node.actuators.mps.MPSActuator` unchanged (cold or shadow pre-start).
  Not restart-free; latency = the measured restart (``RestartResult.total_s``).
* ``green-context`` -- :class:`GreenContextBackend`, cooperative: the training process creates
  one CUDA green context per share up front (CUDA driver API 12.4+) and, at each iteration
  boundary, launches on the stream of the partition the daemon commands. The command travels
  in the hook file the sleep hook already reads (:meth:`gpucontrol.node.hooks.HookWriter.
  set_share`; flags bits 8-15), so there is one channel. The daemon's cost of a change is one
  mmap write (microseconds); the training follows within one iteration.
* ``cpu.max`` -- :class:`CPUShareBackend`, an adapter around the CPU plant's cgroup ``cpu.max``
  actuator (``gpucontrol.node.actuators.cpu_share``, another module of this package).

:func:`detect_backends` reports, at start-up, which backends this machine offers and why not
(binary missing, driver too old, symbol missing, module absent), without initialising CUDA;
:func:`make_backend` builds one by name from the registry :data:`BACKENDS`.

No GPU package is imported here; the green-context probe only opens the driver library with
ctypes and reads its version (``cuDriverGetVersion`` works before ``cuInit``).
"""

from __future__ import annotations

import abc
import ctypes
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpucontrol._validate import in_range, positive
from gpucontrol.errors import ConfigurationError

__all__ = [
    "BACKENDS",
    "GREEN_CONTEXT_MIN_DRIVER",
    "GREEN_SYMBOLS",
    "BackendInfo",
    "CPUShareBackend",
    "GreenContextBackend",
    "MPSRestartBackend",
    "SpatialShareBackend",
    "change_cost_periods",
    "detect_backends",
    "make_backend",
    "probe_green_context_driver",
]

#: CUDA driver API version (``cuDriverGetVersion``) that introduced green contexts (12.4).
GREEN_CONTEXT_MIN_DRIVER = 12040
#: Driver symbols the green-context backend needs (cuGreenCtxStreamCreate, 12.5+, is optional:
#: without it the training creates the stream with the green context current).
GREEN_SYMBOLS = ("cuDeviceGetDevResource", "cuDevSmResourceSplitByCount",
                 "cuDevResourceGenerateDesc", "cuGreenCtxCreate", "cuCtxFromGreenCtx",
                 "cuGreenCtxDestroy")


class SpatialShareBackend(abc.ABC):
    """What the node agent needs from a spatial-share actuator.

    Attributes
    ----------
    name : str
        The registry name (``"mps-restart"``, ``"green-context"``, ``"cpu.max"``).
    restart_free : bool
        True when a change does not restart the training.
    granularity_pct : float
        The smallest step of the share, % (commands are rounded to it by the backend).
    """

    name: str = ""
    restart_free: bool = False
    granularity_pct: float = 1.0

    def __init__(self) -> None:
        self.share_pct: float | None = None
        self.latencies_s: list[float] = []

    @abc.abstractmethod
    def _apply(self, pct: float) -> float:
        """Apply ``pct`` (already validated); return the measured change latency, s."""

    def set_share_pct(self, pct: float) -> float:
        """Command the training's share, % in [1, 100].

        Parameters
        ----------
        pct : float
            The new share, %.

        Returns
        -------
        float
            The measured change latency, s (what the controller pays per change).
        """
        p = in_range("share_pct", pct, 1.0, 100.0)
        lat = float(self._apply(p))
        self.latencies_s.append(lat)
        return lat

    @property
    def resize_latency_s(self) -> float:
        """Median measured change latency, s (``expected_latency_s`` before any change)."""
        return statistics.median(self.latencies_s) if self.latencies_s else \
            self.expected_latency_s

    #: A prior for the latency before the first change, s.
    expected_latency_s: float = math.nan

    def info(self) -> BackendInfo:
        """This backend as :func:`detect_backends` describes it (available).

        Returns
        -------
        BackendInfo
            Name, restart-free flag, granularity and latency.
        """
        return BackendInfo(self.name, True, "", self.restart_free, self.granularity_pct,
                           self.resize_latency_s)

    def close(self) -> None:  # noqa: B027 -- optional hook
        """Release what the backend holds (default: nothing)."""


# ---------------------------------------------------------------------------------------------
class MPSRestartBackend(SpatialShareBackend):
    """Today's knob: restart the training under a new MPS active-thread percentage.

    Parameters
    ----------
    actuator : MPSActuator-like
        Has ``apply(pct) -> RestartResult`` and ``shadow`` (the existing actuator, unchanged).
    expected_latency_s : float
        Prior for the restart time, s, before one was measured (the paper: 5-15 s).
    round_pct : bool
        Round a command to a whole percent (the granularity); False passes the controller's
        percentage as is (what the daemon does, as before this backend existed).
    """

    name = "mps-restart"
    restart_free = False
    granularity_pct = 1.0

    def __init__(self, actuator: Any, *, expected_latency_s: float = 10.0,
                 round_pct: bool = True) -> None:
        super().__init__()
        self.actuator = actuator
        self.expected_latency_s = positive("expected_latency_s", expected_latency_s)
        self.round_pct = bool(round_pct)
        self.results: list[Any] = []

    def _apply(self, pct: float) -> float:
        res = self.actuator.apply(round(pct) if self.round_pct else pct)
        self.results.append(res)
        if res.ok:
            self.share_pct = float(res.new_pct)
        # a shadow restart's cost to the training is its downtime (~0); the controller pays the
        # whole change (the new share is in force only at its end), so report total_s
        return float(res.total_s)


class GreenContextBackend(SpatialShareBackend):
    """Cooperative green-context partitions, commanded through the hook file.

    Parameters
    ----------
    writer : HookWriter-like
        Has ``set_share(int | None)`` (:class:`gpucontrol.node.hooks.HookWriter`).
    granularity_pct : float
        The share step, % (the SM step of the GPU over its SM count, e.g. 8/132 on an H100).
    iteration_s : float
        The training's iteration time, s: the training switches at its next iteration
        boundary, so a change is in force within this long (the ``expected_latency_s``).
    shares_pct : sequence of float, optional
        The partitions the training created (e.g. 25, 50, 75, 100). When given, a command is
        published as is, but ``share_pct`` reports the partition that will run it (the
        largest not above it, as the training picks), and ``granularity_pct`` becomes the
        widest gap between partitions when that is coarser than the SM step.
    clock : callable
        Monotonic clock (injectable for tests).
    """

    name = "green-context"
    restart_free = True

    def __init__(self, writer: Any, *, granularity_pct: float = 1.0, iteration_s: float = 0.2,
                 shares_pct: Sequence[float] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self.writer = writer
        self.granularity_pct = in_range("granularity_pct", granularity_pct, 0.01, 100.0)
        self._step = self.granularity_pct  # the SM step: what a command is rounded to
        self.expected_latency_s = positive("iteration_s", iteration_s)
        self.clock = clock
        self.shares_pct: list[float] | None = None
        if shares_pct is not None:
            pool = sorted({in_range("shares_pct", s, 1.0, 100.0) for s in shares_pct} | {100.0})
            self.shares_pct = pool
            gaps = [b - a for a, b in zip([0.0, *pool], pool)]
            self.granularity_pct = max(self.granularity_pct, max(gaps))

    def _apply(self, pct: float) -> float:
        step = self._step
        # 100 % is the whole device (no command), whatever the step
        q = 100 if pct >= 100 else min(100, max(1, round(round(pct / step) * step)))
        t0 = self.clock()
        self.writer.set_share(None if q >= 100 else int(q))
        lat = self.clock() - t0
        if self.shares_pct is not None:
            fits = [s for s in self.shares_pct if s <= q + 1e-9]
            self.share_pct = fits[-1] if fits else self.shares_pct[0]
        else:
            self.share_pct = float(q)
        return lat

    def close(self) -> None:
        """Withdraw the share command (the training returns to the full device)."""
        self.writer.set_share(None)


class CPUShareBackend(SpatialShareBackend):
    """Adapter for the CPU plant's ``cpu.max`` actuator (``set_share_pct(pct) -> s``,
    ``granularity_pct``, ``backend``).

    Parameters
    ----------
    actuator : object
        The cpu.max share actuator.
    """

    name = "cpu.max"
    restart_free = True

    def __init__(self, actuator: Any) -> None:
        super().__init__()
        self.actuator = actuator
        self.granularity_pct = float(getattr(actuator, "granularity_pct", 1.0))
        self.expected_latency_s = 1e-3

    def _apply(self, pct: float) -> float:
        lat = float(self.actuator.set_share_pct(pct))
        self.share_pct = pct
        return lat

    def close(self) -> None:
        """Close the actuator when it has ``close`` (the CPU share: the cap lifted)."""
        close = getattr(self.actuator, "close", None)
        if callable(close):
            close()


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackendInfo:
    """What :func:`detect_backends` found for one backend.

    Parameters
    ----------
    name : str
        Registry name.
    available : bool
        Whether it can be used here.
    reason : str
        Why not (empty when available), or a caveat.
    restart_free : bool
        Whether a change avoids a restart.
    granularity_pct : float
        Share step, % (NaN when unknown before the GPU is opened).
    latency_s : float
        Expected change latency, s (NaN when unknown).
    """

    name: str
    available: bool
    reason: str
    restart_free: bool
    granularity_pct: float
    latency_s: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (unknown numbers become None)."""
        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {"name": self.name, "available": self.available, "reason": self.reason,
                "restart_free": self.restart_free, "granularity_pct": num(self.granularity_pct),
                "latency_s": num(self.latency_s)}


def _load_cuda() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def probe_green_context_driver(loader: Callable[[], Any] = _load_cuda) -> tuple[bool, str, int]:
    """Whether the CUDA driver offers green contexts, without initialising CUDA.

    Parameters
    ----------
    loader : callable
        Returns the driver library (ctypes); tests inject a fake.

    Returns
    -------
    tuple[bool, str, int]
        (available, why not or "", driver API version or 0).
    """
    try:
        lib = loader()
    except OSError as exc:
        return False, f"no CUDA driver library ({exc})", 0
    ver = ctypes.c_int(0)
    try:
        rc = lib.cuDriverGetVersion(ctypes.byref(ver))
    except AttributeError:
        return False, "the driver library has no cuDriverGetVersion", 0
    if rc != 0:
        return False, f"cuDriverGetVersion failed (CUresult {rc})", 0
    v = int(ver.value)
    if v < GREEN_CONTEXT_MIN_DRIVER:
        return (False, f"driver API {v // 1000}.{v % 1000 // 10} < 12.4 (green contexts need "
                f"CUDA 12.4+)", v)
    missing = [s for s in GREEN_SYMBOLS if not hasattr(lib, s)]
    if missing:
        return False, f"driver lacks {', '.join(missing)}", v
    return True, "", v


def _cpu_share_available(cgroup_root: str) -> tuple[bool, str]:
    """The CPU-share actuator's own detection (v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us`` on
    a hybrid host), so both say the same."""
    from pathlib import Path

    from gpucontrol.node.actuators.cpu_share import detect_backend

    try:
        detect_backend(Path(cgroup_root))
    except ConfigurationError as exc:
        return False, str(exc)
    return True, ""


def detect_backends(*, mps_binary: str = "nvidia-cuda-mps-control",
                    driver_loader: Callable[[], Any] = _load_cuda,
                    cgroup_root: str = "/sys/fs/cgroup") -> list[BackendInfo]:
    """Which spatial-share backends this machine offers, and why not.

    Parameters
    ----------
    mps_binary : str
        The MPS control binary (``mps-restart`` needs it).
    driver_loader : callable
        Opens the CUDA driver library (``green-context``); tests inject a fake.
    cgroup_root : str
        The cgroup mount (``cpu.max``: v2, or v1 ``cpu.cfs_quota_us`` on a hybrid host).

    Returns
    -------
    list[BackendInfo]
        One entry per registered backend, best first: green contexts inside MPS where the
        driver has them and MPS is here (restart-free, and on an H100 they matched or beat
        MPS restarts at every share), then MPS restarts, green contexts without MPS (they
        confine the training but do not lower the inference's latency), the CPU quota.
    """
    from gpucontrol.node.actuators.mps import MPSControl

    mps_ok = MPSControl(mps_binary).available()
    mps = BackendInfo("mps-restart", mps_ok, "" if mps_ok else f"{mps_binary} not found",
                      False, 1.0, 10.0)
    ok, why, _ver = probe_green_context_driver(driver_loader)
    if ok and mps_ok:
        why = ("cooperative, inside MPS: both processes MPS clients, the training on a "
               "green-context partition pool, no restart (granularity known once the GPU is "
               "opened); ranked first")
    elif ok:
        why = (f"cooperative; the driver has green contexts but MPS is not here ({mps_binary} "
               "not found): without MPS the processes time-slice and a partition does not "
               "lower the inference's latency")
    green = BackendInfo("green-context", ok, why, True, math.nan, math.nan)
    ok, why = _cpu_share_available(cgroup_root)
    cpu = BackendInfo("cpu.max", ok, why, True, 1.0, 1e-3)
    return [green, mps, cpu] if green.available and mps_ok else [mps, green, cpu]


def _make_mps(**kw: Any) -> SpatialShareBackend:
    return MPSRestartBackend(**kw)


def _make_green(**kw: Any) -> SpatialShareBackend:
    return GreenContextBackend(**kw)


def _make_cpu(**kw: Any) -> SpatialShareBackend:
    return CPUShareBackend(**kw)


#: name -> factory; the factories take the backend's keyword arguments.
BACKENDS: dict[str, Callable[..., SpatialShareBackend]] = {
    "mps-restart": _make_mps,
    "green-context": _make_green,
    "cpu.max": _make_cpu,
}


def make_backend(name: str, **kwargs: Any) -> SpatialShareBackend:
    """Build a registered backend.

    Parameters
    ----------
    name : str
        One of :data:`BACKENDS`.
    **kwargs : Any
        The backend's arguments (``actuator=``, ``writer=``, ...).

    Returns
    -------
    SpatialShareBackend
        The backend.
    """
    if name not in BACKENDS:
        raise ConfigurationError(f"spatial backend must be one of {', '.join(BACKENDS)}, "
                                 f"got {name!r}")
    return BACKENDS[name](**kwargs)


def change_cost_periods(backend: SpatialShareBackend | BackendInfo, period_s: float) -> float:
    """A backend's change latency in control periods (what the controller's outer decision
    weighs: below 1, a change fits in one period and the outer loop may run every period).

    Parameters
    ----------
    backend : SpatialShareBackend or BackendInfo
        The backend.
    period_s : float
        The control period, s.

    Returns
    -------
    float
        Latency over period (NaN when unknown).
    """
    p = positive("period_s", period_s)
    lat = backend.latency_s if isinstance(backend, BackendInfo) else backend.resize_latency_s
    return float(lat) / p
