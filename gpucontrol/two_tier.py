"""The two-tier controller of the GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-C: a sleep
inner loop every control period, a spatial-share outer loop above it.

Inner loop: P (or PI) on the increment of the training's sleep, ``s(k+1) = s(k) + kp e(k)``
(:class:`~gpucontrol.controllers.InnerSleepController`). Outer loop, a strategy object: by
default :class:`~gpucontrol.outer.ThroughputOuter`, which goes to the share with the most
predicted training at the SLO from the identified curves; ``outer="paper"`` is the paper's
loop (:class:`~gpucontrol.controllers.OuterMPSOptimizer`), ``"mid-range"`` its mid-ranging
variant, ``"none"`` sleep only. The knobs are described by :class:`~gpucontrol.knobs.ShareKnob`
(the shares the backend offers and what a change costs) and :class:`~gpucontrol.knobs.SleepKnob`.

What the default derives, and why:

* detune 0.5: the P loop ``kp = 0.5 / m`` is stable for real/nominal gain ratios in (0, 4)
  without measurement delay and (0, 2) with an undisclosed one-period delay (detune 1, the
  paper's deadbeat loop, puts the delayed loop's poles on the unit circle). The price: a step
  settles in 6 periods instead of 1.
* gain scheduling on the operating point: the latency is linear in the training's running
  fraction ``d = tau / (tau + s)``, not in the sleep (the training interferes only while it
  computes), so the slope at sleep ``s`` is ``A tau / (tau + s)**2`` with ``A`` from the fitted
  line (:func:`~gpucontrol.models.duty_form`); near sleep 0 with a short iteration it is several
  times the fitted one. ``tau`` is the iteration time (identified per share, or the median of
  the node's last 5 readings at this share) or a duty cycler's run quantum. Past the
  identified span the slope is held at its edge's.
* the load in the gain: the throughput loop believes the latency is the identified curve
  times ``exp(q + delta)`` (the load, and this share's correction), and that factor scales the
  slope in the sleep as much as the level. The gain is divided by it: identified at one load
  and run at half of it, an unscaled loop closes a quarter of an error a period where the
  design says half, and a load step takes more than twice as long to answer (14 periods to
  settle instead of 6).
* glitches: a reading above 50x the SLO is held like a missing period, seen by neither loop.
  Readings past explaining (the throughput loop's reading noise at its cap) that become
  explainable again restart the controller as built, at its starting share: what they
  taught would otherwise decide the run after them.
* the oscillation guard (:class:`~gpucontrol.controllers.InnerSleepController`) learns per
  share: a share change restarts its window (the errors of another operating point, and the
  first reading after the change, the predicted sleep's error, say nothing of ringing at this
  one), and the backoff it learnt at a share comes back with the share (a slope the model
  underestimates is the model's error there), fading to none over the outer loop's memory as
  its corrections do. A share not left yet keeps the backoff the loop has (an unknown delay
  rings everywhere).
* after a share change the inner loop holds while the training restarts:
  ``ceil(change_s / T)`` periods and one more when the duration was given or measured (a late
  reading would show the downtime), the assumed 15 s when unknown, at least 2 periods
  (:attr:`TwoTierController.HOLD_PERIODS_AFTER_MPS`), none for a restart-free backend. The
  hold is one-sided: a reading over the set point still raises the sleep. The readings of a
  restart are low (the training is down) and teach nothing, but one over the set point says
  the training runs and runs too fast: a resize that lands late (an MPS resize by a
  pre-started shadow process can take seconds to land) leaves the old share running at the
  new share's predicted sleep, and a predicted sleep may be short.
* the throughput loop aims under the SLO by the reading noise it measures, so that noise
  alone puts at most 1 % of periods over 1.05x the SLO: the SLO itself for a quiet mean,
  a few % under it for a period's p99, a noisy statistic; never more than 10 % under it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections import deque
from dataclasses import dataclass
from typing import Any

from gpucontrol._validate import bounds, choice, in_range, is_bool, positive
from gpucontrol.controllers import (
    GainEstimator,
    InnerResult,
    InnerSleepController,
    OuterMPSOptimizer,
)
from gpucontrol.design import Design, design_p
from gpucontrol.errors import ConfigurationError
from gpucontrol.knobs import ShareKnob, SleepKnob
from gpucontrol.measurement import Measurement, as_measurement, check_measurement, usable
from gpucontrol.models import LatencyModelFamily, LinearLatencyModel
from gpucontrol.noise import Aim
from gpucontrol.outer import ThroughputOuter

#: The outer strategies by name: the default throughput loop and the paper's family.
OUTER_STRATEGIES = ("throughput", *OuterMPSOptimizer.STRATEGIES)
#: What an actuation's reason says when the controller starts afresh after readings past
#: explaining (the node agent counts these periods).
FRESH_START = "fresh start"


@dataclass(frozen=True, slots=True)     # (slots: built every period, a third cheaper)
class Actuation:
    """What to apply for the next period.

    ``share_pct`` is the spatial share whatever the backend (an MPS percentage or a
    green-context partition); the field is stored as ``mps_pct``, its historical name, which
    plants, the node and the harness read, and which constructs it by keyword. ``mps_changed``
    (alias ``share_changed``) means the share changed (for MPS: the training processes must
    restart with it); ``saturated`` means the sleep is pinned at a bound (the inner loop alone
    cannot reach the SLO); ``reason`` says in words what the controller did.

    Parameters
    ----------
    sleep_s : float
        Training sleep interval for the next period (s).
    mps_pct : float
        Training share (%), also read as ``share_pct``.
    mps_changed : bool
        The share changed (also read as ``share_changed``).
    saturated : bool
        The sleep is pinned at a bound.
    reason : str
        What the controller did, in words.
    error_ms : float
        ``slo - latency`` of the measurement acted on (NaN when held).
    gain_estimate : float
        The adaptive gain estimate (NaN when not adaptive).
    """

    sleep_s: float
    mps_pct: float
    mps_changed: bool = False
    saturated: bool = False
    reason: str = ""
    error_ms: float = math.nan
    gain_estimate: float = math.nan

    @property
    def share_pct(self) -> float:
        """The training's spatial share (%): the canonical name of ``mps_pct``."""
        return self.mps_pct

    @property
    def share_changed(self) -> bool:
        """The share changed this period (``mps_changed``)."""
        return self.mps_changed


