"""The identified curves at an outer loop's candidate shares (:class:`Curves`).

Per share: the latency over the training's duty ``d`` (the fraction of the period it runs),
``(c + A d) / (1 - B d)``, and the training's iteration time ``t``. A level's fitted line is
read as a duty law at the iteration time believed there (:func:`~gpucontrol.models.duty_form`):
the line is what was measured, its duty law depends on the time. Between identified levels the
laws are interpolated as :meth:`~gpucontrol.models.LatencyModelFamily.duty_law` does.
:class:`~gpucontrol.outer.ThroughputOuter` predicts from them; this module holds no belief.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any

import numpy as np

from gpucontrol.knobs import SleepKnob
from gpucontrol.models import LatencyModelFamily, duty_form_np

__all__ = ["PRIOR_ITERATION_S", "Curves"]

#: Iteration time assumed at the highest identified share when the model measured none (s).
PRIOR_ITERATION_S = 0.5


class Curves:
    """The identified curves at the candidate shares: the latency ``(c + A d) / (1 - B d)``
    over the duty ``d``, and the iteration time ``t``. ``B > 0`` only at a time-sliced level
    (``OperatingPoint.bent_law``) of a knob that offers nothing but identified levels: a bent
    law holds at its level only. On a knob with shares between the levels, those shares are
    predicted on the interpolated lines, and one level predicted on another law would stand
    apart from its neighbours by the difference of the laws, not of the plant."""

    def __init__(self, family: LatencyModelFamily, shares: tuple[float, ...],
                 sleep: SleepKnob) -> None:
        self.m = np.array(shares, float)
        self.log_m = np.log(self.m)
        pts = family.points
        top = max(p.mps_pct for p in pts)
        self.times_known = bool(family.timed_pct())
        self.t = np.array([family.iteration_s(m) if self.times_known else
                           PRIOR_ITERATION_S * top / m for m in shares])
        if family.sleep_span_s is None:
            family = dataclasses.replace(family, sleep_span_s=sleep.bounds_s)
        laws = [family.duty_law(m, sleep.run_quantum_s, PRIOR_ITERATION_S) for m in shares]
        self.c_line = np.array([c for c, _ in laws])
        self.A_line = np.maximum(np.array([a for _, a in laws]), 1e-9)
        levels = {p.mps_pct for p in pts}
        bent = [family.bent_law_at(m) for m in shares] if (
            sleep.run_quantum_s is None and set(shares) <= levels) else []
        self.c, self.A, self.B = self.c_line.copy(), self.A_line.copy(), np.zeros(len(shares))
        for i, law in enumerate(bent):
            if law is not None:
                self.c[i], self.A[i], self.B[i] = law
        self.A = np.where(self.A + self.B * self.c > 1e-9, self.A, 1e-9)
        #: some share's law is bent (else ``B`` is 0, and the arrays' arithmetic skips it: the
        #: same numbers)
        self.bent = bool((self.B > 0).any())
        self.m_f, self.t_f = self.m.tolist(), self.t.tolist()
        self._floats()
        #: a level whose law is its line read as a duty law (none measured on the duty, no run
        #: quantum) is read at the time constant the loop believes (:meth:`retime`)
        self.retimes = sleep.run_quantum_s is None and any(p.duty_law is None for p in pts)
        if self.retimes:
            self._read_levels(pts, family, sleep)

    def _read_levels(self, pts: tuple[Any, ...], family: LatencyModelFamily,
                     sleep: SleepKnob) -> None:
        """The identified levels' lines, kept for re-reading them at other iteration times
        (:meth:`retime`; as arrays, and as floats for the per-period :meth:`duty_gain`)."""
        lv = sorted(pts, key=lambda p: p.mps_pct)
        self._measured = np.array([p.duty_law is not None for p in lv])
        self._law_lv = np.array([p.duty_law or (0.0, 0.0) for p in lv]).T
        self._lv = np.array([p.mps_pct for p in lv])
        self._g = np.array([p.model.gain for p in lv])
        self._o = np.array([p.model.offset for p in lv])
        self._span = family.sleep_span_s or sleep.bounds_s
        # past the end levels ``c`` is held and ``A`` grows with the share
        self._past = self.m / np.clip(self.m, self._lv[0], self._lv[-1])
        # the same as floats, for the per-period gain (:meth:`duty_gain`)
        self._lv_f, self._g_f, self._o_f = (self._lv.tolist(), self._g.tolist(),
                                            self._o.tolist())
        self._measured_f = self._measured.tolist()
        self._any_measured = bool(self._measured.any())
        self._log_lv = np.log(self._lv)
        self._law_lv_f, self._past_f = self._law_lv[1].tolist(), self._past.tolist()
        #: per share, the identified levels either side and the weight of the upper one
        self._bracket = [self._between(m) for m in self.m_f]
        self.tau = self.t.copy()
        self._version = 0
        self.retime(self.t)

    def _between(self, m: float) -> tuple[int, int, float]:
        """The identified levels either side of share ``m`` (one index twice past the ends)
        and the upper one's weight, as :func:`numpy.interp` weighs them."""
        lv = self._lv_f
        j = bisect.bisect_right(lv, m)
        lo, hi = max(j - 1, 0), min(j, len(lv) - 1)
        return lo, hi, 0.0 if hi == lo else (m - lv[lo]) / (lv[hi] - lv[lo])

    def _laws(self, t_lv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(c, A)`` per share, each level's line read as a duty law at its time constant
        ``t_lv`` (:meth:`_level_times`), interpolated between levels as
        :meth:`~gpucontrol.models.LatencyModelFamily.duty_law` does."""
        c, A = np.array([duty_form_np(g, o, t, self._span) for g, o, t in zip(
            self._g_f, self._o_f, t_lv.tolist())]).T    # (a handful of levels: floats)
        if self._any_measured:                                 # a measured law stays
            c = np.where(self._measured, self._law_lv[0], c)
            A = np.where(self._measured, self._law_lv[1], A)
        return np.interp(self.m, self._lv, c), np.interp(self.m, self._lv, A) * self._past

    def _level_times(self, tau: np.ndarray) -> np.ndarray:
        """The time constant at each identified level, from the shares' (log-log)."""
        return np.asarray(np.exp(np.interp(self._log_lv, self.log_m, np.log(tau))))

    def retime(self, tau: np.ndarray) -> None:
        """Read the identified lines as duty laws at time constants ``tau`` (one per share).
        The line is what was measured; its duty law depends on the iteration time, which a
        model identified without times only assumes (:data:`PRIOR_ITERATION_S`) and one
        identified elsewhere may have wrong: read at a wrong time, a law can predict no
        positive latency at the sleep the loop stands at, and a reading's log ratio to it is
        then unbounded. A law measured on the duty
        (``OperatingPoint.duty_law``) does not depend on the time and stays."""
        self.tau = np.array(tau, float)
        self._tau_f = self.tau.tolist()
        self._t_lv = self._level_times(self.tau)
        self._version += 1
        self._last: tuple[tuple[int, float, int], float] = ((-1, math.nan, 0), math.nan)
        c, A = self._laws(self._t_lv)
        self._t_lv_f = self._t_lv.tolist()
        self.c_line, self.A_line = c, np.maximum(A, 1e-9)
        if self.bent:                        # a bent law was measured: it stays
            keep = self.B > 0
            self.c = np.where(keep, self.c, self.c_line)
            self.A = np.where(keep, self.A, self.A_line)
        else:
            self.c, self.A = self.c_line.copy(), self.A_line.copy()
        self._floats()

    def _floats(self) -> None:
        """The laws' ``c``, ``A`` and ``B`` per share as floats (``c_f``, ``A_f``, ``B_f``), for
        the per-period arithmetic at one share; the same numbers as the arrays."""
        self.c_f, self.A_f, self.B_f = self.c.tolist(), self.A.tolist(), self.B.tolist()

    def duty_gain(self, i: int, tau: float) -> float:
        """``A`` at share ``i`` where the laws are read off the lines (:attr:`retimes`) and
        the iteration time there is ``tau`` (every share's scaled alike); NaN otherwise."""
        if not self.retimes:
            return math.nan
        key = (i, tau, self._version)
        if key != self._last[0]:            # (per period: the time read is often the same)
            self._last = (key, self._duty_gain(i, tau))
        return self._last[1]

    def _duty_gain(self, i: int, tau: float) -> float:
        # per period, so on floats (the same arithmetic as the arrays' in the same order)
        k = tau / self._tau_f[i]
        lo, hi, w = self._bracket[i]
        a_lo = self._level_gain(lo, k)
        if hi == lo:
            return max(a_lo * self._past_f[i], 1e-9)
        a_hi = self._level_gain(hi, k)
        return max((a_lo + w * (a_hi - a_lo)) * self._past_f[i], 1e-9)

    def _level_gain(self, p: int, k: float) -> float:
        """``A`` of level ``p``'s law at its time constant times ``k`` (a float)."""
        if self._measured_f[p]:
            return self._law_lv_f[p]
        return duty_form_np(self._g_f[p], self._o_f[p], self._t_lv_f[p] * k, self._span)[1]

    def unbend(self) -> None:
        """Every share on the duty law (the benchmark's ablation of the bent law)."""
        self.c, self.A, self.B = self.c_line.copy(), self.A_line.copy(), np.zeros_like(self.B)
        self.bent = False
        self._floats()

    def at_longest_sleep(self, t: np.ndarray, sleep: SleepKnob) -> tuple[np.ndarray, np.ndarray]:
        """Per share, the least duty (at the longest sleep, iteration times ``t`` or the run
        quantum) and the latency the curves predict there (ms, at the identified load)."""
        q = sleep.run_quantum_s
        tau = t if q is None else np.full_like(t, q)
        d_hi = tau / (tau + sleep.bounds_s[1])
        return d_hi, self.latency(d_hi)

    def latency(self, d: Any, i: Any = slice(None)) -> Any:
        """The curves' latency at duty ``d`` (ms)."""
        if not self.bent:
            return self.c[i] + self.A[i] * d
        return (self.c[i] + self.A[i] * d) / (1.0 - self.B[i] * d)

    def duty(self, latency_ms: Any) -> np.ndarray:
        """Per share, the duty at which the curve's latency is ``latency_ms``."""
        if not self.bent:
            return np.asarray((latency_ms - self.c) / self.A)
        return np.asarray((latency_ms - self.c) / (self.A + self.B * latency_ms))

    def slope(self, d: float, i: int) -> float:
        """The latency's slope in the duty at share ``i`` and duty ``d`` (ms per unit)."""
        A, B = self.A_f[i], self.B_f[i]
        return (A + B * self.c_f[i]) / (1.0 - B * d) ** 2
