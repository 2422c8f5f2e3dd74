"""The throughput-seeking outer loop: move the training MPS only when it pays.

The paper's outer loop (:class:`gpucontrol.controllers.OuterMPSOptimizer`) moves MPS on one
period's error; it never optimises the operating point and it restarts the training often.
:class:`ThroughputOuter`, the default of :class:`gpucontrol.TwoTierController`, instead:

* **decides on window averages** (``every`` periods of latency, sleep and iteration time; with
  a short ``every``, as a restart-free knob allows, the last ``min_window`` readings at the
  current level, so a decision never rests on one period's reading; while the sleep is pinned
  at its lower bound with headroom, on those pinned readings alone, at least
  ``pinned_periods`` of them: the older ones describe a load that has since fallen);
* **aims at the maximum training rate at the SLO.** With the training's iteration time ``t``
  (measured by the node, or a prior) the duty is ``d = t/(t + s)`` and the training rate is
  ``d / t``. For a candidate move ``dm`` the latency at fixed sleep changes by
  ``mps_slope * dm``; the inner loop then moves the duty by ``(SLO - l - mps_slope*dm) / A``
  (``A``: latency per unit duty, from the inner model), and the iteration time becomes
  ``t (m'/m) ** -beta``. The candidate with the best predicted rate is taken only if its gain
  over its horizon exceeds ``restart_margin`` times the restart's cost (training lost
  for ``restart_s``) and the step is at least ``min_step_pct``. The horizon is
  ``horizon_periods``, or the time the load has held still if longer (a small gain that keeps
  being predicted at a steady load pays in the end). An upward move aims ``safety_margin``
  under the set point, except from a sleep pinned at its lower bound with headroom
  (``aim_from_low``): there the margin would park the loop below the SLO for good;
* **learns** the latency-vs-MPS slope from each restart's measured effect (the first reading
  after the restart is at the old sleep, since the inner loop holds during the restart) and
  the iteration-time exponent ``beta`` from the iteration times before and after, and a
  per-direction calibration of its gain predictions (realised / predicted, a bounded partial
  update within [0.5, 2], so one under-realised move cannot stop every later one);
* **acts early** when the sleep stays pinned at its upper bound with the latency over the SLO
  (``pinned_periods`` in a row): a step sized from the learnt slope, doubling while it stays
  pinned, and a level that failed within ``2 * max(every, min_window)`` periods of an upward
  move becomes a ceiling for ``horizon_periods`` (no optimising move returns there, so a tail
  the sleep cannot move does not make the MPS ping-pong) or until the load has fallen by the
  failed level's excess (read as the latency with the sleep pinned at its lower bound, against
  the first such reading at that level after the failure; at the end of its horizon it is
  renewed while the load is still above that reading); and it evaluates early when the sleep
  stays pinned at its lower bound with headroom;
* **feeds the sleep forward** on an upward move (``feedforward``, the mean mode's default):
  the sleep the inner model says brings the latency the move is predicted to reach back to
  the set point, set at the move, since the inner loop is held through the restart and would
  otherwise meet the new share at the old sleep (on the zoo's "ours" plant 3-8 periods after
  an upward move were a third of its periods over 1.05 SLO). The slope learnt from the first
  reading after the restart adds back what the sleep change took off. With a restart-free
  knob (``restart_s=0``) the sleep set is at least the one that keeps the training's
  footprint, share times duty, where it was: a restart-free move's only risk is its
  transient, and on coarse partitions (25/50/75/100) a slope learnt from earlier moves
  under-predicted a whole partition's rise (5.7 % of periods over 1.05 SLO on the zoo's
  "ours"); the inner loop takes the headroom from there.

A restart-free spatial-sharing backend passes ``restart_s=0``: the cost term then vanishes and
decisions may come more often than the 25 periods a restart needs, down to every period. Each
still averages ``min_window`` readings: on the plant zoo (BENCHMARKS.md) a decision on one
period's reading chased the noise (236-331 changes in 600 periods, up to 5.9 % of periods over
1.05 SLO); on the last 8 it keeps 0.2-1.3 % over and 0.939-0.975 of the oracle.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from gpucontrol._validate import bounds, flag, in_range, int_at_least, positive
from gpucontrol.errors import ConfigurationError

__all__ = ["ThroughputOuter"]


class ThroughputOuter:
    """Throughput-seeking MPS loop (see the module docstring).

    Parameters
    ----------
    slo_ms : float
        The controlled statistic's set point (ms), > 0.
    every : int
        Periods between two decisions, and the window length when it is at least
        ``min_window`` (>= 1).
    mps_bounds_pct : (float, float)
        MPS limits within [1, 100] %.
    initial_mps_pct : float
        Starting MPS percentage.
    mps_gain_ms_per_pct : float, optional
        Prior latency-vs-MPS slope (ms per point, > 0); default ``slo_ms / 200``; learnt online.
    restart_s : float
        Training downtime of one MPS change (s, >= 0): the cost weighed against a move.
    period_s : float
        Control period (s), > 0.
    min_step_pct : float
        Smallest MPS move (points, >= 0).
    pinned_periods : int
        Periods pinned at a sleep bound before acting early (>= 1).
    horizon_periods : int, optional
        Least number of periods over which a move's gain is counted (default ``10 * every``,
        at least 100); the time the load has held still counts when longer (:meth:`horizon`).
    restart_margin : float
        A move must gain this many times the restart's cost (>= 0).
    iteration_exponent : float
        Prior ``beta`` of ``t(m) ~ m ** -beta`` (in [0, 4]); learnt online.
    safety_margin : float
        Relative headroom kept under the SLO when a move raises the latency (in [0, 0.5)).
    max_up_pct, max_down_pct : float
        Trust region of one optimising move (points, > 0): the local model is not
        extrapolated further.
    explore : bool
        While no restart has taught the slope, make one downward probe of ``max_up_pct``
        points at the first window (one restart) instead of trusting the prior.
        :class:`~gpucontrol.TwoTierController` turns it off when the slope is known (a model
        family identified per MPS level, or ``mps_gain_ms_per_pct`` given).
    sleep_bounds_s : (float, float)
        The inner loop's sleep limits: a move is taken only if the predicted sleep stays
        within the lower 80 % of the range (room for the load to rise).
    aim_from_low : bool
        From a sleep pinned at its lower bound with headroom, aim an upward move at the set
        point itself rather than ``safety_margin`` under it (the inner loop regulates after
        the move; the margin would park the loop at sleep 0 under the SLO). False keeps the
        margin: for a statistic the sleep may not move (a p99 tail), a move up to the set
        point can pin the sleep high and ping-pong.
    min_window : int
        Fewest readings at the current level a decision averages (>= 1, default 8): with
        ``every`` below it the loop still decides every ``every`` periods, on a sliding
        window of the last ``min_window`` readings since the last move.
    feedforward : bool
        With an upward move predicted to end over the set point, set the sleep that brings
        that prediction back to it (:meth:`feedforward_sleep`). False for a statistic the
        sleep may not move (a p99 tail): there the extra sleep costs training for nothing.
    duty_time_s : float, optional
        The run time between two pauses of a duty-cycling sleep actuator (SIGSTOP/SIGCONT,
        freezer), whose duty is ``q / (q + s)`` whatever the iteration time; None (default):
        the sleep is taken once per iteration (the hook), and the duty is ``t / (t + s)``.
    levels_pct : sequence of float, optional
        The only shares the knob takes (e.g. the green-context partitions a training
        created, 25/50/75/100): every move lands on one of them, an optimising move goes to
        a neighbouring level whatever the trust region (it is the smallest move there is),
        and the learnt slope is per point of the level actually reached. None: any share.
    """

    def __init__(self, slo_ms: float, *, every: int = 25,
                 mps_bounds_pct: tuple[float, float] = (1.0, 100.0),
                 initial_mps_pct: float = 100.0, mps_gain_ms_per_pct: float | None = None,
                 restart_s: float = 15.0, period_s: float = 4.0, min_step_pct: float = 2.0,
                 pinned_periods: int = 3, horizon_periods: int | None = None,
                 restart_margin: float = 1.5, iteration_exponent: float = 1.0,
                 safety_margin: float = 0.03, max_up_pct: float = 8.0,
                 max_down_pct: float = 16.0, explore: bool = True,
                 sleep_bounds_s: tuple[float, float] = (0.0, 1.0),
                 aim_from_low: bool = True,
                 levels_pct: Sequence[float] | None = None,
                 duty_time_s: float | None = None, feedforward: bool = True,
                 min_window: int = 8) -> None:
        self.strategy = "throughput"
        self.slo_ms = positive("slo_ms", slo_ms)
        self.every = int_at_least("outer_every", every, 1)
        self.min_window = int_at_least("min_window", min_window, 1)
        self.lo, self.hi = bounds("mps_bounds_pct", mps_bounds_pct, 1.0, 100.0)
        self.mps_pct = in_range("initial_mps_pct", initial_mps_pct, self.lo, self.hi)
        prior = self.slo_ms / 200.0 if mps_gain_ms_per_pct is None else positive(
            "mps_gain_ms_per_pct", mps_gain_ms_per_pct)
        self.mps_gain = prior
        self._slope_bounds = (prior / 100.0, prior * 100.0)
        self.restart_s = in_range("restart_s", restart_s, 0.0, 3600.0)
        self.period_s = positive("period_s", period_s)
        self.min_step_pct = in_range("min_step_pct", min_step_pct, 0.0, 100.0)
        self.pinned_periods = int_at_least("pinned_periods", pinned_periods, 1)
        self.horizon_periods = max(100, 10 * self.every) if horizon_periods is None else \
            int_at_least("horizon_periods", horizon_periods, 1)
        self.restart_margin = in_range("restart_margin", restart_margin, 0.0, 1e3)
        self.beta = in_range("iteration_exponent", iteration_exponent, 0.0, 4.0)
        self.safety_margin = in_range("safety_margin", safety_margin, 0.0, 0.5, hi_open=True)
        self.max_up_pct = positive("max_up_pct", max_up_pct)
        self.max_down_pct = positive("max_down_pct", max_down_pct)
        self.explore = flag("explore", explore)
        self.sleep_lo, self.sleep_hi = bounds("sleep_bounds_s", sleep_bounds_s, 0.0, 3600.0)
        self.aim_from_low = flag("aim_from_low", aim_from_low)
        self.levels: list[float] | None = None
        if levels_pct is not None and (isinstance(levels_pct, (str, bytes)) or not hasattr(
                levels_pct, "__len__")):
            raise ConfigurationError(f"mps_levels_pct must be a sequence of percentages, got "
                                     f"{levels_pct!r}")
        if levels_pct is not None and len(levels_pct):
            self.levels = sorted({in_range("levels_pct", float(v), self.lo, self.hi)
                                  for v in levels_pct})
            # start on a level: the largest not above the initial share (as the training picks)
            fits = [v for v in self.levels if v <= self.mps_pct + 1e-9]
            self.mps_pct = fits[-1] if fits else self.levels[0]
        self.learnt = 0
        self.beta_learnt = 0
        self.count = 0
        self.moves = 0
        self._win: list[tuple[float, float, float]] = []
        self._recent: deque[tuple[float, float, float]] = deque(maxlen=3)
        self._high = 0
        self._low = 0
        self._escalate = 1.0
        self._last_excess = math.inf
        self._probe: tuple[float, float, float, float] | None = None
        self._a_probe: tuple[float, float] | None = None   # (latency, duty) right after a move
        self._sleep_now = self._move_sleep = 0.0
        self._beta_probe: tuple[float, float] | None = None
        # realised / predicted training gain of the last optimising move, per direction:
        # the local model under-predicts along a curved landscape, and this corrects it
        self.gain_calibration = {-1.0: 1.0, 1.0: 1.0}
        self._gain_probe: tuple[float, float, float] | None = None   # (dir, predicted, rate0)
        self.duty_scale = 1.0          # learnt correction of the inner model's duty gain
        self._ceiling = math.inf        # an MPS level where the sleep could not hold the SLO
        self._since_move = 0
        self._steady = 0               # periods the load (seen through the duty) held still
        self._last_duty: float | None = None
        self._ceiling_left = 0
        self._ceiling_ref: float | None = None   # the load seen under the ceiling at first
        self._ceiling_drop = 0.0     # its relative fall that lifts the ceiling
        self._ceiling_ref_level = math.nan     # the level the reference was read at
        self._last_dir = 0.0
        #: whether the iteration times passed to :meth:`update` are measured (set by the
        #: two-tier controller); an assumed time is used for predictions but never learnt from
        self.iteration_measured = True
        self.duty_time_s = None if duty_time_s is None else positive("duty_time_s", duty_time_s)
        self.feedforward = flag("feedforward", feedforward)
        self._ff_ms = 0.0    # latency the feedforward sleep took off the first reading after
        self._ff_ready = False   # a move was just made and has had no feedforward yet

    def duty(self, t: float, sleep_s: float) -> float:
        """The training's running fraction at sleep ``sleep_s`` (iteration time ``t``)."""
        tau = self.duty_time_s if self.duty_time_s else t
        return tau / (tau + sleep_s)

    @property
    def ceiling_pct(self) -> float | None:
        """The level no optimising move returns to now (a level the sleep could not hold);
        None when there is none."""
        return None if math.isinf(self._ceiling) else self._ceiling

    def horizon(self) -> float:
        """Periods over which a move's gain is counted: ``horizon_periods``, or the time the
        load has held still if longer (a regime that has lasted that long is expected to last
        about as long again), so a small steady gain pays in the end."""
        return float(max(self.horizon_periods, self._steady))

    def _pinned_low_load(self) -> float | None:
        """The mean latency of the last ``pinned_periods`` readings if the sleep was pinned
        at its lower bound in all of them (the load as this level sees it, no model needed),
        else None."""
        if len(self._recent) < self.pinned_periods:
            return None
        last = list(self._recent)[-self.pinned_periods:]
        if any(r[1] > self.sleep_lo + 1e-9 for r in last):
            return None
        return sum(r[0] for r in last) / len(last)

    def _track_ceiling(self) -> None:
        """Lift the ceiling once the load has fallen enough for the failed level to hold.

        The load is read at the level below the ceiling as :meth:`_pinned_low_load`; the
        first such reading after the failure is the reference (read again if the level
        changes: a lower level's latency is lower at the same load), and the ceiling goes
        when the load has fallen by the failed level's relative excess. Lifting it whenever
        the sleep pinned low with headroom, as before, read the headroom the move down itself
        made as a falling load: on four partitions the loop went 50 -> 75 -> 50 every few
        dozen periods, each move up 5-15 % over the SLO. At the end of ``horizon_periods`` the
        ceiling goes only if the load is back at or under the reference (or none was read):
        otherwise it is renewed."""
        if math.isinf(self._ceiling):
            return
        if self._ceiling_ref is not None and self.mps_pct != self._ceiling_ref_level:
            self._ceiling_ref = None          # read at another level: read it again here
        load = self._pinned_low_load()
        if self._ceiling_left > 0:
            self._ceiling_left -= 1
            if self._ceiling_left == 0:
                if self._ceiling_ref is not None and (load is None or load > self._ceiling_ref):
                    self._ceiling_left = self.horizon_periods    # the load has not fallen
                else:
                    self._ceiling = math.inf
                    return
        if load is None:
            return
        if self._ceiling_ref is None:
            self._ceiling_ref, self._ceiling_ref_level = load, self.mps_pct
        elif load < self._ceiling_ref * (1.0 - self._ceiling_drop):
            self._ceiling, self._ceiling_left = math.inf, 0

    def restart_count(self) -> None:
        self.count = 0
        self._win.clear()

    # ---- learning ------------------------------------------------------------------------------
    def _learn_duty(self, lat: float, sleep: float, t: float, duty_gain: float) -> None:
        """At the first window after a move: the inner loop moved the duty to bring the
        latency from its post-restart reading back to the set point; their ratio is the local
        latency per unit duty, which corrects the inner model's."""
        if self._a_probe is None or not (t > 0 and duty_gain > 0):
            return
        l1, d1 = self._a_probe
        self._a_probe = None
        d = self.duty(t, sleep)
        if abs(d - d1) < 0.02 or abs(l1 - lat) < 0.005 * self.slo_ms:
            return
        sample = (l1 - lat) / (d - d1) / duty_gain
        if sample > 0 and math.isfinite(sample):
            new = math.exp(0.5 * math.log(self.duty_scale) + 0.5 * math.log(sample))
            self.duty_scale = min(max(new, 0.2), 5.0)

    def _learn(self, latency_ms: float, iteration_s: float, sleep_s: float) -> None:
        """The first reading after a restart, at the old sleep: slope and beta samples."""
        if self._probe is None:
            return
        if iteration_s > 0:
            self._a_probe = (latency_ms, self.duty(iteration_s, sleep_s))
        m0, l0, t0, dm = self._probe
        self._probe = None
        sample = (latency_ms - l0 + self._ff_ms) / dm    # the move's effect alone
        self._ff_ms = 0.0
        if sample > 0 and math.isfinite(sample):
            lo, hi = self._slope_bounds
            w = 0.7 if self.learnt == 0 else 0.5     # the prior is weak: trust the first sample
            new = math.exp((1 - w) * math.log(self.mps_gain) + w * math.log(sample))
            self.mps_gain = min(max(new, lo), hi)
            self.learnt += 1
        if t0 > 0 and self.mps_pct != m0:
            self._beta_probe = (m0, t0)     # learnt at the next window, on its median time

    # ---- decisions -----------------------------------------------------------------------------
    def _snap(self, target: float, direction: float) -> float:
        """The level a move towards ``target`` lands on: at or below it going down (at least
        one level down), at or above it going up (at least one level up)."""
        assert self.levels is not None
        if direction < 0:
            below = [v for v in self.levels if v <= min(target, self.mps_pct - 1e-9) + 1e-9]
            return below[-1] if below else self.mps_pct
        above = [v for v in self.levels if v >= max(target, self.mps_pct + 1e-9) - 1e-9]
        return above[0] if above else self.mps_pct

    def _move(self, delta: float, why: str, latency_ms: float, iteration_s: float
              ) -> tuple[float | None, str]:
        new = float(min(max(round(self.mps_pct + delta), self.lo), self.hi))
        if self.levels is not None:
            new = self._snap(self.mps_pct + delta, math.copysign(1.0, delta))
        if new == self.mps_pct:
            return None, f"outer: {why}, at MPS bound"
        l0 = sum(r[0] for r in self._recent) / len(self._recent) if self._recent else latency_ms
        ts = sorted(w[2] for w in self._win if math.isfinite(w[2]) and w[2] > 0)
        t0 = ts[len(ts) // 2] if len(ts) >= 3 else iteration_s
        self._probe = (self.mps_pct, l0, t0, new - self.mps_pct)
        self._move_sleep = self._sleep_now     # held through the restart
        self._ff_ready = True
        old, self.mps_pct = self.mps_pct, new
        self._last_dir = math.copysign(1.0, new - old)
        self._since_move = 0
        self._steady = 0
        self._last_duty = None
        self.moves += 1
        self._win.clear()
        self._recent.clear()
        self.count = 0
        self._high = self._low = 0
        return new, f"outer throughput: {why}, MPS {old:g} -> {new:g}"

    def feedforward_sleep(self, iteration_s: float, duty_gain: float) -> float | None:
        """The sleep to set with the upward move just made: by the inner model (``duty_gain``,
        latency per unit duty, times the learnt ``duty_scale``), the sleep that brings the
        predicted latency after the move (the window's, plus ``mps_gain * dm``) back to the
        set point, within the sleep bounds; the latency it takes off is added back when the
        slope is learnt. With a restart-free knob (``restart_s == 0``) at least the sleep
        that keeps share x duty where it was, even when the prediction stays under the set
        point. None after a downward move, when the prediction stays under the set point
        (a move into headroom) with a restart, with ``feedforward`` off or without a usable
        duty gain."""
        ready, self._ff_ready = self._ff_ready, False
        if not self.feedforward or not ready or self._probe is None:
            return None
        m0, l0, _t0, dm = self._probe
        excess = l0 + self.mps_gain * dm - self.slo_ms    # predicted over the set point
        free = self.restart_s == 0.0
        if dm <= 0 or (excess <= 0 and not free) or not (
                duty_gain > 0 and math.isfinite(duty_gain)) or not (
                iteration_s > 0 and math.isfinite(iteration_s)):
            return None
        gain = duty_gain * self.duty_scale
        tau = self.duty_time_s if self.duty_time_s else \
            iteration_s * (self.mps_pct / m0) ** -self.beta
        d0 = self.duty(tau, self._move_sleep)
        d1 = max(d0 - max(excess, 0.0) / gain, 0.05)
        if free:
            # restart-free: at least keep the footprint (share x duty) where it was; the
            # learnt slope alone under-predicted a whole partition's rise
            d1 = min(d1, d0 * m0 / self.mps_pct)
        s1 = min(max(tau * (1.0 - d1) / d1, self.sleep_lo), self.sleep_hi)
        self._ff_ms = gain * (d0 - self.duty(tau, s1))
        self._move_sleep = s1
        return s1

    def _best_move(self, lat: float, sleep: float, t: float, duty_gain: float
                   ) -> tuple[float, float]:
        """(delta, predicted relative gain) of the best candidate move (0, 0 if none)."""
        d0 = self.duty(t, sleep)
        rate0 = d0 / t
        pinned_low = self.aim_from_low and lat < self.slo_ms and \
            sleep <= self.sleep_lo + 0.01 * (self.sleep_hi - self.sleep_lo)
        best, best_gain = 0.0, 0.0
        steps: tuple[float, ...] = (2, 4, 8, 16, 32, 64)
        if self.levels is not None:   # one level either way: the smallest move there is
            steps = (1e-6,)
        for step in steps:
            for sign in (-1.0, 1.0):
                if self.levels is None and step > (
                        self.max_up_pct if sign > 0 else self.max_down_pct):
                    continue
                dm = sign * step
                m1 = min(max(self.mps_pct + dm, self.lo), self.hi)
                if self.levels is not None:
                    m1 = self._snap(m1, sign)
                if dm > 0 and m1 >= self._ceiling:
                    continue
                dm = m1 - self.mps_pct
                if abs(dm) < max(self.min_step_pct, 1.0):
                    continue
                delta_l = self.mps_gain * dm
                t1 = t * (m1 / self.mps_pct) ** -self.beta
                # an upward move keeps a safety margin under the set point, except from a
                # sleep pinned at its lower bound with headroom: there the margin would park
                # the loop below the SLO for good (after the move the inner loop regulates)
                target = self.slo_ms * (1.0 - self.safety_margin) if dm > 0 and not pinned_low \
                    else self.slo_ms
                # the learnt slope is the latency change at the same sleep, where the new
                # iteration time already moves the duty (to ``d_same``): the inner loop moves
                # it on from there, not from the old level's duty
                tau1 = self.duty_time_s if self.duty_time_s else t1
                d_same = self.duty(tau1, sleep)
                d1 = d_same + (target - lat - delta_l) / duty_gain if duty_gain > 0 else (
                    d_same if lat + delta_l <= target else -1.0)
                d1 = min(d1, 1.0)
                if d1 <= 0 or tau1 * (1.0 - d1) / d1 > self.sleep_lo + 0.8 * (
                        self.sleep_hi - self.sleep_lo):
                    continue
                gain = (d1 / t1) / rate0 - 1.0
                if gain > best_gain:
                    best, best_gain = dm, gain
        return best, best_gain

    def update(self, latency_ms: float, sleep_s: float, saturated: str | None,
               duty_gain: float, iteration_s: float) -> tuple[float | None, str]:
        """One valid (unheld) period: latency, sleep after the inner update, its saturation,
        ``A`` (latency per unit duty, ms) and the iteration time (s; NaN: unknown).

        Returns
        -------
        (float or None, str)
            The new MPS percentage (None: unchanged) and the reason.
        """
        t = iteration_s
        self._sleep_now = sleep_s
        if math.isfinite(latency_ms):
            self._learn(latency_ms, t, self._move_sleep)
            self._recent.append((latency_ms, sleep_s, t))
            self._win.append((latency_ms, sleep_s, t))
        self._high = self._high + 1 if saturated == "high" and latency_ms > self.slo_ms else 0
        if self._high:
            self._steady = 0
        self._low = self._low + 1 if saturated == "low" and latency_ms < self.slo_ms else 0
        # a ceiling goes once the load has fallen (held for the whole horizon regardless, it
        # kept the share low through a falling load)
        self._track_ceiling()
        self.count += 1
        self._since_move += 1
        pinned = list(self._recent)[-self.pinned_periods:]
        if self._high >= self.pinned_periods and sum(r[0] for r in pinned) / len(pinned) > \
                1.005 * self.slo_ms:
            # act early: the sleep cannot hold the SLO; cut MPS by the learnt slope, doubling
            # only if the last cut did not shrink the excess
            excess = sum(r[0] for r in pinned) / len(pinned) - self.slo_ms * (
                1.0 - self.safety_margin)
            if excess >= self._last_excess:
                self._escalate = min(self._escalate * 2.0, 8.0)
            self._last_excess = excess
            step = max(self.min_step_pct, excess / self.mps_gain) * self._escalate
            step = min(step, 0.3 * self.mps_pct)
            # an upward move that failed: its level is a ceiling for a horizon (no optimising
            # move returns there); a load rise long after the move is not the level's fault.
            # With a short ``every`` (a restart-free knob) the sleep takes longer than two
            # decisions to climb to its bound, so the window is at least the decision's own.
            if self._last_dir > 0 and self._since_move <= 2 * max(self.every, self.min_window):
                self._ceiling, self._ceiling_left = self.mps_pct, self.horizon_periods
                self._ceiling_drop = min(max(excess / self.slo_ms, 0.02), 0.2)
                self._ceiling_ref = None
            return self._move(-step, "sleep pinned high", latency_ms, t)
        if self._high == 0 and self.count > self.pinned_periods + 2:
            self._escalate, self._last_excess = 1.0, math.inf
        early = self._low >= 2 * self.pinned_periods and self.count >= 2 * self.pinned_periods
        if self.count < self.every and not early:
            return None, ""
        periods, self.count = self.count, 0      # periods since the last decision
        if self.every >= self.min_window:
            win = self._win[-self.every:]
            self._win.clear()
            periods = len(win)
        else:
            # a short window (a restart-free knob): decide every ``every`` periods, but on the
            # last ``min_window`` readings since the last move, not on one period's
            if len(self._win) < self.min_window and not early:
                return None, ""
            win = self._win[-self.min_window:]
            del self._win[:-self.min_window]
        if len(win) < max(1, self.every // 2) and not early:
            return None, "outer: hold, too few readings in the window"
        if not win:
            return None, "outer: hold, no readings"
        if self._low >= self.pinned_periods:
            # the sleep is pinned at its lower bound with headroom now: the load is what these
            # readings show, not the window's average (after a load fall the older readings'
            # sleep and latency describe the load before it, and a move down looked
            # profitable from a sleep already at zero)
            win = win[-self._low:]
        n = len(win)
        lat = sum(w[0] for w in win) / n
        sleep = sum(w[1] for w in win) / n
        ts = sorted(w[2] for w in win if math.isfinite(w[2]) and w[2] > 0)
        tw = ts[len(ts) // 2] if ts else (t if math.isfinite(t) and t > 0 else math.nan)
        if not math.isfinite(tw):
            return None, "outer: hold, no iteration time"
        if not any(w[1] <= self.sleep_lo + 1e-9 or w[1] >= self.sleep_hi - 1e-9
                   for w in win[-3:]):
            self._learn_duty(lat, sleep, tw, duty_gain)
        else:
            self._a_probe = None
        duty_gain *= self.duty_scale
        # how long the load has held still: the window's duty (at a fixed MPS the inner loop's
        # answer to the load) moved by less than 3 % of the set point in latency terms
        d_now = self.duty(tw, sleep)
        if self._last_duty is not None and abs(d_now - self._last_duty) * duty_gain > \
                0.03 * self.slo_ms:
            self._steady = 0
        else:
            self._steady += periods
        self._last_duty = d_now
        if self._gain_probe is not None and not self._high:
            direction, predicted, rate0 = self._gain_probe
            self._gain_probe = None
            realised = self.duty(tw, sleep) / tw / rate0 - 1.0
            # like beta: an assumed constant iteration time hides the MPS move's effect on the
            # training rate, so only measured times calibrate the predictions
            # one window's realised gain is noisy (load, restart transient): a bounded sample,
            # a partial step in log space and bounds on the result, so one under-realised
            # move cannot stop every later move in that direction
            if predicted > 0 and self.iteration_measured:
                c = min(max(realised / predicted, 0.5), 2.0)
                old = self.gain_calibration[direction]
                self.gain_calibration[direction] = min(max(
                    math.exp(0.7 * math.log(old) + 0.3 * math.log(c)), 0.5), 2.0)
        if self._beta_probe is not None and len(ts) >= 3:
            m0, t0 = self._beta_probe
            self._beta_probe = None
            b = math.log(tw / t0) / math.log(m0 / self.mps_pct)
            # only from measured iteration times: an assumed constant time would read as
            # beta = 0 and stop every upward move for good
            if math.isfinite(b) and self.iteration_measured:
                # the prior is a guess: the first measured sample replaces it
                w = 1.0 if self.beta_learnt == 0 else 0.5
                self.beta = min(max((1.0 - w) * self.beta + w * b, 0.0), 4.0)
                self.beta_learnt += 1
        if self.explore and self.learnt == 0 and self.moves == 0:
            return self._move(-self.max_up_pct, "probe to learn the MPS slope", lat, tw)
        dm, gain = self._best_move(lat, sleep, tw, duty_gain)
        if dm:
            gain *= self.gain_calibration[math.copysign(1.0, dm)]
        cost = self.restart_margin * self.restart_s / (self.horizon() * self.period_s)
        if dm and self._last_dir and math.copysign(1.0, dm) != self._last_dir:
            cost *= 2.0          # hysteresis: reversing the last move needs twice the gain
        if dm == 0.0 or gain <= cost:
            self._low = 0
            return None, f"outer: stay (best predicted gain {100 * gain:.1f} % <= cost " \
                         f"{100 * cost:.1f} %)"
        self._gain_probe = (math.copysign(1.0, dm), gain, self.duty(tw, sleep) / tw)
        return self._move(dm, f"predicted training +{100 * gain:.1f} %", lat, tw)