class TwoTierController:
    """Per-GPU two-tier latency controller.

    Parameters
    ----------
    model : LinearLatencyModel or LatencyModelFamily
        Latency-vs-sleep model; a family identified per share level gain-schedules the inner
        loop and gives the outer loop its curves (with the training's iteration time per
        level where identified, and the sleep span fitted over).
    slo_ms : float
        Latency set point (ms per batch), > 0.
    inner_period_s : float
        Inner control period T (s), in [0.01, 3600].
    mode : "mean" or "p99"
        Which statistic of the period is controlled.
    outer : str or outer-loop object
        ``"throughput"`` (default; :class:`~gpucontrol.outer.ThroughputOuter`), ``"paper"``,
        ``"mid-range"`` or ``"none"`` (:class:`~gpucontrol.controllers.OuterMPSOptimizer`), or
        an instance of either built with its own settings (e.g.
        ``OuterMPSOptimizer("paper", every=25, threshold=0.02)``).
    share : ShareKnob, optional
        The spatial share: its levels, bounds, granularity, change cost and starting share
        (default: MPS percentages 1-100, a restart of unknown length, start at 100).
    sleep : SleepKnob or (float, float), optional
        The sleep: its range, a duty cycler's run quantum, the starting sleep (default
        ``SleepKnob()``: 0-1 s, once per iteration, no starting sleep given: the throughput
        loop starts at the sleep the curves predict for the set point, the paper's loops at
        the bottom of the range); a ``(low, high)`` pair of seconds within [0, 3600] is
        ``SleepKnob((low, high))``.
    design : Design or float, optional
        Inner design (``design_p`` / ``design_pi``; its measurement delay is honoured), or a
        detune for the default P design. Default detune 0.5 for "throughput", 1 (deadbeat, the
        paper) for the others.
    adaptive : bool or GainEstimator
        Estimate the real gain online (bounded, Huber-robust RLS); an estimator object sets
        its bounds and forgetting.

    Examples
    --------
    >>> from gpucontrol import LinearLatencyModel, TwoTierController
    >>> ctl = TwoTierController(LinearLatencyModel(-12.0, 95.0), slo_ms=90.0, outer="paper")
    >>> act = ctl.update(95.0)          # 5 ms too slow: sleep more (deadbeat, the paper)
    >>> round(act.sleep_s, 4), act.mps_pct
    (0.4167, 100.0)
    >>> TwoTierController(LinearLatencyModel(-12.0, 95.0), 90.0).update(95.0).sleep_s > 0
    True
    """

    MODES = ("mean", "p99")
    #: Periods held after a share change of unknown cost (the paper's loops), and the least
    #: hold after any change that costs a restart.
    HOLD_PERIODS_AFTER_MPS = 2
    #: Readings above this many times the SLO are glitches, held as missing periods.
    PLAUSIBLE_FACTOR = 50.0

    def __init__(self, model: LinearLatencyModel | LatencyModelFamily, slo_ms: float, *,
                 inner_period_s: float = 4.0, mode: str = "mean",
                 outer: str | ThroughputOuter | OuterMPSOptimizer = "throughput",
                 share: ShareKnob | None = None,
                 sleep: SleepKnob | tuple[float, float] | None = None,
                 design: Design | float | None = None,
                 adaptive: bool | GainEstimator = False) -> None:
        self.slo_ms = positive("slo_ms", slo_ms)
        self.inner_period_s = in_range("inner_period_s", inner_period_s, 0.01, 3600.0)
        self.mode = choice("mode", mode, self.MODES)
        self.share = _knob("share", share, ShareKnob)
        self.sleep_knob = _knob("sleep", SleepKnob(bounds("sleep", sleep, 0.0, 3600.0))
                                if isinstance(sleep, (tuple, list)) else sleep, SleepKnob,
                                " or a (low, high) pair of seconds within [0, 3600]")
        self.family = _family(model)
        self.outer = _outer(outer)
        self.outer_strategy = self.outer.strategy
        modern = isinstance(self.outer, ThroughputOuter)
        self._restart_known = self.share.change_s is not None
        self.plausible_max_ms = self.PLAUSIBLE_FACTOR * self.slo_ms
        self._unlearn()
        #: aim under the SLO by the reading noise (the throughput loop learns it)
        self.noise_margin = modern
        self.gain_schedule = modern
        #: the inner gain divided by the load and correction the outer loop believes
        self.load_in_gain = modern
        #: the hold after a share change is one-sided: a reading over the set point raises the
        #: sleep (module docstring)
        self.raise_in_hold = modern
        share0 = self.share.start_pct
        self.model = self.family.at(share0)
        self.design = _design(design, self.model, self.inner_period_s, modern)
        self.measurement_delay_periods = self.design.delay_periods
        self._kp_scale = self.design.kp * self.design.model.gain  # detune, in gain units
        self._ki_scale = self.design.ki * self.design.model.gain  # a PI's, likewise
        self.inner_settling_periods = self.design.settling_periods()
        self.outer.bind(self.target_ms if modern else self.slo_ms, self.share,
                        self.sleep_knob, self.inner_period_s, self.family)
        if not (modern and self.share.restart_free) and \
                not self.inner_settling_periods < self.outer.every:
            raise ConfigurationError(
                f"the inner loop settles in {self.inner_settling_periods:g} periods, not within "
                f"one outer period (outer_every={self.outer.every}); raise outer_every above "
                f"{self.inner_settling_periods:g} or use a faster design (detune closer to 1)")
        self.decoupled = True
        estimator = _estimator(adaptive, self.model, self.slo_ms)
        self.adaptive = estimator is not None
        self.inner = InnerSleepController(
            self.design.kp, self.target_ms, self.sleep_knob.bounds_s, ki=self.design.ki,
            initial_sleep_s=self._start_sleep(), estimator=estimator,
            detune=self._kp_scale if 0 < self._kp_scale < 2 else 1.0,
            delay_periods=self.measurement_delay_periods,
            schedule=self._slope_ratio, oscillation_guard=modern)
        self._span = self.family.sleep_span_s or self.sleep_knob.bounds_s
        self._law = dataclasses.replace(self.family, sleep_span_s=self._span)
        self._duty_gain = math.nan
        self._schedule(share0)
        self.period = 0

    def _unlearn(self) -> None:
        """What the controller itself learns from readings, as when built: the set point's
        margin for the noise, the node's iteration readings, the guard's backoff per share, the
        hold after a share change."""
        self.setpoint_margin = 0.0
        self._aimed: tuple[float, ...] = ()      # what the set point was last aimed by
        self._iteration_readings: deque[float] = deque(maxlen=5)
        self._iteration_share = math.nan
        self._hold_left = 0
        #: the oscillation guard's backoff learnt at each share left (a gain error of the model
        #: there, not of the loop: it comes back with the share)
        self._backoffs: dict[float, tuple[float, int]] = {}

    # ------------------------------------------------------------------------------------------
    #: The reading's tolerance over the SLO, and how rarely noise alone may cross it (the
    #: standard normal quantile of 1 %): the margin under the SLO the throughput loop aims at.
    TOLERANCE, TAIL_Z = 0.05, 2.33

    @property
    def target_ms(self) -> float:
        """The set point the loops aim at: the SLO less ``setpoint_margin``."""
        return self.slo_ms * (1.0 - self.setpoint_margin)

    def _aim(self) -> None:
        """Re-aim both loops by the reading noise the outer loop measures (``sigma``, log, a
        median of successive differences: robust, and re-read within 64 periods after bad
        readings): the largest set point at which that noise, amplified by the loop's own
        feedback of it (``sqrt(1 + d / (2 - d))`` for a P loop at detune ``d``), puts no more
        than 1 % of periods over ``(1 + TOLERANCE) * SLO``, at most the SLO. A period's mean
        of many batches is quiet and stays aimed at the SLO itself; a period's p99 is a noisy
        statistic and is aimed a few % under it. The margin stops at twice the tolerance: a
        reading much noisier than that (scattered by tens of % of the SLO) is not
        kept under 1.05 SLO by aiming lower without throttling the training for nothing."""
        if not (self.noise_margin and isinstance(self.outer, ThroughputOuter)):
            return
        by = (self.outer.reading_noise, self._kp_scale, self.slo_ms)
        if by == self._aimed:           # (per period: the noise's median often stays)
            return
        aim = self.outer.aim_at
        if not (aim and self._aimed[1:] == by[1:]):    # (a new law at a new detune or SLO)
            self.outer.aim_at = aim = Aim(self.slo_ms, self._kp_scale, self.TOLERANCE,
                                          self.TAIL_Z)
        self._aimed = by
        self.setpoint_margin = aim.margin(by[0])
        self.inner.slo_ms = self.outer.slo_ms = self.target_ms

    @property
    def restart_s(self) -> float | None:
        """What one share change costs the training (s; None: unknown)."""
        return self.share.change_s

    @property
    def outer_every(self) -> int:
        """Periods between two outer decisions."""
        return self.outer.every

    @property
    def hold_periods_after_mps(self) -> int:
        """Periods the inner loop holds after a share change: none for a restart-free knob;
        the restart's duration ``ceil(change_s / T)`` when known, plus one period (or the
        known measurement delay: a reading one period late would show a period the training
        was still down for); the assumed 15 s plus the known measurement delay for the
        throughput loop when unknown; else :attr:`HOLD_PERIODS_AFTER_MPS`, which is also the
        least hold after a change that costs a restart."""
        if self.share.restart_free:
            return 0
        delay = self.measurement_delay_periods
        if self._restart_known:
            return max(self.HOLD_PERIODS_AFTER_MPS, math.ceil(
                self.share.cost_s / self.inner_period_s - 1e-9) + max(1, delay))
        if isinstance(self.outer, ThroughputOuter):
            return max(self.HOLD_PERIODS_AFTER_MPS, math.ceil(
                self.share.cost_s / self.inner_period_s - 1e-9) + delay)
        return self.HOLD_PERIODS_AFTER_MPS

    def set_restart_duration(self, restart_s: float) -> None:
        """Tell the controller what a share change really costs (s, >= 0; the actuator
        measures it): the hold after a change and the outer loop's price of a move."""
        self.share = dataclasses.replace(self.share, change_s=restart_s)
        self._restart_known = True
        if isinstance(self.outer, ThroughputOuter):
            self.outer.share = self.share

    @property
    def sleep_s(self) -> float:
        return self.inner.sleep_s

    @property
    def mps_pct(self) -> float:
        """The share now (%), also ``share_pct``."""
        return self.outer.share_pct

    @property
    def share_pct(self) -> float:
        """The training's spatial share now (%)."""
        return self.outer.share_pct

    def _start_sleep(self) -> float | None:
        """The sleep knob's ``initial_s`` where given, else the outer loop's prediction for the
        set point at the starting share (None: the bottom of the range, the paper's start)."""
        if self.sleep_knob.initial_s is not None:
            return self.sleep_knob.initial_s
        return self.outer.start_sleep()

    def initial_actuation(self) -> Actuation:
        """The actuation to apply before the first measurement."""
        return Actuation(self.inner.sleep_s, self.share_pct, False, False, "initial")

    # ---- the inner loop's gain schedule ---------------------------------------------------
    def _tau(self) -> float | None:
        """The duty's time constant now: a duty cycler's run quantum, else the iteration time
        (the node's readings at this share, else the identified one); None if unknown."""
        q = self.sleep_knob.run_quantum_s
        if q is not None:
            return q
        if self._iteration_readings and self._iteration_share == self.share_pct:
            xs = sorted(self._iteration_readings)      # (statistics.median's arithmetic)
            n = len(xs)
            return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
        t = self._t_identified
        return t if math.isfinite(t) else None

    def _slope_ratio(self, sleep_s: float) -> float:
        """Local slope at ``sleep_s`` over the model's (fitted) one, for a latency linear in
        the duty: ``A tau / (tau + s)**2 / |gain|`` (at a time-sliced level the outer loop
        predicts on its bent law, that law's slope in the duty for ``A``), times the outer
        loop's belief of the curve's scale where it has one; 1 while no time constant is known.
        Where the law is a line read as a duty law (no law measured on the duty), the outer
        loop reads ``A`` off the line at the time constant read here.
        Beyond the identified span the slope is held at its edge's (extrapolating the
        curvature would raise the gain on a plant nobody measured); below it the law only
        lowers the gain, the safe direction."""
        if not self.gain_schedule:
            return 1.0
        tau = self._tau()
        if tau is None:
            return 1.0
        outer = self.outer if isinstance(self.outer, ThroughputOuter) else None
        A = self._duty_gain
        if outer is not None and outer.curves.retimes:
            A = outer.duty_gain(tau)
        if not math.isfinite(A):
            return 1.0
        s = min(max(sleep_s, 0.0), self._span[1])
        scale = outer.latency_scale if self.load_in_gain and outer is not None else 1.0
        bent = outer.bent_slope(tau / (tau + s)) if outer is not None else None
        A = A if bent is None else bent
        return min(max(scale * A * tau / (tau + s) ** 2 / -self.model.gain, 0.05), 20.0)

    def _schedule(self, share_pct: float) -> None:
        """Re-point the inner loop at the model of the new share (gain scheduling)."""
        self._duty_gain = self._law.duty_law(share_pct, self.sleep_knob.run_quantum_s)[1]
        self._t_identified = self.family.iteration_s(share_pct)
        if len(self.family.points) == 1:
            return
        self.model = self.family.at(share_pct)
        self.inner.kp = self._kp_scale / self.model.gain  # the design's poles at the new
        self.inner.ki = self._ki_scale / self.model.gain  # level's gain, for P and PI alike
        if self.inner.estimator is not None:
            self.inner.estimator.reset(self.model.gain)
        if isinstance(self.outer, OuterMPSOptimizer):
            g = self.family.mps_gain(share_pct)
            if math.isfinite(g) and g > 0:
                self.outer.mps_gain = g

    def _backoff_at(self, share_pct: float) -> float:
        """The guard's backoff to take at ``share_pct``: the one learnt there, fading back to
        1 (no backoff) over the outer loop's memory (``ThroughputOuter.FORGET`` periods, as
        its corrections do: what bad readings taught does not outlive them by much); the
        loop's own where none was learnt."""
        if share_pct not in self._backoffs:
            return self.inner.backoff
        b, at = self._backoffs[share_pct]
        forget = getattr(self.outer, "FORGET", 100.0)
        return float(b ** ((1.0 - 1.0 / forget) ** (self.period - at)))

    def _note_iteration(self, m: Measurement) -> None:
        """Keep the node's iteration-time readings at the current share (the last 5)."""
        if math.isfinite(m.iteration_s) and m.iteration_s > 0 and not m.restarting:
            if self.share_pct != self._iteration_share:
                self._iteration_readings.clear()
                self._iteration_share = self.share_pct
            self._iteration_readings.append(m.iteration_s)

    # ---- one period ------------------------------------------------------------------------
    def update(self, measurement: Any) -> Actuation:
        """Take one period's measurement (float ms or Measurement-like); return the actuation.

        Raises
        ------
        TypeError
            If ``measurement`` is a string, or a sequence/array of several values, or (in
            ``mode="p99"``) a bare number: that is a mean, and the p99 loop would hold on it
            forever.
        """
        check_measurement(measurement)
        if self.mode == "p99" and (isinstance(measurement, numbers.Real) or getattr(
                measurement, "ndim", None) == 0):
            raise TypeError("mode='p99' controls the period's p99: pass "
                            "Measurement(mean=..., p99=..., count=...); a bare number "
                            f"({measurement!r}) is read as the mean")
        self.period += 1
        m: Measurement = as_measurement(measurement)
        self._note_iteration(m)
        value = m.mean_ms if self.mode == "mean" else m.p99_ms
        est = self.inner.estimator
        gain_est = est.gain if est is not None else math.nan
        if m.count <= 0 or not usable(value, self.plausible_max_ms):
            why = "hold: no requests this period" if m.count <= 0 else (
                "hold: implausible latency (glitch)" if usable(value) else
                "hold: unusable latency")
            r = self.inner.hold(why)
            return Actuation(r.sleep_s, self.share_pct, False, False, r.reason,
                             math.nan, gain_est)
        if m.restarting or self._hold_left > 0:
            self._hold_left = max(0, self._hold_left - 1)
            if self.raise_in_hold and value > self.inner.slo_ms:
                r = self.inner.update(value)
                return Actuation(r.sleep_s, self.share_pct, False, False,
                                 "hold (over the set point: sleep raised): training restarting "
                                 "after MPS change", r.error_ms, gain_est)
            r = self.inner.hold("hold: training restarting after MPS change")
            return Actuation(r.sleep_s, self.share_pct, False, False, r.reason,
                             self.slo_ms - value, gain_est)
        applied = self.inner.sleep_s
        left_pct = self.share_pct
        self._aim()
        r = self.inner.update(value)
        if isinstance(self.outer, ThroughputOuter):
            new, why = self.outer.update(value, applied, m.iteration_s)
            if self.outer.recovered:
                return self._start_afresh(left_pct, r, gain_est)
        else:
            gain = est.gain if est is not None else self.model.gain
            new, why = self.outer.update(value, r.sleep_s, r.saturated, gain)
        reason = r.reason + (f"; {why}" if why else "")
        if new is None:
            return Actuation(r.sleep_s, self.share_pct, False, r.saturated is not None,
                             reason, r.error_ms, gain_est)
        s1 = self.outer.move_sleep()
        if s1 is not None:
            self.inner.set_sleep(s1)
        self._schedule(new)
        self._backoffs[left_pct] = (self.inner.new_operating_point(self._backoff_at(new)),
                                    self.period)
        self._hold_left = self.hold_periods_after_mps
        return Actuation(self.inner.sleep_s, new, True, r.saturated is not None, reason,
                         r.error_ms, gain_est)

    def _start_afresh(self, left_pct: float, r: InnerResult, gain_est: float) -> Actuation:
        """Readings past explaining (the reading noise at its cap: most successive readings
        20 % or more apart) have become explainable again (the noise read from the median of
        the last 16 differences under half the cap). What they taught (a load, corrections, a
        guard's backoff, the noise itself) would decide the run after them, and the share they
        drove the loop to would be where it starts over. So it starts as built: the set point
        at the SLO, nothing learnt, the starting share and the sleep the curves predict
        there."""
        assert isinstance(self.outer, ThroughputOuter)
        self._unlearn()
        self.inner.slo_ms = self.outer.slo_ms = self.target_ms
        self.outer.start_afresh()
        new = self.share_pct
        self._schedule(new)
        s0 = self._start_sleep()
        self.inner.start_afresh(self.inner.lo if s0 is None else s0)
        moved = new != left_pct
        self._hold_left = self.hold_periods_after_mps if moved else 0
        return Actuation(self.inner.sleep_s, new, moved, False, f"{r.reason}; {FRESH_START}: "
                         "the readings are explainable again after readings past explaining",
                         r.error_ms, gain_est)


