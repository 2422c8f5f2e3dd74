"""Green-context pools through kept libraries first: cuda.core, then PyTorch, then ctypes.

A pool (:class:`~harness.hil.green_ctx.PartitionPool`) makes one green context per share up
front, each with a stream, and :meth:`~harness.hil.green_ctx.PartitionPool.select` picks the
partition of a commanded share at an iteration boundary. Four implementations keep one
contract (``tests/harness/hil/test_green_pool_contract.py`` runs it against each one this
machine has):

* :class:`CudaCorePool` -- NVIDIA's ``cuda.core`` (cuda-python): ``Device.resources.sm``,
  ``SMResource.split(SMResourceOptions(count=n))``, ``Device.create_context(ContextOptions(
  resources=[group]))``, ``Context.create_stream()``. Present in cuda-core 1.x (checked
  against 1.2.2); its split goes through the driver's newer resource-split entry points, so an
  older driver (the H100 run had CUDA 13.0) may refuse it, and :func:`open_pool` falls back.
* :class:`TorchPool` -- ``torch.cuda.green_contexts.GreenContext.create(num_sms=...,
  device_id=...)`` and its ``Stream()`` (PyTorch 2.8+ built with CUDA 12.8+); the raw stream
  handle is ``stream.cuda_stream``. For a process that already holds torch; the training
  script's own path is :class:`gpucontrol.node.green_torch.GreenPartitions`.
* :class:`~harness.hil.green_ctx.GreenContextPool` -- hand-written ctypes on the driver API
  (12.4+): the fallback for stacks without the two above.
* :class:`SimulatedPool` -- the selection rule without a GPU (the ``numpy-green`` dry run).

Every partition's ``stream`` is a raw ``CUstream`` handle (an int) that CuPy
(``cupy.cuda.ExternalStream``) and PyTorch (``torch.cuda.ExternalStream``) can launch on.
Nothing here is imported at module level but the standard library and the ctypes layer.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.hil.green_ctx import (
    GreenContextError,
    GreenContextPool,
    GreenPartition,
    PartitionPool,
    plan_sm_counts,
    sm_granularity,
)

__all__ = ["POOL_BACKENDS", "CudaCorePool", "SimulatedPool", "TorchPool", "make_pool",
           "open_pool"]

#: What :func:`open_pool` tries, in order, for ``"auto"``.
AUTO_ORDER = ("cuda.core", "ctypes")
POOL_BACKENDS = ("auto", "cuda.core", "torch", "ctypes", "simulated")


def _rules(total: int, cc: tuple[int, int], lo: int, step: int) -> tuple[int, int]:
    """The split rule: what the library reports when plausible, else the architecture table."""
    t_lo, t_step = sm_granularity(*cc)
    lo = lo if 0 < lo <= total else t_lo
    step = step if 0 < step <= total else t_step
    return lo, step


@dataclass
class CudaCorePool(PartitionPool):
    """Green contexts through ``cuda.core`` (see the module docstring).

    Parameters
    ----------
    shares_pct, device, clock : as :class:`~harness.hil.green_ctx.PartitionPool`
    core : module, optional
        The ``cuda.core`` module (tests inject a fake).
    """

    core: Any = None
    backend: str = "cuda.core"
    _keep: dict[int, tuple[Any, Any]] = field(default_factory=dict)

    def open(self) -> CudaCorePool:
        if self.partitions:
            return self
        core = self.core if self.core is not None else importlib.import_module("cuda.core")
        for name in ("Device", "ContextOptions", "SMResourceOptions"):
            if not hasattr(core, name):
                raise GreenContextError(f"cuda.core {getattr(core, '__version__', '?')} has no "
                                        f"{name} (green contexts need cuda-core 1.x)")
        dev = core.Device(self.device)
        dev.set_current()
        sm = dev.resources.sm
        self.total_sms = int(sm.sm_count)
        cc = dev.compute_capability
        self.compute_capability = (int(cc[0]), int(cc[1]))
        self.granularity = _rules(self.total_sms, self.compute_capability,
                                  int(getattr(sm, "min_partition_size", 0) or 0),
                                  int(getattr(sm, "coscheduled_alignment", 0) or 0))
        self.driver_version = _driver_version(core)
        try:
            for share, n in zip(self.shares(), plan_sm_counts(self.shares(), self.total_sms,
                                                               *self.granularity)):
                self.partitions.append(self._make(core, dev, sm, share, n))
        except BaseException:
            self.close()
            raise
        return self

    def _make(self, core: Any, dev: Any, sm: Any, share: float, n: int) -> GreenPartition:
        t0 = self.clock()
        if n >= self.total_sms:
            group = sm
        else:
            groups, _rest = sm.split(core.SMResourceOptions(count=n))
            if not groups:
                raise GreenContextError(f"cuda.core split made no group of {n} SMs")
            group = groups[0]
        ctx = dev.create_context(core.ContextOptions(resources=[group]))
        try:
            stream = ctx.create_stream()
        except BaseException:
            ctx.close()
            raise
        ptr = int(stream.__cuda_stream__()[1])
        self._keep[ptr] = (stream, ctx)
        return GreenPartition(share, int(group.sm_count) or n, 0, 0, ptr, self.clock() - t0,
                              self.total_sms)

    def close(self) -> None:
        """Close the streams, then their green contexts (idempotent)."""
        self.partitions = []
        keep, self._keep = self._keep, {}
        for stream, ctx in keep.values():
            for obj in (stream, ctx):
                try:
                    obj.close()
                except Exception:  # closing is best effort, as the ctypes pool's
                    pass


def _driver_version(core: Any) -> int:
    try:
        driver = importlib.import_module("cuda.bindings.driver")  # cuda.core's dependency
        err, ver = driver.cuDriverGetVersion()
        return int(ver) if int(err) == 0 else 0
    except Exception:
        return 0


@dataclass
class TorchPool(PartitionPool):
    """Green contexts through ``torch.cuda.green_contexts`` (see the module docstring).

    Parameters
    ----------
    shares_pct, device, clock : as :class:`~harness.hil.green_ctx.PartitionPool`
    torch : module, optional
        The torch module (tests inject a fake).
    """

    torch: Any = None
    backend: str = "torch"
    _keep: dict[int, tuple[Any, Any]] = field(default_factory=dict)

    def open(self) -> TorchPool:
        if self.partitions:
            return self
        torch = self.torch if self.torch is not None else importlib.import_module("torch")
        gc = torch.cuda.green_contexts
        if not getattr(gc, "SUPPORTED", True):
            raise GreenContextError("this PyTorch was built without green-context support")
        props = torch.cuda.get_device_properties(self.device)
        self.total_sms = int(props.multi_processor_count)
        self.compute_capability = (int(props.major), int(props.minor))
        self.granularity = _rules(self.total_sms, self.compute_capability, 0, 0)
        for share, n in zip(self.shares(), plan_sm_counts(self.shares(), self.total_sms,
                                                           *self.granularity)):
            t0 = self.clock()
            if n >= self.total_sms:  # the whole device: a stream of the primary context (a
                ctx, stream = None, torch.cuda.Stream(self.device)  # split of all 132 SMs
            else:  # would not be a multiple of the 8-SM step)
                ctx = create_torch_green_context(gc.GreenContext, n, self.device)
                stream = ctx.Stream()
            ptr = int(stream.cuda_stream)
            self._keep[ptr] = (stream, ctx)
            self.partitions.append(GreenPartition(share, n, 0, 0, ptr, self.clock() - t0,
                                                  self.total_sms))
        return self

    def close(self) -> None:
        """Drop the streams and contexts (PyTorch frees them with the objects)."""
        self.partitions = []
        self._keep = {}


def create_torch_green_context(cls: Any, num_sms: int, device: int) -> Any:
    """``GreenContext.create`` across PyTorch releases: keyword-only in 2.11+ (``num_sms=``,
    ``device_id=``), positional ``(num_sms, device_id)`` in 2.8-2.10.

    Parameters
    ----------
    cls : type
        ``torch.cuda.green_contexts.GreenContext``.
    num_sms, device : int
        SMs of the partition and the device index.

    Returns
    -------
    Any
        The green context.
    """
    try:
        return cls.create(num_sms=int(num_sms), device_id=int(device))
    except TypeError:
        return cls.create(int(num_sms), int(device))


@dataclass
class SimulatedPool(PartitionPool):
    """The pool's selection rule without a GPU: partitions of a nominal ``total_sms`` (no
    driver, no streams; the "stream" is the partition's index). For CPU dry runs only."""

    backend: str = "simulated"

    def open(self) -> SimulatedPool:
        if not self.partitions:
            self.total_sms = self.total_sms or 100
            self.partitions = [GreenPartition(s, max(1, round(s / 100 * self.total_sms)), 0, 0,
                                              i + 1, 0.0, self.total_sms)
                               for i, s in enumerate(self.shares())]
        return self


