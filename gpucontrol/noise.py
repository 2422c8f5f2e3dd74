"""The reading noise the outer loop measures: now, steadily, and at each share.

The law. A reading's noise (the standard deviation of its log ratio to the belief) is read as
the median of the absolute differences of successive readings over 0.954, the median
``|difference|`` of two Gaussian readings in units of their sigma: robust to a few wild
readings, and blind to a slow drift of the load, which moves successive readings alike. It is
read over three windows of those differences:

- **now**: the last 64. The loops aim by it (the controller's set point: the largest at which
  this noise puts no more than 1 % of periods over the tolerance), and after bad readings it
  is re-read within 64 periods.
- **steady**: the last 256, none taken while the noise now is at its cap (readings that wild
  are not a plant's noise). A decision predicts every share at the set point of this one.
- **here**: the last 256 since the loop arrived at the current share. A share whose own noise
  is significantly louder than the steady one (its variance over :attr:`ReadingNoise.LOUD`
  times the steady one's, on at least 32 differences) is predicted at its own; when the loop
  leaves it, that is remembered and fades back to the steady noise over the belief's memory.

Why. The median of 64 differences has a sampling error of about 15 % of the noise itself,
and a p99 reading's noise sits where the set point is steep in it: aimed by the noise now, the
set point moves by several % from one decision to the next while nothing changed. Where a
share's latency line is flat in the sleep, a set point a few % lower takes its predicted
training down by far more than a steep share's, and the loop walks between shares on the
sampling error alone. Four times as many differences read the noise twice as steadily. A
noise common to every share is the usual case (the load's variance, the batch's); a share
where the training's sleep cycle beats against the control period is noisier than its
neighbours, and is predicted as such only where its own readings say so.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left, insort
from collections import deque

__all__ = ["Aim", "ReadingNoise"]

#: The largest noise variance read (0.2 in log: most successive readings 20 % or more apart),
#: and the least (0.003).
CAP2, FLOOR2 = 0.2 ** 2, 0.003 ** 2


class _Window:
    """The last ``size`` differences, kept in order of arrival and of size (for the median)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.fifo: deque[float] = deque(maxlen=size)
        self.sorted: list[float] = []

    def __len__(self) -> int:
        return len(self.fifo)

    def add(self, d: float) -> None:
        fifo, srt = self.fifo, self.sorted
        if len(fifo) == self.size:         # (the oldest, found by bisection)
            del srt[bisect_left(srt, fifo[0])]
        fifo.append(d)
        insort(srt, d)

    def clear(self) -> None:
        self.fifo.clear()
        self.sorted.clear()

    def variance(self) -> float:
        """The noise's variance from the median difference, within [``FLOOR2``, ``CAP2``]."""
        return _variance(self.sorted[len(self.fifo) // 2])

    def recent_variance(self, n: int) -> float:
        """The same over the last ``n`` differences alone."""
        recent = sorted(itertools.islice(self.fifo, len(self.fifo) - n, None))
        return _variance(recent[n // 2])


def _variance(median: float) -> float:
    return min(max((median / 0.954) ** 2, FLOOR2), CAP2)


class ReadingNoise:
    """The reading noise over three windows (the law is the module's).

    Parameters
    ----------
    forget : float
        The periods over which a louder share's noise, remembered when left, fades back to the
        steady one (the outer loop's belief's memory).
    """

    #: A share's noise counts as its own past this ratio of its variance to the steady one's.
    LOUD = 2.25

    def __init__(self, forget: float) -> None:
        self.fade = 1.0 - 1.0 / forget
        self.now = _Window(64)
        self.steady = _Window(256)
        self.here = _Window(256)
        self.loud: dict[int, tuple[float, int]] = {}   # shares left louder: (variance, period)
        self.clear()

    def clear(self) -> None:
        """Nothing read: the noise now at 0.01 until 16 differences are in."""
        self.var = 0.01 ** 2
        self.now.clear()
        self.steady.clear()
        self.here.clear()
        self.loud.clear()

    def add(self, d: float) -> None:
        """One absolute difference of two successive log readings at the current share."""
        now = self.now
        now.add(d)
        if len(now.fifo) >= 16:      # (the opening's few differences are transients)
            self.var = _variance(now.sorted[len(now.fifo) // 2])
        if self.var < CAP2:
            self.steady.add(d)
            self.here.add(d)

    def here_loud(self) -> float | None:
        """The current share's variance since the loop arrived where it is significantly
        louder than the steady one, else None."""
        if len(self.here) < 32 or len(self.steady) < 16:
            return None
        h = self.here.variance()
        return h if h > self.LOUD * self.steady.variance() else None

    def leave(self, share: int, period: int) -> None:
        """The loop leaves ``share`` at ``period``: remember its noise if it was louder."""
        here = self.here_loud()
        if here is not None:
            self.loud[share] = (here, period)
        self.here.clear()

    def sigmas(self, share: int, period: int) -> tuple[float, dict[int, float]] | None:
        """The noise (sigma, log) the shares are predicted at, the loop standing at ``share``
        at ``period``: the steady one, and the shares predicted at their own (louder; by
        index: usually none); None while the steady window has fewer than 16 differences."""
        if len(self.steady) < 16:
            return None
        slow = self.steady.variance()
        here = self.here_loud()
        own: dict[int, float] = {}
        for j, (v, at) in self.loud.items():
            w = self.fade ** (period - at)
            own[j] = math.sqrt(w * v + (1.0 - w) * slow)
        if here is not None:
            own[share] = math.sqrt(here)
        return math.sqrt(slow), own


class Aim:
    """The controller's set point at a reading noise, at one detune of its inner loop: the
    largest at which a noise ``sigma`` (log), amplified by the loop's own feedback of it
    (``sqrt(1 + d / (2 - d))`` for a P loop at detune ``d``), puts no more than a tail
    ``tail_z`` (a standard normal quantile) of periods over ``(1 + tolerance) * slo_ms``, at
    most the SLO and no more than ``2 * tolerance`` under it (past that noise the tail is not
    held)
    (:meth:`~gpucontrol.TwoTierController._aim` says why)."""

    def __init__(self, slo_ms: float, kp_scale: float, tolerance: float, tail_z: float) -> None:
        d = min(max(kp_scale, 0.0), 1.9)
        self.slo_ms, self.tolerance, self.tail_z = slo_ms, tolerance, tail_z
        self.amp = math.sqrt(1.0 + d / (2.0 - d))

    def margin(self, sigma: float) -> float:
        """The margin under the SLO (a fraction of it) at a reading noise ``sigma``."""
        return min(max(0.0, 1.0 - (1.0 + self.tolerance) * math.exp(
            -self.tail_z * (sigma * self.amp))), 2.0 * self.tolerance)

    def __call__(self, sigma: float) -> float:
        """The set point (ms) at a reading noise ``sigma``."""
        return self.slo_ms * (1.0 - self.margin(sigma))
