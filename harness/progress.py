"""A dependency-free progress bar for long runs (writes to stderr, quiet when not a TTY
unless forced)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


class Progress:
    """``with Progress(total, "burst") as bar: ... bar.advance()``; or ``progress(iterable)``."""

    def __init__(self, total: int, label: str = "", *, stream=None, enabled: bool | None = None,
                 width: int = 30) -> None:
        self.total = max(int(total), 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self.done = 0
        self._t0 = time.monotonic()
        self._last = 0.0

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done == self.total):
            self._last = now
            frac = self.done / self.total
            bar = "#" * int(frac * self.width)
            el = now - self._t0
            eta = el / frac - el if frac > 0 else 0.0
            self.stream.write(f"\r{self.label:<14} [{bar:<{self.width}}] {frac:6.1%} "
                              f"{el:5.1f}s elapsed, ~{eta:4.0f}s left")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def progress(items: Iterable[T], total: int, label: str = "", **kw) -> Iterator[T]:
    with Progress(total, label, **kw) as bar:
        for x in items:
            yield x
            bar.advance()