def _knob(name: str, value: Any, kind: type, also: str = "") -> Any:
    """``value`` if it is a ``kind`` (a default one when None), else a clear error (``also``:
    what else the argument takes, in words)."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise ConfigurationError(f"{name} must be a {kind.__name__}{also}, got "
                                 f"{type(value).__name__} {value!r:.60}")
    return value


def _family(model: Any) -> LatencyModelFamily:
    """The model as a family of one batch size (a single model: one point at 100 %)."""
    fam = LatencyModelFamily.of(model)
    if len(fam.batches) > 1:  # it would schedule on one batch's rows, unsaid
        raise ConfigurationError(
            "model: the family has rows for inference batches "
            f"{', '.join('none given' if b is None else str(b) for b in fam.batches)}"
            "; the controller runs at one batch size: keep that batch's rows")
    return fam


def _outer(outer: Any) -> ThroughputOuter | OuterMPSOptimizer:
    """The outer-loop object for ``outer`` (a name or an unbound instance)."""
    if isinstance(outer, (ThroughputOuter, OuterMPSOptimizer)):
        return outer
    if not (isinstance(outer, str) and outer in OUTER_STRATEGIES):
        raise ConfigurationError(
            f"outer must be one of {', '.join(map(repr, OUTER_STRATEGIES))} or a ThroughputOuter "
            f"or OuterMPSOptimizer instance, got {type(outer).__name__} {outer!r:.60}")
    return ThroughputOuter() if outer == "throughput" else OuterMPSOptimizer(outer)


def _design(design: Any, model: LinearLatencyModel, period_s: float, modern: bool) -> Design:
    """The inner design: given, or the P design at a detune (default 0.5 for the throughput
    loop, 1 for the paper's)."""
    if isinstance(design, Design):
        return design
    if design is None:
        return design_p(model, 0.5 if modern else 1.0, period_s)
    if isinstance(design, numbers.Real) and not isinstance(design, bool):
        detune = in_range("design (the P loop's detune)", design, 0.0, 2.0, lo_open=True,
                          hi_open=True)
        return design_p(model, detune, period_s)
    raise ConfigurationError("design must be a gpucontrol Design (design_p / design_pi) or a "
                             f"detune in (0, 2), got {design!r:.60}")


def _estimator(adaptive: Any, model: LinearLatencyModel, slo_ms: float
               ) -> GainEstimator | None:
    """The adaptive gain estimator: None, the default one, or the one given."""
    if isinstance(adaptive, GainEstimator):
        adaptive.reset(model.gain)
        return adaptive
    if adaptive is None:
        return None
    if not is_bool(adaptive):       # (a number, an array: neither says yes or no plainly)
        raise ConfigurationError(f"adaptive must be True, False or a GainEstimator, got "
                                 f"{type(adaptive).__name__} {adaptive!r:.60}")
    if adaptive:
        return GainEstimator(model.gain, 0.85, (0.1, 10.0), min_effect_ms=0.01 * slo_ms)
    return None


__all__ = ["FRESH_START", "OUTER_STRATEGIES", "Actuation", "TwoTierController"]
