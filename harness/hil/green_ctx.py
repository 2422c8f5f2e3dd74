"""CUDA green contexts through ctypes: a pool of SM partitions created up front, one stream each.

A restart-free spatial share (issue: green contexts beside MPS restarts). The training creates,
once, one green context per share it may be commanded (e.g. 25/50/75/100 %), each with its own
stream; switching the share at an iteration boundary is then choosing another stream -- no
restart, no new context. The pool is used by the CuPy training emulator
(:mod:`harness.hil.green_emulator`, through ``cupy.cuda.ExternalStream``) and by the spatial
study (:mod:`harness.hil.spatial_study`).

Driver API used (CUDA 12.4+; checked against the driver API reference and the cuda-python
bindings, NOT yet on hardware -- see docs/gpu.md)::

    CUresult cuInit(unsigned int flags)
    CUresult cuDriverGetVersion(int *version)
    CUresult cuDeviceGet(CUdevice *dev, int ordinal)
    CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
    CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource *res, CUdevResourceType type)
    CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
                 const CUdevResource *input, CUdevResource *remaining,
                 unsigned int useFlags, unsigned int minCount)
    CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *desc, CUdevResource *res,
                 unsigned int nbResources)
    CUresult cuGreenCtxCreate(CUgreenCtx *ctx, CUdevResourceDesc desc, CUdevice dev,
                 unsigned int flags)                        # flags: CU_GREEN_CTX_DEFAULT_STREAM
    CUresult cuCtxFromGreenCtx(CUcontext *ctx, CUgreenCtx green)
    CUresult cuGreenCtxStreamCreate(CUstream *s, CUgreenCtx green, unsigned int flags,
                 int priority)                              # 12.5+; flags: NON_BLOCKING
    CUresult cuGreenCtxDestroy(CUgreenCtx green)
    CUresult cuStreamDestroy(CUstream s)   # exported as cuStreamDestroy_v2

``CUdevResource`` (cuda.h)::

    struct { CUdevResourceType type;                  // int, offset 0 (SM = 1)
             unsigned char _internal_padding[92];     // offset 4
             union { CUdevSmResource sm;              // offset 96: smCount (12.4+), then
                     ...; unsigned char _oversize[48]; };  // minSmPartitionSize,
             CUdevResource *nextResource; }           // smCoscheduledAlignment, flags (13.x)
                                                      // nextResource: 13.x only

12.x has no ``nextResource`` (sizeof 144), 13.x has it (sizeof 152). :class:`CUdevResource`
below is larger than both and zero-filled, and only single resources are passed (``nbGroups``
= 1, one resource per descriptor), so the layout difference never matters: no array stride.

SM granularity of a split (``cuDevSmResourceSplitByCount`` documentation): compute capability
6.x min 1 SM; 7.x min 2, multiple of 2; 8.x min 4, multiple of 2; 9.0+ min 8, multiple of 8.
CUDA 13 drivers also report ``minSmPartitionSize`` / ``smCoscheduledAlignment``; with a 13.x
driver, plausible values override the table. The partition actually obtained is read back
(``smCount``), and the %smid sampler measures what the training reaches.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucontrol.errors import GPUUnavailableError

__all__ = [
    "CUdevResource",
    "GreenContextError",
    "GreenContextPool",
    "GreenPartition",
    "PartitionPool",
    "load_driver",
    "plan_sm_counts",
    "sm_granularity",
]

CU_DEV_RESOURCE_TYPE_SM = 1
CU_GREEN_CTX_DEFAULT_STREAM = 0x1
CU_STREAM_NON_BLOCKING = 0x1
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
MIN_DRIVER = 12040


class CUdevResource(ctypes.Structure):
    """``CUdevResource`` with room to spare (see the module docstring)."""

    _fields_ = [("type", ctypes.c_int),
                ("_internal_padding", ctypes.c_ubyte * 92),
                ("smCount", ctypes.c_uint),
                ("minSmPartitionSize", ctypes.c_uint),
                ("smCoscheduledAlignment", ctypes.c_uint),
                ("flags", ctypes.c_uint),
                ("_oversize_rest", ctypes.c_ubyte * 32),
                ("nextResource", ctypes.c_void_p),
                ("_spare", ctypes.c_ubyte * 104)]


assert CUdevResource.smCount.offset == 96 and CUdevResource.nextResource.offset == 144


class GreenContextError(GPUUnavailableError):
    """A driver call failed; the message names the call and the CUDA error."""


def load_driver() -> Any:
    """The CUDA driver library (``libcuda.so.1``) via ctypes.

    Returns
    -------
    ctypes.CDLL
        The library.
    """
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise GreenContextError(f"cannot open the CUDA driver library libcuda.so.1 ({exc})") \
            from exc


def sm_granularity(major: int, minor: int = 0) -> tuple[int, int]:
    """(minimum SMs, step) of a green-context split for a compute capability.

    Parameters
    ----------
    major, minor : int
        Compute capability.

    Returns
    -------
    tuple[int, int]
        Minimum SM count and the multiple counts must be of.

    >>> sm_granularity(9, 0), sm_granularity(8, 6), sm_granularity(7, 5)
    ((8, 8), (4, 2), (2, 2))
    """
    if major >= 9:
        return 8, 8
    if major == 8:
        return 4, 2
    if major == 7:
        return 2, 2
    if major == 6:
        return 1, 1
    raise GreenContextError(f"green contexts need compute capability 6.0+, got {major}.{minor}")


def plan_sm_counts(shares_pct: Sequence[float], total_sms: int, min_sms: int, step: int
                   ) -> list[int]:
    """SM count per commanded share: ``share * total`` rounded to the step, at least the
    minimum, at most the device (100 % is the whole device, unsplit).

    Parameters
    ----------
    shares_pct : sequence of float
        Shares, % in (0, 100].
    total_sms, min_sms, step : int
        The device's SM count and the split granularity.

    Returns
    -------
    list[int]
        One SM count per share.

    >>> plan_sm_counts([100, 50, 25, 5], 132, 8, 8)
    [132, 64, 32, 8]
    """
    out = []
    for s in shares_pct:
        if not 0 < float(s) <= 100:
            raise ValueError(f"shares_pct must be in (0, 100], got {s!r}")
        if float(s) >= 100:
            out.append(int(total_sms))
            continue
        n = round(float(s) / 100 * total_sms / step) * step
        out.append(int(min(max(n, min_sms), total_sms)))
    return out


@dataclass
class GreenPartition:
    """One green context of the pool and its stream (raw driver handles, as ints)."""

    share_pct: float
    sm_count: int
    green_ctx: int
    context: int
    stream: int
    create_s: float = 0.0

    @property
    def sm_fraction(self) -> float:
        return self.sm_count / self.total_sms if self.total_sms else float("nan")

    total_sms: int = 0


@dataclass
class PartitionPool:
    """What every green-context pool offers (:mod:`harness.hil.green_pools` has the others:
    cuda.core, PyTorch, the CPU dry run): partitions made up front, one per share and the
    full device; :meth:`select` picks one.

    Parameters
    ----------
    shares_pct : sequence of float
        The shares to offer, % (100 is always added: the full device).
    device : int
        CUDA device ordinal.
    clock : callable
        For the creation and selection timings.
    """

    shares_pct: Sequence[float] = (25.0, 50.0, 75.0, 100.0)
    device: int = 0
    clock: Callable[[], float] = time.perf_counter
    partitions: list[GreenPartition] = field(default_factory=list)
    total_sms: int = 0
    compute_capability: tuple[int, int] = (0, 0)
    granularity: tuple[int, int] = (0, 0)
    driver_version: int = 0
    select_s: list[float] = field(default_factory=list)
    backend: str = "?"
    tried: list[str] = field(default_factory=list)

    def shares(self) -> list[float]:
        """The shares to make, ascending, 100 % included."""
        return sorted({float(s) for s in self.shares_pct} | {100.0})

    def open(self) -> PartitionPool:
        """Create every partition (idempotent)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release every partition (idempotent)."""
        self.partitions = []

    def __enter__(self) -> PartitionPool:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def select(self, share_pct: float | None) -> GreenPartition:
        """The partition for a commanded share: the largest whose share does not exceed it
        (the smallest when all do; the full device for None). Timed into ``select_s``.

        Parameters
        ----------
        share_pct : float or None
            Commanded share, % (None: no command, the full device).

        Returns
        -------
        GreenPartition
            The partition to launch on.
        """
        t0 = self.clock()
        if not self.partitions:
            raise RuntimeError("select() before open()")
        want = 100.0 if share_pct is None else float(share_pct)
        fits = [p for p in self.partitions if p.share_pct <= want + 1e-9]
        part = fits[-1] if fits else self.partitions[0]
        self.select_s.append(self.clock() - t0)
        return part

    def describe(self) -> dict[str, Any]:
        """The pool for result metadata."""
        return {"backend": self.backend, "not_used": list(self.tried), "device": self.device,
                "total_sms": self.total_sms,
                "compute_capability": ".".join(map(str, self.compute_capability)),
                "granularity_min_sms": self.granularity[0],
                "granularity_step_sms": self.granularity[1],
                "driver_api": self.driver_version,
                "partitions": [{"share_pct": p.share_pct, "sm_count": p.sm_count,
                                "create_s": p.create_s} for p in self.partitions]}


@dataclass
class GreenContextPool(PartitionPool):
    """Green contexts for a set of shares through ctypes on the driver API: the fallback for
    stacks whose cuda.core and PyTorch have no green contexts (:func:`harness.hil.green_pools.
    open_pool` tries those first).

    Parameters
    ----------
    shares_pct, device, clock : as :class:`PartitionPool`
    lib : object, optional
        The driver library (tests inject a fake); :func:`load_driver` otherwise.
    """

    lib: Any = None
    backend: str = "ctypes"

    # ---- driver calls -------------------------------------------------------------------------
    def _err(self, rc: int) -> str:
        name = ctypes.c_char_p()
        try:
            if self.lib.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
                return f"{name.value.decode()} ({rc})"
        except AttributeError:
            pass
        return f"CUresult {rc}"

    def _call(self, fn: str, *args: Any) -> None:
        f = getattr(self.lib, fn, None)
        if f is None:
            raise GreenContextError(f"the CUDA driver has no {fn} (green contexts need a "
                                    f"CUDA 12.4+ driver)")
        rc = f(*args)
        if rc != 0:
            raise GreenContextError(f"{fn} failed: {self._err(rc)}")

    def _attr(self, attr: int, dev: ctypes.c_int) -> int:
        v = ctypes.c_int(0)
        self._call("cuDeviceGetAttribute", ctypes.byref(v), attr, dev)
        return int(v.value)

    # ---- lifecycle ----------------------------------------------------------------------------
    def open(self) -> GreenContextPool:
        """Create every partition (idempotent)."""
        if self.partitions:
            return self
        if self.lib is None:
            self.lib = load_driver()
        ver = ctypes.c_int(0)
        self._call("cuDriverGetVersion", ctypes.byref(ver))
        self.driver_version = int(ver.value)
        if self.driver_version < MIN_DRIVER:
            raise GreenContextError(f"green contexts need CUDA driver API 12.4+, the driver "
                                    f"offers {self.driver_version}")
        self._call("cuInit", 0)
        dev = ctypes.c_int(0)
        self._call("cuDeviceGet", ctypes.byref(dev), int(self.device))
        self.total_sms = self._attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
        self.compute_capability = (self._attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                                   self._attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
        full = CUdevResource()
        self._call("cuDeviceGetDevResource", dev, ctypes.byref(full), CU_DEV_RESOURCE_TYPE_SM)
        if full.smCount:
            self.total_sms = int(full.smCount)
        lo, step = sm_granularity(*self.compute_capability)
        # CUDA 13 drivers report the partition rules themselves (in 12.x those bytes are the
        # union's opaque rest, so they are read only from 13.0 on); trust plausible values
        if self.driver_version >= 13000:
            if 0 < full.minSmPartitionSize <= self.total_sms:
                lo = int(full.minSmPartitionSize)
            if 0 < full.smCoscheduledAlignment <= self.total_sms:
                step = int(full.smCoscheduledAlignment)
        self.granularity = (lo, step)
        shares = self.shares()
        try:
            for share, n in zip(shares, plan_sm_counts(shares, self.total_sms, lo, step)):
                self.partitions.append(self._make(share, n, full, dev))
        except BaseException:
            self.close()
            raise
        return self

    def _make(self, share: float, n: int, full: CUdevResource, dev: ctypes.c_int
              ) -> GreenPartition:
        t0 = self.clock()
        if n >= self.total_sms:
            res = full
        else:
            res, rest = CUdevResource(), CUdevResource()
            groups = ctypes.c_uint(1)
            self._call("cuDevSmResourceSplitByCount", ctypes.byref(res), ctypes.byref(groups),
                       ctypes.byref(full), ctypes.byref(rest), 0, int(n))
            if groups.value < 1:
                raise GreenContextError(f"cuDevSmResourceSplitByCount made no group of {n} SMs")
        desc = ctypes.c_void_p()
        self._call("cuDevResourceGenerateDesc", ctypes.byref(desc), ctypes.byref(res), 1)
        g = ctypes.c_void_p()
        self._call("cuGreenCtxCreate", ctypes.byref(g), desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)
        ctx = ctypes.c_void_p()
        stream = ctypes.c_void_p()
        try:
            self._call("cuCtxFromGreenCtx", ctypes.byref(ctx), g)
            if hasattr(self.lib, "cuGreenCtxStreamCreate"):
                self._call("cuGreenCtxStreamCreate", ctypes.byref(stream), g,
                           CU_STREAM_NON_BLOCKING, 0)
            else:  # 12.4: a stream created while the green context is current belongs to it
                self._call("cuCtxPushCurrent_v2", ctx)
                try:
                    self._call("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
                finally:
                    popped = ctypes.c_void_p()
                    self._call("cuCtxPopCurrent_v2", ctypes.byref(popped))
        except BaseException:
            self._call("cuGreenCtxDestroy", g)
            raise
        return GreenPartition(share, int(res.smCount) or n, int(g.value or 0),
                              int(ctx.value or 0), int(stream.value or 0),
                              self.clock() - t0, self.total_sms)

    def close(self) -> None:
        """Destroy the streams and green contexts (idempotent; errors are ignored)."""
        parts, self.partitions = self.partitions, []
        for p in parts:
            for fn, h in (("cuStreamDestroy_v2", p.stream), ("cuGreenCtxDestroy", p.green_ctx)):
                f = getattr(self.lib, fn, None)
                if f is not None and h:
                    f(ctypes.c_void_p(h))
