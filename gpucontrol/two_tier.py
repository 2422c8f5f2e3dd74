"""The two-tier controller of the GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-C: sleep
inner loop, MPS outer loop.

Inner loop, every ``inner_period_s`` (4 s): P (or PI) on the sleep interval of the training
processes. Outer loop: by default the throughput-seeking loop of :mod:`gpucontrol.outer`
(window decisions, moves only when they pay, slope learnt online); ``outer="paper"`` is the
paper's loop, every ``outer_every`` inner periods (25), moving the training MPS percentage only
when the error exceeds ``mps_threshold`` of the SLO or the inner loop is saturated. The loops
are decoupled when the inner loop settles within one outer period; the constructor checks this
from the design and exposes it as ``inner_settling_periods``.

Defaults of the default (``"throughput"``) controller, and what they cost:

* ``detune = 0.5``: stable for real/nominal gain ratios in (0, 4) without measurement delay and
  (0, 2) with an unknown one-period delay (detune 1 puts the delayed loop's poles on the unit
  circle). The price is speed: on the nominal model the pole is 0.5, so a step settles to 2 %
  in 6 periods instead of 1 (11 periods with a one-period delay).
* gain scheduling on the operating point: the latency is linear in the training's duty
  ``t/(t + s)``, not in the sleep, so the local slope at sleep ``s`` is the identified slope
  times ``(t + s_lo)(t + s_hi) / (t + s)**2`` (``t``: iteration time, ``[s_lo, s_hi]``: the
  identified span); near sleep 0 with a short iteration that is 5x or more. A duty-cycling
  actuator (``run_quantum_s``) runs the training ``q`` s between pauses: its duty is
  ``q/(q + s)``, and ``q`` takes the iteration time's place in the schedule.
* readings above ``plausible_max_ms`` (default 50x the SLO) are glitches: held like a missing
  period, never seen by the outer loop or the estimator.
* after an MPS change the inner loop holds for ``ceil(restart_s / inner_period_s)`` periods
  (``restart_s`` default 15 s, the GPUColo paper's longest measured restart; one period more
  when the duration is given or measured, since a late reading would show the downtime), or
  while the measurement says ``restarting``.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpucontrol._validate import bounds, choice, flag, in_range, int_at_least, positive
from gpucontrol.controllers import (
    GainEstimator,
    InnerSleepController,
    Measurement,
    OuterMPSOptimizer,
    as_measurement,
    check_measurement,
    usable,
)
from gpucontrol.design import Design, design_p
from gpucontrol.errors import ConfigurationError
from gpucontrol.models import LatencyModelFamily, LinearLatencyModel
from gpucontrol.outer import ThroughputOuter

#: The outer strategies: the default throughput-seeking loop and the paper's family.
OUTER_STRATEGIES = ("throughput", *OuterMPSOptimizer.STRATEGIES)


@dataclass(frozen=True)
class Actuation:
    """What to apply for the next period.

    ``mps_changed`` means the training processes must restart with ``mps_pct``;
    ``saturated`` means the sleep is pinned at a bound (the inner loop alone cannot reach the
    SLO); ``reason`` says in words what the controller did.

    Parameters
    ----------
    sleep_s : float
        Training sleep interval for the next period (s).
    mps_pct : float
        Training MPS percentage.
    mps_changed : bool
        The training processes must restart with ``mps_pct``.
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


