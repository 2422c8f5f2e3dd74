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
builds), the loop runs on the current stream, unchanged. Two PyTorch APIs are handled: newer
releases give a green context a ``Stream()``; older ones (2.8-2.10) only ``set_context()`` /
``pop_context()``. The SM count of a share is ``share * SMs`` rounded to the architecture's
step (8 SMs on compute capability 9.0+: the ``cuDevSmResourceSplitByCount`` rule). Not yet run
on hardware.

torch is imported lazily; this module imports nothing else of the package but the hook reader.
"""

from __future__ import annotations

import contextlib
import importlib
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
    """

    def __init__(self, shares_pct: Sequence[float] = (25.0, 50.0, 75.0), *, device: int = 0,
                 read_share: Callable[[], int | None] | None = None, torch: Any = None) -> None:
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
        self.available: bool | None = None
        self.reason = ""
        self.current: float = 100.0

    def _open(self) -> None:
        if self.available is not None:
            return
        try:
            torch = self._torch if self._torch is not None else importlib.import_module("torch")
            gc = torch.cuda.green_contexts.GreenContext
            props = torch.cuda.get_device_properties(self.device)
            for s in self.shares_pct:
                n = sm_count_for(s, int(props.multi_processor_count), int(props.major))
                try:
                    ctx = gc(num_sms=n, device_id=self.device)
                except TypeError:  # 2.8-2.10: only the static create()
                    ctx = gc.create(n, self.device)
                self._ctx[s] = ctx
            self._torch = torch
            self.available = True
        except Exception as exc:  # no torch, no CUDA, no green contexts: run unchanged
            self.available, self.reason = False, f"{type(exc).__name__}: {exc}"
            self._ctx.clear()

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
        share = self.select(self.read_share() if self.available else None)
        self.current = share
        if share >= 100:
            yield share
            return
        ctx = self._ctx[share]
        torch = self._torch
        if hasattr(ctx, "Stream"):
            stream = self._streams.get(share)
            if stream is None:
                stream = self._streams[share] = ctx.Stream()
            prev = torch.cuda.current_stream(self.device)
            stream.wait_stream(prev)  # the block's inputs were made on the caller's stream
            with torch.cuda.stream(stream):
                yield share
            prev.wait_stream(stream)  # and its outputs are used there after the block
        else:
            ctx.set_context()
            try:
                yield share
            finally:
                ctx.pop_context()