def make_pool(backend: str, shares_pct: Sequence[float], *, device: int = 0,
              **kw: Any) -> PartitionPool:
    """An unopened pool of one backend (``"cuda.core"``, ``"torch"``, ``"ctypes"`` or
    ``"simulated"``).

    Parameters
    ----------
    backend : str
        Which implementation.
    shares_pct : sequence of float
        The shares, %.
    device : int
        CUDA device ordinal.
    **kw : Any
        Implementation arguments (``lib=`` for ctypes, ``core=``, ``torch=``).

    Returns
    -------
    PartitionPool
        The pool, not yet opened.
    """
    classes: dict[str, Any] = {"cuda.core": CudaCorePool, "torch": TorchPool,
                               "ctypes": GreenContextPool, "simulated": SimulatedPool}
    if backend not in classes:
        raise ValueError(f"backend must be one of {', '.join(classes)}, got {backend!r}")
    return classes[backend](tuple(shares_pct), device=device, **kw)


def open_pool(shares_pct: Sequence[float], *, device: int = 0, backend: str = "auto",
              **kw: Any) -> PartitionPool:
    """The first pool that opens, kept libraries first (``"auto"``: cuda.core, then ctypes).

    The pool's ``tried`` attribute lists why each earlier one did not open; all failing
    raises :class:`~harness.hil.green_ctx.GreenContextError` with every reason.

    Parameters
    ----------
    shares_pct : sequence of float
        The shares, %.
    device : int
        CUDA device ordinal.
    backend : str
        One of :data:`POOL_BACKENDS`.
    **kw : Any
        Passed to the ctypes pool (``lib=``: a driver library, which also picks ctypes).

    Returns
    -------
    PartitionPool
        The opened pool.
    """
    if backend not in POOL_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(POOL_BACKENDS)}, got {backend!r}")
    order = (("ctypes",) if kw.get("lib") is not None else AUTO_ORDER) \
        if backend == "auto" else (backend,)
    tried: list[str] = []
    for name in order:
        pool = make_pool(name, shares_pct, device=device, **(kw if name == "ctypes" else {}))
        try:
            pool.open()
        except Exception as exc:  # the next implementation, with the reason kept
            tried.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        pool.tried = tried
        return pool
    raise GreenContextError("no green-context pool could be opened (" + "; ".join(tried) + ")")