class TwoTierController:
    """Per-GPU two-tier latency controller.

    Parameters
    ----------
    model : LinearLatencyModel or LatencyModelFamily
        Nominal latency-vs-sleep model; a family schedules the gain by MPS level (and gives
        the outer loop its latency-vs-MPS slope).
    slo_ms : float
        Latency set point (ms per batch), > 0.
    inner_period_s : float
        Inner control period T (s), in [0.01, 3600].
    outer_every : int
        Outer loop period (the throughput loop's window) in inner periods, >= 1.
    mps_threshold : float
        Relative error in [0, 1) below which the paper's outer loop does not act.
    sleep_bounds_s, mps_bounds_pct : (low, high)
        Actuator limits; sleep within [0, 3600] s, MPS within [1, 100] %.
    mode : "mean" or "p99"
        Which statistic of the period is controlled (both loops act on it; in p99 mode the
        throughput loop's pinned-high rule lets MPS own a tail the sleep cannot move).
    outer : "throughput", "paper", "mid-range" or "none"
        Outer strategy; "throughput" (default) is :class:`gpucontrol.outer.ThroughputOuter`,
        "paper" the GPUColo loop, "none" sleep only.
    adaptive : bool
        Estimate the real gain online (bounded, Huber-robust RLS, see :class:`GainEstimator`).
    design : Design, optional
        Inner design (default ``design_p(model, detune)``); its ``kp``/``ki`` are used.
    detune : float, optional
        ``kp * gain`` of the default P design, in (0, 2). Default 0.5 for "throughput" (stable
        under an unknown one-period delay), 1 (deadbeat, the paper) for the other strategies.
    initial_sleep_s : float, optional
        Starting sleep (default: the lower sleep bound).
    initial_mps_pct : float, optional
        Starting MPS percentage (default: the upper MPS bound).
    mps_gain_ms_per_pct : float, optional
        Latency sensitivity to the MPS percentage for the outer loop (default: from the
        family, else ``slo_ms / 100`` for the paper's loops and ``slo_ms / 200`` as the
        throughput loop's prior, which it then learns). With neither a family nor this
        value, the throughput loop makes one probing move at its first window to learn it.
    sleep_target_s : float, optional
        The ``"mid-range"`` outer loop's sleep target (default: 5 % into the sleep range).
    hold_periods_after_mps : int, optional
        Least number of periods to hold the inner loop after an MPS change (>= 0); with a
        known ``restart_s`` the hold lasts at least ``ceil(restart_s / inner_period_s)``.
        Default 2, or 0 with ``restart_s=0`` (a restart-free knob: nothing restarts, and the
        first reading after the change is already at the new share and the held sleep).
    adaptive_ratio_bounds : (float, float)
        Bounds of the adaptive gain estimate as ratios of the nominal gain.
    forgetting : float
        Forgetting factor of the adaptive estimator, in [0.5, 1].
    measurement_delay_periods : int
        Known measurement delay (periods, >= 0): the design's stability check and the
        estimator's pairing honour it.
    restart_s : float, optional
        The training restart's real duration after an MPS change (s); the actuator knows it
        (:meth:`set_restart_duration` updates it). Default 15 s for "throughput". A
        restart-free spatial-sharing backend passes 0: a move then costs nothing and the
        decoupling check is waived, so ``outer_every`` may be short, down to 1 (a decision
        still averages the last ``min_window`` = 8 readings at the current share).
    iteration_time_s : float, optional
        Training iteration time (s, sleep excluded) when known in advance (used for the gain
        schedule and the outer loop's predictions, never learnt from: it is the same at every
        share); a measurement's ``iteration_s`` (the node's measured value) overrides it from
        then on: the median of the last 5 readings at the current share, so one long
        iteration (a checkpoint) does not swing the gain schedule. Without either the outer
        loop assumes 0.5 s and an iteration time inversely proportional to the share, and
        trains less (BENCHMARKS.md).
    gain_schedule : bool
        Schedule the inner gain on the operating point (needs an iteration time). Default
        True for "throughput", False for the paper's loops.
    identified_span_s : (float, float), optional
        Sleep range the model was identified over (default ``sleep_bounds_s``).
    plausible_max_ms : float, optional
        Largest plausible reading (ms, at least twice ``slo_ms``: an overload up to there is
        real and acted on; ``inf`` to disable); larger ones are held as missing. Default 50x
        SLO.
    setpoint_margin : float, optional
        Aim this fraction under the SLO (in [0, 0.5)). Default 0.03 in p99 mode with the
        throughput loop (a period's p99 is a noisy statistic: aiming at the SLO itself puts
        several % of periods over 1.05 SLO), else 0.
    run_quantum_s : float, optional
        Run time between two pauses when the sleep is applied by a duty-cycling actuator
        (SIGSTOP/SIGCONT, cgroup freezer) rather than once per iteration: the training's duty
        is then ``q / (q + s)`` whatever its iteration time, so the gain schedule and the
        throughput loop's duty model use ``q`` (the iteration time still sets the training
        rate). None (default): the sleep is taken once per iteration (the hook).
    mps_levels_pct : sequence of float, optional
        The only shares the spatial knob takes (the green-context partitions a training
        created): the throughput loop moves between them (see
        :class:`gpucontrol.outer.ThroughputOuter`'s ``levels_pct``). None: any share.

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
    #: Periods held after an MPS change unless told otherwise (0 for a restart-free knob).
    HOLD_PERIODS_AFTER_MPS = 2
    #: Iteration time assumed by the throughput loop until one is measured or given (s).
    DEFAULT_ITERATION_S = 0.5

    def __init__(self, model: LinearLatencyModel | LatencyModelFamily, slo_ms: float, *,
                 inner_period_s: float = 4.0, outer_every: int = 25, mps_threshold: float = 0.02,
                 sleep_bounds_s: tuple[float, float] = (0.0, 1.0),
                 mps_bounds_pct: tuple[float, float] = (1.0, 100.0), mode: str = "mean",
                 outer: str = "throughput", adaptive: bool = False, design: Design | None = None,
                 detune: float | None = None, initial_sleep_s: float | None = None,
                 initial_mps_pct: float | None = None, mps_gain_ms_per_pct: float | None = None,
                 sleep_target_s: float | None = None, hold_periods_after_mps: int | None = None,
                 adaptive_ratio_bounds: tuple[float, float] = (0.1, 10.0),
                 forgetting: float = 0.85, measurement_delay_periods: int = 0,
                 restart_s: float | None = None, iteration_time_s: float | None = None,
                 gain_schedule: bool | None = None,
                 identified_span_s: tuple[float, float] | None = None,
                 plausible_max_ms: float | None = None,
                 setpoint_margin: float | None = None,
                 run_quantum_s: float | None = None,
                 mps_levels_pct: Sequence[float] | None = None) -> None:
        self.slo_ms = positive("slo_ms", slo_ms)
        self.inner_period_s = in_range("inner_period_s", inner_period_s, 0.01, 3600.0)
        self.outer_every = int_at_least("outer_every", outer_every, 1)
        self.mps_threshold = in_range("mps_threshold", mps_threshold, 0.0, 1.0, hi_open=True)
        self.sleep_bounds_s = bounds("sleep_bounds_s", sleep_bounds_s, 0.0, 3600.0)
        self.mps_bounds_pct = bounds("mps_bounds_pct", mps_bounds_pct, 1.0, 100.0)
        self.mode = choice("mode", mode, self.MODES)
        self.outer_strategy = choice("outer", outer, OUTER_STRATEGIES)
        modern = self.outer_strategy == "throughput"
        self.adaptive = flag("adaptive", adaptive)
        self.measurement_delay_periods = int_at_least(
            "measurement_delay_periods", measurement_delay_periods, 0)
        self.restart_s = (15.0 if modern else None) if restart_s is None else in_range(
            "restart_s", restart_s, 0.0, 3600.0)
        # a duration the caller knows (measured) has no slack; the assumed 15 s has some
        self._restart_known = restart_s is not None
        if hold_periods_after_mps is None:
            hold_periods_after_mps = 0 if self.restart_s == 0.0 else \
                self.HOLD_PERIODS_AFTER_MPS
        self._hold_fixed = int_at_least("hold_periods_after_mps", hold_periods_after_mps, 0)
        self.iteration_s = math.nan if iteration_time_s is None else positive(
            "iteration_time_s", iteration_time_s)
        self._iteration_ref = self.iteration_s  # at the model's MPS level (the identified one)
        self._iteration_readings: deque[float] = deque(maxlen=5)
        self._iteration_level = math.nan
        self.run_quantum_s = None if run_quantum_s is None else in_range(
            "run_quantum_s", run_quantum_s, 1e-3, 3600.0)
        self.gain_schedule = modern if gain_schedule is None else flag("gain_schedule",
                                                                        gain_schedule)
        self.identified_span_s = self.sleep_bounds_s if identified_span_s is None else bounds(
            "identified_span_s", identified_span_s, 0.0, 3600.0)
        self.plausible_max_ms = 50.0 * self.slo_ms if plausible_max_ms is None else (
            math.inf if plausible_max_ms == math.inf else in_range(  # a real overload is
                "plausible_max_ms", plausible_max_ms, 2.0 * self.slo_ms, math.inf))  # acted on
        if detune is not None and design is not None:
            raise ConfigurationError("give detune or design, not both: a design carries its "
                                     "own gains (design_p(model, detune=...))")
        if detune is None:
            detune = 0.5 if modern or self.measurement_delay_periods else 1.0
        if setpoint_margin is None:
            setpoint_margin = 0.03 if modern and self.mode == "p99" else 0.0
        self.setpoint_margin = in_range("setpoint_margin", setpoint_margin, 0.0, 0.5,
                                        hi_open=True)
        target_ms = self.slo_ms * (1.0 - self.setpoint_margin)
        mps0 = self.mps_bounds_pct[1] if initial_mps_pct is None else in_range(
            "initial_mps_pct", initial_mps_pct, *self.mps_bounds_pct)

        if isinstance(model, LatencyModelFamily):
            if len(model.batches) > 1:  # it would schedule on one batch's rows, unsaid
                raise ConfigurationError(
                    "model: the family has rows for inference batches "
                    f"{', '.join('none given' if b is None else str(b) for b in model.batches)}"
                    "; the controller runs at one batch size: keep that batch's rows")
            self.family: LatencyModelFamily | None = model
            nominal = model.at(mps0)
        elif isinstance(model, LinearLatencyModel):
            self.family, nominal = None, model
        else:
            raise ConfigurationError("model must be a LinearLatencyModel or a LatencyModelFamily, "
                             f"got {type(model).__name__}")
        self.model = nominal
        self.design = design if design is not None else design_p(
            nominal, detune, self.inner_period_s)
        if not isinstance(self.design, Design):
            raise ConfigurationError("design must be a gpucontrol Design (design_p / design_pi)")
        self._kp_scale = self.design.kp * self.design.model.gain  # detune, in gain units
        self._ki_scale = self.design.ki * self.design.model.gain  # a PI's, likewise

        self.inner_settling_periods = self.design.settling_periods(
            delay_periods=self.measurement_delay_periods)
        restart_free = modern and self.restart_s == 0.0
        if not self.inner_settling_periods < self.outer_every and not restart_free:
            raise ConfigurationError(
                f"the inner loop settles in {self.inner_settling_periods:g} periods, not within "
                f"one outer period (outer_every={self.outer_every}); raise outer_every above "
                f"{self.inner_settling_periods:g} or use a faster design (detune closer to 1)")
        self.decoupled = True

        # checked whether or not adaptive: a bad value is an error, not a dormant one
        checked = GainEstimator(nominal.gain, forgetting, adaptive_ratio_bounds,
                                min_effect_ms=0.01 * self.slo_ms)
        estimator = checked if self.adaptive else None
        self.inner = InnerSleepController(
            self.design.kp, target_ms, self.sleep_bounds_s, ki=self.design.ki,
            initial_sleep_s=initial_sleep_s, estimator=estimator,
            detune=self._kp_scale if 0 < self._kp_scale < 2 else 1.0,
            delay_periods=self.measurement_delay_periods,
            schedule=self._slope_ratio if self.gain_schedule else None,
            oscillation_guard=modern)
        lo, hi = self.sleep_bounds_s
        target = lo + 0.05 * (hi - lo) if sleep_target_s is None else in_range(
            "sleep_target_s", sleep_target_s, lo, hi)
        mps_gain = mps_gain_ms_per_pct
        if mps_gain is None and self.family is not None:
            g = self.family.mps_gain(mps0)
            mps_gain = g if math.isfinite(g) and g > 0 else None
        self.outer: OuterMPSOptimizer | ThroughputOuter
        if modern:
            self.outer = ThroughputOuter(
                target_ms, every=self.outer_every, mps_bounds_pct=self.mps_bounds_pct,
                initial_mps_pct=mps0, mps_gain_ms_per_pct=mps_gain,
                restart_s=self.restart_s or 0.0, period_s=self.inner_period_s,
                sleep_bounds_s=self.sleep_bounds_s,
                # a p99 tail need not follow the sleep: keep the margin on upward moves there
                aim_from_low=self.mode == "mean", feedforward=self.mode == "mean",
                levels_pct=mps_levels_pct,
                duty_time_s=self.run_quantum_s, explore=mps_gain is None)
        else:
            self.outer = OuterMPSOptimizer(
                self.outer_strategy, self.slo_ms, every=self.outer_every,
                threshold=self.mps_threshold, mps_bounds_pct=self.mps_bounds_pct,
                initial_mps_pct=mps0, mps_gain_ms_per_pct=mps_gain, sleep_target_s=target)
        self._hold_left = 0
        self.period = 0
        self._mps_model = mps0

    # ------------------------------------------------------------------------------------------
    @property
    def hold_periods_after_mps(self) -> int:
        """Periods the inner loop holds after an MPS change: ``hold_periods_after_mps``, and at
        least the restart's duration ``ceil(restart_s / inner_period_s)``. When that duration
        was given or measured (not the assumed 15 s) one more period, or the known measurement
        delay: a reading one period late would show a period the training was still down for
        (on a plant with an undisclosed one-period delay, told its real 10 s restart, the
        outer loop learnt a slope 20x too steep and moved MPS 5-6 times per 10 evaluations
        at steady load)."""
        if self.restart_s is None or self.restart_s == 0.0:
            return self._hold_fixed
        extra = max(1, self.measurement_delay_periods) if self._restart_known else \
            self.measurement_delay_periods
        return max(self._hold_fixed,
                   math.ceil(self.restart_s / self.inner_period_s - 1e-9) + extra)

    def set_restart_duration(self, restart_s: float) -> None:
        """Tell the controller how long a training restart really takes (s, >= 0); the
        actuator measures it. Sets the hold after an MPS change and the throughput loop's
        restart cost."""
        self.restart_s = in_range("restart_s", restart_s, 0.0, 3600.0)
        self._restart_known = True
        if isinstance(self.outer, ThroughputOuter):
            self.outer.restart_s = self.restart_s

    @property
    def sleep_s(self) -> float:
        return self.inner.sleep_s

    @property
    def mps_pct(self) -> float:
        return self.outer.mps_pct

    def initial_actuation(self) -> Actuation:
        """The actuation to apply before the first measurement."""
        return Actuation(self.inner.sleep_s, self.outer.mps_pct, False, False, "initial")

    def _iteration(self) -> float:
        t = self.iteration_s
        return t if math.isfinite(t) and t > 0 else self.DEFAULT_ITERATION_S

    def _slope_ratio(self, sleep_s: float) -> float:
        """Local slope at ``sleep_s`` over the identified (secant) slope, for a latency linear
        in the duty ``t / (t + s)``: ``t (t0 + a)(t0 + b) / (t0 (t + s)**2)`` with ``t`` the
        current and ``t0`` the identification's iteration time (both the run quantum ``q`` for
        a duty-cycling actuator: ``(q + a)(q + b) / (q + s)**2``); 1 while none is known."""
        a, b = self.identified_span_s
        # beyond the identified span the slope is held at its edge's: extrapolating the
        # curvature there would raise the gain on a plant nobody measured (a CPU plant is
        # flatter past one run quantum than the duty law says); below it the law only lowers
        # the gain, the safe direction
        s = min(max(sleep_s, 0.0), b)
        times = self._duty_times()
        if times is None:
            return 1.0
        t, t0 = times
        r = t * (t0 + a) * (t0 + b) / (t0 * (t + s) ** 2)
        return min(max(r, 0.05), 20.0)

    def _duty_times(self) -> tuple[float, float] | None:
        """The duty's time constant now and at identification (``t`` and ``t0``): the run
        quantum of a duty cycler (both), else the iteration times; None while none is known."""
        if self.run_quantum_s is not None:
            return self.run_quantum_s, self.run_quantum_s
        t = self.iteration_s
        if not (math.isfinite(t) and t > 0):
            return None
        return t, (self._iteration_ref if math.isfinite(self._iteration_ref) else t)

    def _duty_gain(self) -> float:
        """Latency per unit duty (ms, > 0) of the identified curve, ``-gain (t0 + a)(t0 + b) /
        t0`` (``t0``: the iteration time at the identified MPS level)."""
        times = self._duty_times()
        t0 = times[1] if times is not None else self._iteration()
        a, b = self.identified_span_s
        return -self._gain() * (t0 + a) * (t0 + b) / t0

    def _gain(self) -> float:
        if self.inner.estimator is not None:
            return self.inner.estimator.gain
        return self.model.gain

    def _schedule(self, mps_pct: float) -> None:
        """Re-point the inner loop at the model of the new MPS level (gain scheduling)."""
        if self.family is None:
            return
        self.model = self.family.at(mps_pct)
        self.inner.kp = self._kp_scale / self.model.gain  # the design's poles at the new
        self.inner.ki = self._ki_scale / self.model.gain  # level's gain, for P and PI alike
        if self.inner.estimator is not None:
            self.inner.estimator.reset(self.model.gain)
        g = self.family.mps_gain(mps_pct)
        if math.isfinite(g) and g > 0 and not isinstance(self.outer, ThroughputOuter):
            self.outer.mps_gain = g

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
        if math.isfinite(m.iteration_s) and m.iteration_s > 0 and not m.restarting:
            # a node's reading averages a few iterations of jittered length: the median of
            # the last readings at this share, not the last one, schedules the gain
            if self.mps_pct != self._iteration_level:
                self._iteration_readings.clear()
                self._iteration_level = self.mps_pct
            self._iteration_readings.append(m.iteration_s)
            self.iteration_s = statistics.median(self._iteration_readings)
            if not math.isfinite(self._iteration_ref) and self.mps_pct == self._mps_model:
                self._iteration_ref = self.iteration_s
        value = m.mean_ms if self.mode == "mean" else m.p99_ms
        gain_est = self.inner.estimator.gain if self.inner.estimator is not None else math.nan
        if m.count <= 0 or not usable(value, self.plausible_max_ms):
            why = "hold: no requests this period" if m.count <= 0 else (
                "hold: implausible latency (glitch)" if usable(value) else
                "hold: unusable latency")
            r = self.inner.hold(why)
            return Actuation(r.sleep_s, self.outer.mps_pct, False, False, r.reason,
                             math.nan, gain_est)
        if m.restarting or self._hold_left > 0:
            self._hold_left = max(0, self._hold_left - 1)
            r = self.inner.hold("hold: training restarting after MPS change")
            return Actuation(r.sleep_s, self.outer.mps_pct, False, False, r.reason,
                             self.slo_ms - value, gain_est)
        r = self.inner.update(value)
        if isinstance(self.outer, ThroughputOuter):
            # only times read from measurements teach beta and the gain calibration: a time
            # given in advance (``iteration_time_s``) is the same at every share and would read
            # as beta = 0, which stops every upward move
            self.outer.iteration_measured = self._iteration_level == self.mps_pct
            new_mps, why = self.outer.update(value, r.sleep_s, r.saturated, self._duty_gain(),
                                             self._iteration())
        else:
            new_mps, why = self.outer.update(value, r.sleep_s, r.saturated, self._gain())
        if new_mps is None:
            reason = r.reason + (f"; {why}" if why else "")
            return Actuation(r.sleep_s, self.outer.mps_pct, False, r.saturated is not None,
                             reason, r.error_ms, gain_est)
        if isinstance(self.outer, OuterMPSOptimizer) and self.outer_strategy == "mid-range":
            self.inner.set_sleep(self.outer.sleep_target_s)  # feedforward: MPS takes the load
        if isinstance(self.outer, ThroughputOuter):
            s1 = self.outer.feedforward_sleep(self._iteration(), self._duty_gain())
            if s1 is not None:
                self.inner.set_sleep(s1)
        self._schedule(new_mps)
        self._hold_left = self.hold_periods_after_mps
        return Actuation(self.inner.sleep_s, new_mps, True, r.saturated is not None,
                         f"{r.reason}; {why}", r.error_ms, gain_est)
