"""The outer loop's belief: a Gaussian over log corrections to the identified curves at the
candidate shares, and the load common to all of them.

:class:`~gpucontrol.outer.ThroughputOuter` keeps two: one over the latency (with the load) and
one over the training's iteration time (without). The law and why are in the class docstring;
how the outer loop reads and folds readings into it is :mod:`gpucontrol.outer`'s.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Belief"]


class Belief:
    """A Gaussian belief over log corrections at the candidate shares, and the load.

    The corrections ``delta`` (one per share) have a Gaussian-process prior: ``sigma0`` apart
    from the identified curve, smooth over shares (a squared-exponential kernel of length
    ``length`` in log share: a model error at 60 % says much about 65 %, little about 20 %),
    conditioned on being within ``sigma_anchor`` of it at the shares the identification
    measured; :meth:`widen` adds each share's own misfit. With ``load`` a common term ``q`` (a
    random walk, ``drift`` per period) adds to every share's. Each observation at share ``i`` is
    ``q + delta_i`` plus noise, taken in by a Kalman update with the innovation clipped at three
    standard deviations (a wild reading moves the belief by a bounded step); every period each
    correction decays toward the prior by ``1 / forget`` and its variance grows back toward the
    prior's (an Ornstein-Uhlenbeck process), so what was learnt is forgotten unless read again.
    A run of surprises (:meth:`surprised`) reopens it (:meth:`reopen`): the load's variance
    goes up. :meth:`to_prior` forgets every reading.
    """

    #: Surprises of one sign in a row that reopen the belief.
    RUN = 5

    def __init__(self, log_m: np.ndarray, anchors: np.ndarray, *, sigma0: float,
                 sigma_anchor: float, length: float, load: bool, drift: float,
                 forget: float) -> None:
        n = len(log_m)

        def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return sigma0 ** 2 * np.exp(-0.5 * ((a[:, None] - b[None, :]) / length) ** 2)

        K = kernel(log_m, log_m)
        if len(anchors):
            Ka = kernel(log_m, anchors)
            Kaa = kernel(anchors, anchors) + sigma_anchor ** 2 * np.eye(len(anchors))
            K = K - Ka @ np.linalg.solve(Kaa, Ka.T)
        self.K0 = K          # the corrections' prior covariance (with :meth:`widen`'s misfits)
        self.o = 1 if load else 0
        self.x = np.zeros(n + self.o)
        self.P = np.zeros((n + self.o, n + self.o))
        self.to_prior()
        self._steps: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.Q = np.zeros_like(self.P)
        a = 1.0 - 1.0 / forget                 # each correction's decay per period
        self.f = np.full(n + self.o, a)
        self.Q[self.o:, self.o:] = (1.0 - a * a) * K
        if load:
            self.Q[0, 0] = drift ** 2
            self.f[0] = 1.0

    def to_prior(self) -> None:
        """Forget every reading: the corrections at their prior (:meth:`widen`'s misfits
        included) and the load anything, until read."""
        o = self.o
        self.x[:] = 0.0
        self.P[:] = 0.0
        self.P[o:, o:] = self.K0
        if o:
            self.P[0, 0] = 1.0       # the load: anything, until read
        self._run = 0

    @property
    def q(self) -> float:
        return float(self.x[0]) if self.o else 0.0

    @property
    def delta(self) -> np.ndarray:
        return self.x[self.o:]

    def step(self, periods: int = 1) -> None:
        """``periods`` periods pass: the load drifts, each correction decays toward the
        identified curve (the prior) by ``1 / forget`` a period and its variance grows back
        toward the prior's: what was learnt is forgotten unless read again."""
        if periods not in self._steps:
            fk = self.f ** periods
            a2 = self.f * self.f
            with np.errstate(divide="ignore", invalid="ignore"):
                geo = np.where(a2 < 1.0, (1.0 - a2 ** periods) / (1.0 - a2), float(periods))
            self._steps[periods] = (fk, np.outer(fk, fk), self.Q * np.sqrt(np.outer(geo, geo)))
        fk, ff, q = self._steps[periods]
        self.x *= fk
        self.P *= ff
        self.P += q

    def _innovation(self, i: int, y: float, r: float) -> tuple[float, float]:
        """The innovation of ``y`` at share ``i`` and its variance (noise variance ``r``)."""
        j, x, P = self.o + i, self.x.item, self.P.item     # (per reading: on floats)
        if self.o:
            return y - (x(j) + x(0)), P(j, j) + (P(0, 0) + 2.0 * P(0, j)) + r
        return y - (x(j) + 0.0), P(j, j) + 0.0 + r

    def total(self, i: int) -> float:
        """The belief at share ``i`` with the load: ``q + delta[i]`` (log)."""
        return self.x.item(0) + self.x.item(self.o + i) if self.o else self.x.item(i)

    def surprised(self, i: int, y: float, r: float) -> float:
        """Count one observation ``y`` at share ``i`` (noise variance ``r``) in the run of
        surprises: innovations beyond two standard deviations, all of one sign. Five in a row
        mean the belief is wrong, not the readings (a load step, or what was learnt from bad
        readings): the innovation's square is returned then (0 otherwise), for
        :meth:`reopen`."""
        innov, S = self._innovation(i, y, r)
        if innov * innov <= 4.0 * S:
            self._run = 0
            return 0.0
        sign = 1 if innov > 0 else -1
        self._run = self._run + sign if self._run * sign > 0 else sign
        if abs(self._run) < self.RUN:
            return 0.0
        self._run = 0
        return innov * innov

    def reopen(self, i: int, v: float) -> None:
        """A run of surprises at share ``i``: the belief is wrong, not the readings (a load
        step, or what bad readings taught). The load's variance is raised by ``v``, so the
        next readings take the load where they are; without a load (the iteration-time
        belief), share ``i``'s. What the other shares' corrections learnt stays: readings
        that no plant would give are the controller's to discard, all at once
        (:meth:`to_prior`, when they have become explainable again)."""
        h = 0 if self.o else i
        self.P[h, h] += v

    @property
    def surprising(self) -> bool:
        """The last observation was a surprise (a run may be starting)."""
        return self._run != 0

    def observe(self, i: int, y: float, r: float, check: bool = True) -> None:
        """Take in one reading ``y`` (log) at share ``i`` with noise variance ``r``; with
        ``check`` it counts in the run of surprises first (:meth:`surprised`)."""
        if check:
            v = self.surprised(i, y, r)
            if v:
                self.reopen(i, v)
        o, j = self.o, self.o + i
        P = self.P
        innov, S = self._innovation(i, y, r)
        Ph = P[:, 0] + P[:, j] if o else P[:, j].copy()
        bound = 3.0 * math.sqrt(S)
        innov = min(max(innov, -bound), bound)
        k = Ph / S
        self.x += k * innov
        P -= k[:, None] * Ph[None, :]

    def widen(self, var: np.ndarray) -> None:
        """Add ``var`` (one per share) to the corrections' prior variance, independent of the
        neighbours' (what the identification saw of the curve's misfit at each share): held
        through the forgetting too (each correction's variance grows back to it)."""
        o = self.o
        idx = np.arange(o, len(self.x))
        self.P[idx, idx] += var
        self.K0 = self.K0 + np.diag(var)
        self.Q[idx, idx] += (1.0 - self.f[o:] ** 2) * var
        self._steps.clear()

    def spread(self, i: int) -> np.ndarray:
        """Each share's standard deviation relative to share ``i`` (the anchor of a
        comparison: what is known is how the two differ)."""
        P = self.P[self.o:, self.o:]
        d = P.diagonal()
        return np.sqrt(np.maximum(d + d[i] - 2.0 * P[:, i], 0.0))
