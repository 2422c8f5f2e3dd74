"""Per-period training work and SM share from the training's per-iteration log.

The training writes one row per iteration when the iteration *and the sleep after it* are over
(``t_unix`` the start, ``iter_s`` the work, ``sleep_s`` the sleep, ``sm_fraction`` the %smid
reading; :mod:`harness.hil.training_emulator`). A period's share of that work is the part of
each iteration's work interval ``[t_unix, t_unix + iter_s]`` that lies inside the period:

* ``work_s``: seconds of training work inside the period (at most the period, per process);
* ``sm_s``: the same, weighted by the iteration's SM fraction (``training_sm_share`` is
  ``sm_s / T``, in [0, 1] for one process);
* ``iterations``: iterations' worth of work, ``sum(overlap / iter_s)``, the quantity
  :class:`harness.sim.protocol.PeriodResult` calls ``training_iterations``.

Crediting a whole iteration to the period it ends in (what the GPU plant did first) puts up to
one iteration of work into a period that did not hold it: on the H100, 0.2 s iterations in
1 s periods read as up to 130 % of the SMs. An iteration still running at the end of a period
is not in the log yet; its part inside the period is estimated from the process's last row
(the next iteration starts when that row was written, ``t_unix + iter_s + sleep_s``, and works
for about the last ``iter_s``). The estimate is never credited twice: when the row arrives, only
its overlap with the period then being reported counts.

>>> acc = TrainingAccount()
>>> acc.add([{"_file": "t-1.csv", "t_unix": 0.0, "iter_s": 0.6, "sleep_s": 0.0,
...           "sm_fraction": 1.0}, {"_file": "t-1.csv", "t_unix": 0.6, "iter_s": 0.6,
...           "sleep_s": 0.0, "sm_fraction": 1.0}])
>>> p = acc.period(0.0, 1.0)    # the second iteration is 0.4 s inside, not 0.6 s
>>> round(p.work_s, 6), round(p.sm_s, 6), round(p.iterations, 6)
(1.0, 1.0, 1.666667)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PeriodWork", "TrainingAccount", "overlap"]


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    """Length of the intersection of ``[a0, a1]`` and ``[b0, b1]`` (0 when disjoint).

    Parameters
    ----------
    a0, a1, b0, b1 : float
        Interval ends.

    Returns
    -------
    float
        The overlap, >= 0.

    >>> overlap(0, 2, 1, 5), overlap(0, 1, 2, 3)
    (1, 0)
    """
    return max(0, min(a1, b1) - max(a0, b0))


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(float(x)) else math.nan


@dataclass
class PeriodWork:
    """What one period holds of the training's work (see the module docstring)."""

    work_s: float = 0.0
    sm_s: float = 0.0
    iterations: float = 0.0
    new_iter_s: list[float] = field(default_factory=list)
    estimated_s: float = 0.0
    sm_known: bool = False

    def sm_share(self, period_s: float) -> float:
        """Time-weighted SM share over the period (NaN when no iteration had a reading and
        some work was done; 0 for a period without training work)."""
        if self.sm_known:
            return self.sm_s / period_s
        return 0.0 if self.work_s == 0 else math.nan

    @property
    def iteration_s(self) -> float:
        """Mean work time of the iterations logged since the last period (NaN if none): what
        a node's iteration hook reports, whatever period the work fell in."""
        xs = self.new_iter_s
        return sum(xs) / len(xs) if xs else math.nan


class TrainingAccount:
    """Rows of the training logs in, one :class:`PeriodWork` per period out.

    Parameters
    ----------
    sm_key : str
        The row's SM reading to weight by (``sm_fraction``; a log that also has
        ``sm_peak_fraction`` -- the SMs held at once -- is read through that instead).
    """

    def __init__(self, sm_key: str = "sm_fraction") -> None:
        self.sm_key = sm_key
        self._rows: list[dict[str, Any]] = []
        self._new: list[float] = []
        self._last: dict[str, dict[str, Any]] = {}

    def add(self, rows: list[dict[str, Any]]) -> None:
        """New complete rows (from :class:`harness.hil._tail.CSVTail`)."""
        for r in rows:
            t, it = _num(r.get("t_unix")), _num(r.get("iter_s"))
            if not (math.isfinite(t) and math.isfinite(it) and it > 0):
                continue
            self._rows.append(r)
            self._new.append(it)
            f = str(r.get("_file", ""))
            last = self._last.get(f)
            if last is None or t >= _num(last.get("t_unix")):
                self._last[f] = r

    def _fraction(self, r: dict[str, Any]) -> float:
        for key in ("sm_peak_fraction", self.sm_key):
            v = _num(r.get(key))
            if math.isfinite(v):
                return v
        return math.nan

    def period(self, t_start: float, t_end: float, *, estimate: bool = True) -> PeriodWork:
        """The period ``[t_start, t_end]``; rows wholly before it are dropped afterwards.

        Parameters
        ----------
        t_start, t_end : float
            The period (unix time).
        estimate : bool
            Credit the iteration running at ``t_end`` (not in the log yet) from the newest
            process's last row; off while the training restarts (no such iteration).

        Returns
        -------
        PeriodWork
            The period's work.
        """
        out = PeriodWork(new_iter_s=self._new)
        self._new = []
        for r in self._rows:
            t0, it = _num(r["t_unix"]), _num(r["iter_s"])
            ov = overlap(t0, t0 + it, t_start, t_end)
            if ov <= 0:
                continue
            self._credit(out, ov, it, self._fraction(r))
        if estimate and self._last:
            self._estimate(out, t_start, t_end)
        self._rows = [r for r in self._rows if _num(r["t_unix"]) + _num(r["iter_s"]) > t_end]
        return out

    def _credit(self, out: PeriodWork, ov: float, it: float, frac: float) -> None:
        out.work_s += ov
        out.iterations += ov / it
        if math.isfinite(frac):
            out.sm_s += frac * ov
            out.sm_known = True

    def _estimate(self, out: PeriodWork, t_start: float, t_end: float) -> None:
        """The newest process's iteration in progress at ``t_end``."""
        last = max(self._last.values(), key=lambda r: _num(r["t_unix"]))
        it = _num(last["iter_s"])
        nxt = _num(last["t_unix"]) + it + max(_num(last.get("sleep_s")), 0.0) \
            if math.isfinite(_num(last.get("sleep_s"))) else _num(last["t_unix"]) + it
        if nxt >= t_end:
            return
        ov = overlap(nxt, nxt + it, t_start, t_end)
        if ov > 0:
            out.estimated_s += ov
            self._credit(out, ov, it, self._fraction(last))
