"""The training emulator's GPU side, behind a small protocol so its loop is testable with a fake:
:class:`CupyBackend` (CuPy matmuls, a pinned-memory copy, CUDA events, a %smid sample per
iteration), :class:`NumpyBackend` (the CPU stand-in for dry runs) and :func:`make_backend`
(also the green-context backends of :mod:`harness.hil.green_emulator`). The loop itself is
:mod:`harness.hil.training_emulator`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from harness.hil._lazy import require
from harness.hil.smid import SMSample

if TYPE_CHECKING:
    from harness.hil.training_emulator import EmulatorConfig

__all__ = ["Backend", "CupyBackend", "IterationTiming", "NumpyBackend", "make_backend"]


@dataclass(frozen=True)
class IterationTiming:
    """What the backend measured for one iteration (GPU event times, seconds)."""

    copy_s: float
    compute_s: float
    sm: SMSample | None = None



class Backend(Protocol):
    @property
    def multiprocessor_count(self) -> int | None:
        """The GPU's SM count (None on the CPU stand-in)."""

    def time_matmuls(self, n: int) -> float:
        """Seconds for ``n`` back-to-back matmuls (synchronized)."""

    def time_copy(self) -> float:
        """Seconds for one emulated host-to-device copy (synchronized)."""

    def run_iteration(self, matmuls: int) -> IterationTiming:
        """Copy, ``matmuls`` matmuls with a %smid sample half-way; wait for the stream."""


class CupyBackend:
    """The real thing: CuPy arrays, cuBLAS matmuls, a pinned-memory copy, CUDA events."""

    def __init__(self, matrix_n: int, dtype: str, copy_mb: float, sample_sm: bool,
                 seed: int = 0) -> None:
        cp = require("cupy")
        cupyx = require("cupyx")
        import numpy as np

        self._cp = cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.multiprocessor_count = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        with self.stream:
            rs = cp.random.RandomState(seed)
            self.a = rs.random_sample((matrix_n, matrix_n)).astype(dtype)
            self.b = rs.random_sample((matrix_n, matrix_n)).astype(dtype)
            self.c = cp.empty((matrix_n, matrix_n), dtype=dtype)
        nbytes = int(copy_mb * 1024 * 1024)
        self.host = cupyx.empty_pinned((nbytes,), dtype=np.uint8) if nbytes else None
        if self.host is not None:
            self.host[...] = 1
        self.dev = cp.empty((nbytes,), dtype=cp.uint8) if nbytes else None
        self.sampler = None
        if sample_sm:
            from harness.hil.smid import SMIDSampler

            self.sampler = SMIDSampler(cupy=cp)
        self._ev = [cp.cuda.Event() for _ in range(3)]
        self.stream.synchronize()

    def _copy(self) -> None:
        if self.dev is not None:
            self.dev.set(self.host, stream=self.stream)

    def _matmuls(self, n: int) -> None:
        cp = self._cp
        with self.stream:
            for _ in range(n):
                cp.matmul(self.a, self.b, out=self.c)

    def _elapsed(self, i: int, j: int) -> float:
        return self._cp.cuda.get_elapsed_time(self._ev[i], self._ev[j]) / 1e3

    def time_matmuls(self, n: int) -> float:
        self._ev[0].record(self.stream)
        self._matmuls(n)
        self._ev[1].record(self.stream)
        self._ev[1].synchronize()
        return self._elapsed(0, 1)

    def time_copy(self) -> float:
        self._ev[0].record(self.stream)
        self._copy()
        self._ev[1].record(self.stream)
        self._ev[1].synchronize()
        return self._elapsed(0, 1)

    def run_iteration(self, matmuls: int) -> IterationTiming:
        ev = self._ev
        ev[0].record(self.stream)
        self._copy()
        ev[1].record(self.stream)
        half = matmuls // 2
        self._matmuls(half)
        if self.sampler is not None:
            self.sampler.launch(self.stream)
        self._matmuls(matmuls - half)
        ev[2].record(self.stream)
        ev[2].synchronize()
        sm = self.sampler.collect(self.stream) if self.sampler is not None else None
        return IterationTiming(self._elapsed(0, 1), self._elapsed(1, 2), sm)


class NumpyBackend:
    """CPU stand-in for dry runs of the harness on a machine without a GPU (and for the CPU
    tests): a memcpy as the "copy", no SM sample, and as the unit of work one element-wise
    multiply-add over ``matrix_n**2`` elements instead of a matmul -- element-wise NumPy runs
    on one thread, so its cost is steady, where a multi-threaded BLAS matmul on a busy CPU
    is not."""

    multiprocessor_count = None

    def __init__(self, matrix_n: int, dtype: str, copy_mb: float, seed: int = 0) -> None:
        import numpy as np

        self._np = np
        rng = np.random.default_rng(seed)
        self.a = rng.random((matrix_n, matrix_n)).astype(dtype)
        self.b = rng.random((matrix_n, matrix_n)).astype(dtype)
        self.c = np.empty((matrix_n, matrix_n), dtype=dtype)
        nbytes = int(copy_mb * 1024 * 1024)
        self.host = np.ones(nbytes, dtype=np.uint8)
        self.dev = np.empty_like(self.host)

    def _matmuls(self, n: int) -> None:
        np = self._np
        for _ in range(n):
            np.multiply(self.a, self.b, out=self.c)
            np.add(self.c, self.a, out=self.c)

    def time_matmuls(self, n: int) -> float:
        t = time.perf_counter()
        self._matmuls(n)
        return time.perf_counter() - t

    def time_copy(self) -> float:
        t = time.perf_counter()
        self._np.copyto(self.dev, self.host)
        return time.perf_counter() - t

    def run_iteration(self, matmuls: int) -> IterationTiming:
        copy_s = self.time_copy()
        return IterationTiming(copy_s, self.time_matmuls(matmuls), None)


def make_backend(name: str, cfg: EmulatorConfig, **green: Any) -> Backend:
    """``"cupy"`` (the GPU), ``"cupy-green"`` (the GPU, on the commanded green-context
    partition: :mod:`harness.hil.green_emulator`; ``green`` are its arguments), ``"numpy"``
    (CPU dry run) or ``"numpy-green"`` (CPU dry run of the partition switching)."""
    if name == "cupy-green":
        from harness.hil.green_emulator import GreenCupyBackend

        return GreenCupyBackend(cfg.matrix_n, cfg.dtype, cfg.copy_mb, cfg.sample_sm, **green)
    if name == "numpy-green":
        from harness.hil.green_emulator import NumpyGreenBackend

        return NumpyGreenBackend(cfg.matrix_n, cfg.dtype, cfg.copy_mb, **green)
    if name == "cupy":
        return CupyBackend(cfg.matrix_n, cfg.dtype, cfg.copy_mb, cfg.sample_sm)
    if name == "numpy":
        return NumpyBackend(cfg.matrix_n, cfg.dtype, cfg.copy_mb)
    raise ValueError(f"backend must be 'cupy' or 'numpy', got {name!r}")


