"""Restart-free SM shares for a real PyTorch training loop (``torch.cuda.green_contexts``).

The cooperative half of the ``green-context`` spatial backend
(:mod:`gpucontrol.node.actuators.spatial`) for PyTorch: one green context per share, created up
front; at every iteration boundary the loop runs on the stream of the partition the daemon
commands (read from the hook file, like the sleep)::

    from gpucontrol.hooks import after_iteration
    from gpucontrol.node.green_torch import GreenPartitions

    parts = GreenPartitions(shares_pct=(25, 50, 75, 100))
    for batch in loader:
        with parts.iteration():        # the commanded partition's stream
            train_step(batch)
        after_iteration()              # the commanded sleep

Without a daemon, or when ``torch.cuda.green_contexts`` is missing (PyTorch < 2.8, CUDA < 12.8
builds), the loop runs on the current stream, unchanged. The PyTorch APIs handled:
``GreenContext.create`` is keyword-only from 2.11 (``num_sms=``, ``device_id=``) and positional
before; newer releases give a green context a ``Stream()``, older ones (2.8-2.10) only
``set_context()`` / ``pop_context()``. The SM count of a share is ``share * SMs`` rounded to the
architecture's step (8 SMs on compute capability 9.0+: the ``cuDevSmResourceSplitByCount``
rule).

Any other green-context pool can stand in (``pool=``): an object with ``open()``,
``partitions`` (each with ``share_pct``, ``sm_count`` and a raw ``stream`` handle) and
``select(share)``, such as the harness's cuda.core or ctypes pools
(:mod:`harness.hil.green_pools`) on a PyTorch without green contexts -- their streams are
wrapped with ``torch.cuda.ExternalStream`` -- or its CPU dry-run pool (``backend ==
"simulated"``), which selects partitions by the same rule and runs every block unchanged.

torch is imported lazily; this module imports nothing else of the package but the hook reader.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["GreenPartitions", "sm_count_for"]


def sm_count_for(share_pct: float, total_sms: int, major: int) -> int:
    """SMs for a share on a GPU of compute capability ``major`` (split granularity applied).

    Parameters
    ----------
    share_pct : float
        Share, % in (0, 100].
    total_sms : int
        The device's SM count.
    major : int
        Compute capability major version.

    Returns
    -------
    int
        SM count, at least the minimum partition, at most the device.

    >>> sm_count_for(50, 132, 9), sm_count_for(10, 132, 9), sm_count_for(100, 132, 9)
    (64, 16, 132)
    """
    if not 0 < float(share_pct) <= 100:
        raise ValueError(f"share_pct must be in (0, 100], got {share_pct!r}")
    lo, step = (8, 8) if major >= 9 else (4, 2) if major == 8 else (2, 2) if major == 7 \
        else (1, 1)
    if share_pct >= 100:
        return int(total_sms)
    n = round(share_pct / 100 * total_sms / step) * step
    return int(min(max(n, lo), total_sms))


class GreenPartitions:
    """Green contexts per share and the switch at iteration boundaries.

    Parameters
    ----------
    shares_pct : sequence of float
        Shares to create up front, % (100 % -- the current stream -- is implicit).
    device : int
        CUDA device index.
    read_share : callable, optional
        Returns the commanded share (% or None); default: the hook file's
        (:meth:`gpucontrol.node.hooks.HookReader.share_pct`).
    torch : module, optional
        The torch module (tests inject a fake).
    pool : object, optional
        A green-context pool to use instead of ``torch.cuda.green_contexts`` (see the module
        docstring).
    on_switch : callable, optional
        Called as ``on_switch(commanded, share, sm_count, switch_s)`` whenever the partition
        in use changes (the training's switch log).
    """

    def __init__(self, shares_pct: Sequence[float] = (25.0, 50.0, 75.0), *, device: int = 0,
                 read_share: Callable[[], int | None] | None = None, torch: Any = None,
                 pool: Any = None,
                 on_switch: Callable[[int | None, float, int, float], Any] | None = None
                 ) -> None:
        self.shares_pct = sorted({float(s) for s in shares_pct if float(s) < 100})
        for s in self.shares_pct:
            if not s > 0:
                raise ValueError(f"shares_pct must be in (0, 100], got {s!r}")
        self.device = int(device)
        if read_share is None:
            from gpucontrol.node.hooks import HookReader

            read_share = HookReader().share_pct
        self.read_share = read_share
        self._torch = torch
        self._ctx: dict[float, Any] = {}
        self._streams: dict[float, Any] = {}
        self.pool = pool
        self.on_switch = on_switch
        self._sms: dict[float, int] = {}
        self.available: bool | None = None
        self.reason = ""
        self.backend = "none"
        self.current: float = 100.0

    def _open(self) -> None:
        if self.available is not None:
            return
        try:
            if self.pool is not None:
                self._open_pool()
            else:
                self._open_torch()
            self.available = True
        except Exception as exc:  # no torch, no CUDA, no green contexts: run unchanged
            self.available, self.reason = False, f"{type(exc).__name__}: {exc}"
            self._ctx.clear()

    def _open_torch(self) -> None:
        torch = self._torch if self._torch is not None else importlib.import_module("torch")
        gc = torch.cuda.green_contexts.GreenContext
        props = torch.cuda.get_device_properties(self.device)
        total = int(props.multi_processor_count)
        for s in self.shares_pct:
            n = sm_count_for(s, total, int(props.major))
            try:  # keyword-only from PyTorch 2.11, positional before
                ctx = gc.create(num_sms=n, device_id=self.device)
            except TypeError:
                ctx = gc.create(n, self.device)
            self._ctx[s], self._sms[s] = ctx, n
        self._sms[100.0] = total
        self._torch = torch
        self.backend = "torch"

    def _open_pool(self) -> None:
        pool = self.pool
        pool.open()
        parts = {float(p.share_pct): p for p in pool.partitions}
        for s in self.shares_pct:
            p = pool.select(s)
            self._ctx[s], self._sms[s] = p, int(p.sm_count)
        self._sms[100.0] = int(parts[max(parts)].sm_count)
        self.backend = str(getattr(pool, "backend", "pool"))
        if self.backend != "simulated" and self._torch is None:
            self._torch = importlib.import_module("torch")

    def select(self, share_pct: float | None) -> float:
        """The created share to use for a command (largest not above it; 100 for None).

        Parameters
        ----------
        share_pct : float or None
            The commanded share, %.

        Returns
        -------
        float
            The share whose partition will run the next iteration.
        """
        if share_pct is None or share_pct >= 100 or not self._ctx:
            return 100.0
        fits = [s for s in self._ctx if s <= share_pct + 1e-9]
        return max(fits) if fits else min(self._ctx)

    @contextlib.contextmanager
    def iteration(self) -> Iterator[float]:
        """Run the block on the commanded partition; yields the share in use.

        Yields
        ------
        float
            The share (%) of the partition the block runs on.
        """
        self._open()
        t0 = time.perf_counter()
        cmd = self.read_share() if self.available else None
        share = self.select(cmd)
        if share != self.current and self.on_switch is not None:
            self.on_switch(cmd, share, self._sms.get(share, 0), time.perf_counter() - t0)
        self.current = share
        if share >= 100 or self.backend == "simulated":
            yield share
            return
        ctx = self._ctx[share]
        torch = self._torch
        if self.pool is not None:  # a raw stream handle of another library's green context
            stream = self._streams.get(share)
            if stream is None:
                stream = self._streams[share] = torch.cuda.ExternalStream(
                    int(ctx.stream), device=self.device)
            yield from self._on_stream(torch, stream, share)
        elif hasattr(ctx, "Stream"):
            stream = self._streams.get(share)
            if stream is None:
                stream = self._streams[share] = ctx.Stream()
            yield from self._on_stream(torch, stream, share)
        else:
            ctx.set_context()
            try:
                yield share
            finally:
                ctx.pop_context()

    def _on_stream(self, torch: Any, stream: Any, share: float) -> Iterator[float]:
        prev = torch.cuda.current_stream(self.device)
        stream.wait_stream(prev)  # the block's inputs were made on the caller's stream
        with torch.cuda.stream(stream):
            yield share
        prev.wait_stream(stream)  # and its outputs are used there after the block
