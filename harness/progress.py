"""A dependency-free progress indicator for long runs, on stderr.

On a terminal it is a bar with the elapsed time and an estimate of the time left; when stderr
is not a terminal (a log, a pipe, CI) it writes one line every :data:`LINE_EVERY_S` seconds
instead, so a long run is never silent; short runs (under that time) write nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any, TypeVar

T = TypeVar("T")

__all__ = ["LINE_EVERY_S", "Progress", "progress"]

#: Seconds between two progress lines when stderr is not a terminal.
LINE_EVERY_S = 10.0


class Progress:
    """``with Progress(total, "burst") as bar: ... bar.advance()``; or ``progress(iterable)``.

    Parameters
    ----------
    total : int
        Steps of the whole run.
    label : str
        Shown before the bar.
    stream : IO or None
        Where to write (None: stderr).
    enabled : bool or None
        True: the bar; False: nothing; None: the bar on a terminal, else progress lines.
    width : int
        Characters of the bar.
    """

    def __init__(self, total: int, label: str = "", *, stream: IO[str] | None = None,
                 enabled: bool | None = None, width: int = 30) -> None:
        self.total = max(int(total), 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.mode = ("bar" if enabled or (enabled is None and tty) else
                     "lines" if enabled is None else "off")
        self.enabled = self.mode != "off"
        self.width = width
        self.done = 0
        self._t0 = time.monotonic()
        self._last = self._t0 if self.mode == "lines" else 0.0
        self._wrote = False

    def _estimate(self, now: float) -> tuple[float, float, float]:
        frac = self.done / self.total
        el = now - self._t0
        return frac, el, (el / frac - el if frac > 0 else float("nan"))

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more steps done and redraw when due.

        Parameters
        ----------
        n : int
            Steps done since the last call.

        Returns
        -------
        None
            Nothing.
        """
        self.done = min(self.total, self.done + n)
        if self.mode == "off":
            return
        now = time.monotonic()
        if self.mode == "bar":
            if now - self._last > 0.1 or self.done == self.total:
                self._last = now
                frac, el, eta = self._estimate(now)
                bar = "#" * int(frac * self.width)
                self.stream.write(f"\r{self.label:<14} [{bar:<{self.width}}] {frac:6.1%} "
                                  f"{el:5.1f}s elapsed, ~{eta:4.0f}s left")
                self.stream.flush()
                self._wrote = True
        elif now - self._last >= LINE_EVERY_S and self.done < self.total:
            self._last = now
            frac, el, eta = self._estimate(now)
            self.stream.write(f"{self.label}: {frac:.0%} done after {el:.0f} s, "
                              f"about {eta:.0f} s left\n")
            self.stream.flush()
            self._wrote = True

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.mode == "bar" and self._wrote:
            self.stream.write("\n")
            self.stream.flush()
        elif self.mode == "lines" and self._wrote:
            el = time.monotonic() - self._t0
            self.stream.write(f"{self.label}: done in {el:.0f} s\n" if exc[0] is None else
                              # an error or a signal ended it
                              f"{self.label}: stopped after {el:.0f} s ({self.done} of "
                              f"{self.total} steps)\n")
            self.stream.flush()


def progress(items: Iterable[T], total: int, label: str = "", **kw: Any) -> Iterator[T]:
    """Iterate over ``items`` while showing a :class:`Progress` of ``total`` steps.

    Parameters
    ----------
    items : Iterable
        What to iterate over.
    total : int
        Expected number of items.
    label : str
        Shown before the bar.
    **kw : Any
        More :class:`Progress` options.

    Returns
    -------
    Iterator
        The items, in order.
    """
    with Progress(total, label, **kw) as bar:
        for x in items:
            yield x
            bar.advance()
