"""The training emulator on green-context partitions: ``--backend cupy-green``.

:class:`GreenCupyBackend` is the emulator's :class:`~harness.hil.training_emulator.CupyBackend`
with one change: at the start of every iteration (an iteration boundary) it reads the
commanded SM share from the hook file the sleep hook already reads
(:meth:`gpucontrol.node.hooks.HookReader.share_pct`), picks that share's partition from a
:class:`~harness.hil.green_ctx.GreenContextPool` created up front, and launches the
iteration's copy, matmuls and %smid sample on the partition's stream (wrapped with
``cupy.cuda.ExternalStream``). The previous iteration has already been synchronized, so the
switch needs no extra synchronization; it costs a file read and a list lookup.

Every switch is appended to ``--spatial-log`` (CSV: ``t_unix, share_cmd_pct, share_pct,
sm_count, select_s, switch_s``), where ``switch_s`` is the in-process cost of the switch
(read + select + stream wrap). The iteration log's ``sm_fraction`` (from %smid) then shows
the SMs the training actually reached on the new partition.

Assumptions not yet checked on hardware (docs/gpu.md lists them): arrays CuPy allocated in the
primary context are usable from kernels on a green-context stream (green contexts share the
primary context's memory), and cuBLAS / CUDA events of the primary context accept those
streams, as PyTorch's ``torch.cuda.green_contexts`` streams are used.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.hil.emulator_backends import CupyBackend, IterationTiming, NumpyBackend
from harness.hil.green_ctx import GreenPartition, PartitionPool
from harness.hil.green_pools import SimulatedPool, open_pool
from harness.results import CSVLog

__all__ = ["SWITCH_FIELDS", "GreenCupyBackend", "NumpyGreenBackend", "PartitionSwitcher",
           "SimulatedPool", "parse_shares"]  # SimulatedPool: re-exported from green_pools

SWITCH_FIELDS = ("t_unix", "share_cmd_pct", "share_pct", "sm_count", "select_s", "switch_s")


def parse_shares(text: str) -> list[float]:
    """``"25,50,75"`` -> ``[25.0, 50.0, 75.0]``, each in (0, 100].

    Parameters
    ----------
    text : str
        Comma-separated shares, %.

    Returns
    -------
    list[float]
        The shares.

    >>> parse_shares("25, 50,100")
    [25.0, 50.0, 100.0]
    """
    out = []
    for x in text.split(","):
        if not x.strip():
            continue
        v = float(x)
        if not 0 < v <= 100:
            raise ValueError(f"green shares must be in (0, 100], got {x.strip()!r}")
        out.append(v)
    if not out:
        raise ValueError("green shares must name at least one share")
    return out


class PartitionSwitcher:
    """Reads the commanded share and switches partitions; independent of CuPy (testable).

    Parameters
    ----------
    pool : PartitionPool
        The opened pool (any implementation of :mod:`harness.hil.green_pools`).
    read_share : callable
        Returns the commanded share, % or None (``HookReader(path).share_pct``).
    wrap : callable
        Turns a :class:`GreenPartition` into the stream object work is launched on.
    log_path : str or None
        The switch log (CSV).
    clock, wall : callable
        Monotonic and wall clocks.
    """

    def __init__(self, pool: PartitionPool, read_share: Callable[[], int | None],
                 wrap: Callable[[GreenPartition], Any], *, log_path: str | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 wall: Callable[[], float] = time.time) -> None:
        self.pool = pool
        self.read_share = read_share
        self.wrap = wrap
        self.clock = clock
        self.wall = wall
        self.current: GreenPartition | None = None
        self.stream: Any = None
        self.switches: list[dict[str, Any]] = []
        self._log = CSVLog(log_path, SWITCH_FIELDS).__enter__()
        self._streams: dict[int, Any] = {}

    def boundary(self) -> Any:
        """Call at an iteration boundary: the stream for the next iteration."""
        t0 = self.clock()
        cmd = self.read_share()
        n_sel = len(self.pool.select_s)
        part = self.pool.select(cmd)
        if part is not self.current:
            s = self._streams.get(part.stream)
            if s is None:
                s = self._streams[part.stream] = self.wrap(part)
            self.current, self.stream = part, s
            row = {"t_unix": self.wall(), "share_cmd_pct": cmd, "share_pct": part.share_pct,
                   "sm_count": part.sm_count, "select_s": sum(self.pool.select_s[n_sel:]),
                   "switch_s": self.clock() - t0}
            self.switches.append(row)
            self._log.write(row)
        return self.stream

    def close(self) -> None:
        self._log.__exit__()


class GreenCupyBackend(CupyBackend):
    """:class:`CupyBackend` launching each iteration on the commanded green partition.

    Parameters
    ----------
    matrix_n, dtype, copy_mb, sample_sm : as :class:`CupyBackend`
    shares_pct : list of float
        The partitions to create up front.
    hook_path : str or None
        The hook file (None: ``$GPUCONTROL_HOOK_FILE``).
    spatial_log : str or None
        The switch log (CSV).
    pool_backend : str
        Which pool (:data:`harness.hil.green_pools.POOL_BACKENDS`; ``"auto"``: cuda.core,
        then the ctypes fallback).
    lib : object, optional
        A driver library for the ctypes pool (tests).
    """

    def __init__(self, matrix_n: int, dtype: str, copy_mb: float, sample_sm: bool, *,
                 shares_pct: list[float], hook_path: str | None = None,
                 spatial_log: str | None = None, pool_backend: str = "auto",
                 lib: Any = None) -> None:
        super().__init__(matrix_n, dtype, copy_mb, sample_sm)
        from gpucontrol.node.hooks import HookReader

        cp = self._cp
        self.pool = open_pool(tuple(shares_pct), device=cp.cuda.Device().id,
                              backend=pool_backend, lib=lib)
        self._primary_stream = self.stream
        reader = HookReader(hook_path)
        self.switcher = PartitionSwitcher(
            self.pool, reader.share_pct,
            lambda p: cp.cuda.ExternalStream(p.stream, cp.cuda.Device().id),
            log_path=spatial_log)

    def run_iteration(self, matmuls: int) -> IterationTiming:
        self.stream = self.switcher.boundary()
        return super().run_iteration(matmuls)

    def close(self) -> None:
        """Back to the primary stream; destroy the partitions."""
        self.stream = self._primary_stream
        self.switcher.close()
        self.pool.close()


class NumpyGreenBackend(NumpyBackend):
    """CPU dry run of ``cupy-green``: the same switching and switch log at every iteration
    boundary over a :class:`SimulatedPool`; the work itself does not change with the share.

    Parameters
    ----------
    matrix_n, dtype, copy_mb : as :class:`NumpyBackend`
    shares_pct : list of float
        The simulated partitions.
    hook_path, spatial_log : str or None
        As :class:`GreenCupyBackend`.
    """

    def __init__(self, matrix_n: int, dtype: str, copy_mb: float, *, shares_pct: list[float],
                 hook_path: str | None = None, spatial_log: str | None = None) -> None:
        super().__init__(matrix_n, dtype, copy_mb)
        from gpucontrol.node.hooks import HookReader

        self.pool = SimulatedPool(tuple(shares_pct)).open()
        self.switcher = PartitionSwitcher(self.pool, HookReader(hook_path).share_pct,
                                          lambda p: p.stream, log_path=spatial_log)

    def run_iteration(self, matmuls: int) -> IterationTiming:
        self.switcher.boundary()
        return super().run_iteration(matmuls)
