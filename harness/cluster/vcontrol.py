"""The two-tier controller of :class:`gpucontrol.TwoTierController`, vectorized over GPUs.

One array slot per GPU. :meth:`VectorTwoTier.update` applies, to the slots it is given, the
same equations as ``TwoTierController.update`` with a P inner design (``ki = 0``), the
``"paper"`` outer strategy and a plain float measurement:

* hold (no inner move, no outer count) while ``hold_left > 0`` after an MPS change;
* inner: ``e = slo - l``; ``s = clamp(s + kp e, lo, hi)``; saturation "high"/"low";
* outer, every ``every`` non-held periods: acts when ``|e|/slo > threshold`` or saturated;
  ``d = e / mps_gain`` (per GPU; ``TwoTierController`` takes it from its model family)
  (at least ``saturated_step`` down when saturated high, up when saturated low with a large
  positive error), ``mps = clamp(round(mps + d))``.

The defaults (outer period, threshold, sleep and MPS bounds, hold after an MPS change, the
saturated step) are read from the core (``TwoTierController``'s period and hold, the
``OuterMPSOptimizer``, ``SleepKnob`` and ``ShareKnob`` signatures: :data:`CORE_DEFAULTS`), not
re-typed here.

``tests/harness/cluster/test_cluster_vcontrol.py`` checks it against N scalar
``TwoTierController`` instances step by step.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpucontrol.controllers import OuterMPSOptimizer
from gpucontrol.knobs import ShareKnob, SleepKnob
from gpucontrol.two_tier import TwoTierController

__all__ = ["CORE_DEFAULTS", "VectorTwoTier"]


def _defaults(f: Any) -> dict[str, Any]:
    return {k: p.default for k, p in inspect.signature(f).parameters.items()
            if p.default is not inspect.Parameter.empty}


_TWO_TIER = _defaults(TwoTierController.__init__)
_OUTER = _defaults(OuterMPSOptimizer.__init__)

#: the core's defaults the cluster controller uses (``TwoTierController``,
#: ``OuterMPSOptimizer``, ``SleepKnob`` and ``ShareKnob`` defaults)
CORE_DEFAULTS: dict[str, Any] = {
    "inner_period_s": _TWO_TIER["inner_period_s"],
    "outer_every": _OUTER["every"],
    "mps_threshold": _OUTER["threshold"],
    "sleep_bounds_s": SleepKnob().bounds_s,
    "mps_bounds_pct": ShareKnob().bounds_pct,
    "hold_periods_after_mps": TwoTierController.HOLD_PERIODS_AFTER_MPS,
    "saturated_step_pct": _OUTER["saturated_step_pct"],
}


class VectorTwoTier:
    """Per-GPU controller state in numpy arrays (grown on demand).

    Parameters
    ----------
    slo : float
        Latency set point, > 0.
    every : int
        Outer period in inner periods (core default).
    threshold : float
        Relative error below which the outer loop does not act (core default).
    sleep_bounds : tuple of float
        Sleep limits (s) (core default).
    mps_bounds : tuple of float
        MPS limits (%) (core default).
    mps_gain : float, optional
        Default latency-vs-MPS slope (default ``slo / 100``, as ``OuterMPSOptimizer``).
    saturated_step : float
        Smallest MPS move when the inner loop is saturated (core default).
    hold_periods : int
        Periods held after an MPS change (core default).
    capacity : int
        Initial number of slots.

    Raises
    ------
    ValueError
        When ``slo`` is not positive.

    Examples
    --------
    >>> v = VectorTwoTier(100.0, capacity=2)
    >>> v.kp[:] = 0.9 / -10.0            # design_p's kp for a -10 ms/s slope, detune 0.9
    >>> _ = v.update([0, 1], [110.0, 100.0])
    >>> [round(float(x), 12) for x in v.sleep]
    [0.9, 0.0]
    """

    #: batches up to this size are stepped element by element (same equations)
    SMALL = 8

    def __init__(self, slo: float, *, every: int = CORE_DEFAULTS["outer_every"],
                 threshold: float = CORE_DEFAULTS["mps_threshold"],
                 sleep_bounds: tuple[float, float] = CORE_DEFAULTS["sleep_bounds_s"],
                 mps_bounds: tuple[float, float] = CORE_DEFAULTS["mps_bounds_pct"],
                 mps_gain: float | None = None,
                 saturated_step: float = CORE_DEFAULTS["saturated_step_pct"],
                 hold_periods: int = CORE_DEFAULTS["hold_periods_after_mps"],
                 capacity: int = 64) -> None:
        if not slo > 0:
            raise ValueError(f"slo must be > 0, got {slo!r}")
        self.slo = float(slo)
        self.every = int(every)
        self.threshold = float(threshold)
        self.lo, self.hi = map(float, sleep_bounds)
        self.mlo, self.mhi = map(float, mps_bounds)
        self.default_mps_gain = float(mps_gain) if mps_gain is not None else self.slo / 100.0
        self.sat_step = float(saturated_step)
        self.hold_periods = int(hold_periods)
        n = capacity
        self.sleep = np.full(n, self.lo)
        self.mps = np.full(n, self.mhi)
        self.kp = np.zeros(n)
        self.mps_gain = np.full(n, self.default_mps_gain)   # per GPU (ms of latency per %)
        self.count = np.zeros(n, dtype=np.int64)
        self.hold = np.zeros(n, dtype=np.int64)

    def ensure(self, n: int) -> None:
        """Grow the arrays to at least ``n`` slots (new slots hold a fresh controller).

        Parameters
        ----------
        n : int
            Number of slots needed.
        """
        if n <= len(self.sleep):
            return
        m = max(n, 2 * len(self.sleep))
        for name, fill in (("sleep", self.lo), ("mps", self.mhi), ("kp", 0.0), ("count", 0),
                           ("hold", 0), ("mps_gain", self.default_mps_gain)):
            a = getattr(self, name)
            b = np.full(m, fill, dtype=a.dtype)
            b[:len(a)] = a
            setattr(self, name, b)

    def reset(self, idx: int | Sequence[int] | np.ndarray) -> None:
        """A fresh controller in these slots (sleep at its low bound, MPS at its high bound).

        Parameters
        ----------
        idx : int or array of int
            The slots.
        """
        self.sleep[idx] = self.lo
        self.mps[idx] = self.mhi
        self.count[idx] = 0
        self.hold[idx] = 0
        self.mps_gain[idx] = self.default_mps_gain

    def update(self, idx: Sequence[int] | np.ndarray, latency: Sequence[float] | np.ndarray,
               restarting: Sequence[bool] | np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One period for the slots ``idx`` with their measured latencies (``restarting``: the
        measurement is flagged as taken while training restarts, which holds like
        ``Measurement(restarting=True)``).

        Parameters
        ----------
        idx : array of int
            The slots to step.
        latency : array of float
            Their measured latencies (ignored where held).
        restarting : array of bool, optional
            Measurements taken while training restarts (held).

        Returns
        -------
        tuple of numpy.ndarray
            ``(old_sleep, mps_changed, saturated, held)``; saturated is -1 low, +1 high, 0
            none. The new state is in ``self.sleep[idx]`` / ``self.mps[idx]``.
        """
        if len(idx) <= self.SMALL:
            return self._update_small(idx, latency, restarting)
        idx = np.asarray(idx, dtype=np.int64)
        l = np.asarray(latency, dtype=float)
        s0 = self.sleep[idx].copy()
        pending = self.hold[idx] > 0
        held = pending if restarting is None else pending | np.asarray(restarting, dtype=bool)
        act = ~held
        self.hold[idx[pending]] -= 1
        e = self.slo - l
        raw = s0 + self.kp[idx] * e
        sat = np.where(raw > self.hi, 1, np.where(raw < self.lo, -1, 0))
        new = np.clip(raw, self.lo, self.hi)
        new = np.where(act, new, s0)
        sat = np.where(act, sat, 0)
        self.sleep[idx] = new
        # outer loop
        cnt = self.count[idx] + act
        fire = act & (cnt >= self.every)
        cnt = np.where(fire, 0, cnt)
        self.count[idx] = cnt
        changed = np.zeros(len(idx), dtype=bool)
        if fire.any():
            f = np.nonzero(fire)[0]
            new_mps = self.outer_target(e[f], sat[f], self.mps[idx[f]], self.mps_gain[idx[f]])
            ch = new_mps != self.mps[idx[f]]
            g = idx[f[ch]]
            self.mps[g] = new_mps[ch]
            self.hold[g] = self.hold_periods
            changed[f[ch]] = True
        return s0, changed, sat, held

    def _update_small(self, idx: Sequence[int] | np.ndarray,
                      latency: Sequence[float] | np.ndarray,
                      restarting: Sequence[bool] | np.ndarray | None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The same equations element by element (numpy's per-call overhead dominates for a
        handful of GPUs)."""
        n = len(idx)
        s0 = np.empty(n)
        changed = np.zeros(n, dtype=bool)
        sat = np.zeros(n, dtype=np.int64)
        held = np.zeros(n, dtype=bool)
        for i in range(n):
            s0[i], _, changed[i], sat[i], held[i] = self.update_one(
                int(idx[i]), float(latency[i]), restarting is not None and bool(restarting[i]))
        return s0, changed, sat, held

    def update_one(self, g: int, latency: float, restarting: bool = False
                   ) -> tuple[float, float, bool, int, bool]:
        """:meth:`update` for the one slot ``g``, in Python scalars.

        Parameters
        ----------
        g : int
            The slot.
        latency : float
            Its measured latency.
        restarting : bool
            Measured while training restarts (held).

        Returns
        -------
        tuple
            ``(old_sleep, new_sleep, mps_changed, saturated, held)``.
        """
        s = self.sleep.item(g)          # .item: a Python scalar, faster than float(a[g])
        h = self.hold.item(g)
        if h > 0:
            self.hold[g] = h - 1
            return s, s, False, 0, True
        if restarting:
            return s, s, False, 0, True
        e = self.slo - latency
        raw = s + self.kp.item(g) * e
        if raw > self.hi:
            new, st = self.hi, 1
        elif raw < self.lo:
            new, st = self.lo, -1
        else:
            new, st = raw, 0
        self.sleep[g] = new
        c = self.count.item(g) + 1
        changed = False
        if c >= self.every:
            c = 0
            m = self.mps.item(g)
            nm = self.outer_target_one(e, st, m, self.mps_gain.item(g))
            if nm != m:
                self.mps[g] = nm
                self.hold[g] = self.hold_periods
                changed = True
        self.count[g] = c
        return s, new, changed, st, False

    def outer_target_one(self, e: float, sat: int, mps: float, gain: float | None = None
                         ) -> float:
        """Scalar :meth:`outer_target`.

        Parameters
        ----------
        e : float
            Error ``slo - latency``.
        sat : int
            Inner saturation (-1 low, +1 high, 0 none).
        mps : float
            Current MPS (%).
        gain : float, optional
            Latency-vs-MPS slope (default: ``default_mps_gain``).

        Returns
        -------
        float
            The MPS the outer loop would set.
        """
        rel = abs(e) / self.slo
        if rel <= self.threshold and sat == 0:
            return mps
        delta = e / (self.default_mps_gain if gain is None else gain)
        if sat == 1:
            delta = min(delta, -self.sat_step)
        elif sat == -1 and e > 0:
            delta = max(delta, self.sat_step if rel > self.threshold else 0.0)
        return float(min(max(round(mps + delta), self.mlo), self.mhi))

    def outer_target(self, e: np.ndarray, sat: np.ndarray, mps: np.ndarray,
                     gain: np.ndarray | float | None = None) -> np.ndarray:
        """The MPS the outer loop would set (equal to ``mps`` where it would not act).

        Parameters
        ----------
        e : numpy.ndarray
            Errors ``slo - latency``.
        sat : numpy.ndarray
            Inner saturation (-1 low, +1 high, 0 none).
        mps : numpy.ndarray
            Current MPS (%).
        gain : array or float, optional
            Latency-vs-MPS slopes (default: ``default_mps_gain``).

        Returns
        -------
        numpy.ndarray
            The new MPS per element.
        """
        rel = np.abs(e) / self.slo
        quiet = (rel <= self.threshold) & (sat == 0)
        delta = e / (self.default_mps_gain if gain is None else gain)
        delta = np.where(sat == 1, np.minimum(delta, -self.sat_step), delta)
        low_push = (sat == -1) & (e > 0)
        delta = np.where(low_push, np.maximum(delta, np.where(rel > self.threshold,
                                                              self.sat_step, 0.0)), delta)
        new = np.clip(np.round(mps + delta), self.mlo, self.mhi)
        return np.where(quiet, mps, new)
