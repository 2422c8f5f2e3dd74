"""The two-tier controller of the GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-C: sleep
inner loop, MPS outer loop.

Inner loop, every ``inner_period_s`` (4 s): P (or PI) on the sleep interval of the training
processes. Outer loop, every ``outer_every`` inner periods (25): moves the training MPS
percentage, only when the error exceeds ``mps_threshold`` of the SLO or the inner loop is
saturated. The loops are decoupled when the inner loop settles within one outer period; the
constructor checks this from the design and exposes it as ``inner_settling_periods``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpucontrol._validate import bounds, choice, in_range, int_at_least, positive
from gpucontrol.controllers import (
    GainEstimator,
    InnerSleepController,
    Measurement,
    OuterMPSOptimizer,
    as_measurement,
    usable,
)
from gpucontrol.design import Design, design_p
from gpucontrol.errors import ConfigurationError
from gpucontrol.models import LatencyModelFamily, LinearLatencyModel


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
        Inner control period T (s), > 0.
    outer_every : int
        Outer loop period in inner periods, >= 1.
    mps_threshold : float
        Relative error in [0, 1) below which the outer loop does not act.
    sleep_bounds_s, mps_bounds_pct : (low, high)
        Actuator limits; sleep within [0, 3600] s, MPS within [1, 100] %.
    mode : "mean" or "p99"
        Which statistic of the period is controlled.
    outer : "paper", "mid-range" or "none"
        Outer strategy ("none": sleep only).
    adaptive : bool
        Estimate the real gain online (bounded RLS, see :class:`GainEstimator`).
    design : Design, optional
        Inner design (default ``design_p(model, detune)``); its ``kp``/``ki`` are used.
    detune : float
        ``kp * gain`` of the default P design, in (0, 2); 1 is deadbeat.
    initial_sleep_s : float, optional
        Starting sleep (default: the lower sleep bound).
    initial_mps_pct : float, optional
        Starting MPS percentage (default: the upper MPS bound).
    mps_gain_ms_per_pct : float, optional
        Latency sensitivity to the MPS percentage for the outer loop (default: from the
        family, else ``slo_ms / 100``).
    sleep_target_s : float, optional
        The ``"mid-range"`` outer loop's sleep target (default: 5 % into the sleep range).
    hold_periods_after_mps : int
        Periods to hold the inner loop after an MPS change (>= 0).
    adaptive_ratio_bounds : (float, float)
        Bounds of the adaptive gain estimate as ratios of the nominal gain.
    forgetting : float
        Forgetting factor of the adaptive estimator, in [0.5, 1].

    Examples
    --------
    >>> from gpucontrol import LinearLatencyModel, TwoTierController
    >>> ctl = TwoTierController(LinearLatencyModel(-12.0, 95.0), slo_ms=90.0)
    >>> act = ctl.update(95.0)          # 5 ms too slow: sleep more
    >>> round(act.sleep_s, 4), act.mps_pct
    (0.4167, 100.0)
    """

    MODES = ("mean", "p99")

    def __init__(self, model: LinearLatencyModel | LatencyModelFamily, slo_ms: float, *,
                 inner_period_s: float = 4.0, outer_every: int = 25, mps_threshold: float = 0.02,
                 sleep_bounds_s: tuple[float, float] = (0.0, 1.0),
                 mps_bounds_pct: tuple[float, float] = (1.0, 100.0), mode: str = "mean",
                 outer: str = "paper", adaptive: bool = False, design: Design | None = None,
                 detune: float = 1.0, initial_sleep_s: float | None = None,
                 initial_mps_pct: float | None = None, mps_gain_ms_per_pct: float | None = None,
                 sleep_target_s: float | None = None, hold_periods_after_mps: int = 2,
                 adaptive_ratio_bounds: tuple[float, float] = (0.1, 10.0),
                 forgetting: float = 0.85) -> None:
        self.slo_ms = positive("slo_ms", slo_ms)
        self.inner_period_s = positive("inner_period_s", inner_period_s)
        self.outer_every = int_at_least("outer_every", outer_every, 1)
        self.mps_threshold = in_range("mps_threshold", mps_threshold, 0.0, 1.0, hi_open=True)
        self.sleep_bounds_s = bounds("sleep_bounds_s", sleep_bounds_s, 0.0, 3600.0)
        self.mps_bounds_pct = bounds("mps_bounds_pct", mps_bounds_pct, 1.0, 100.0)
        self.mode = choice("mode", mode, self.MODES)
        self.outer_strategy = choice("outer", outer, OuterMPSOptimizer.STRATEGIES)
        self.adaptive = bool(adaptive)
        self.hold_periods_after_mps = int_at_least("hold_periods_after_mps",
                                                   hold_periods_after_mps, 0)
        mps0 = self.mps_bounds_pct[1] if initial_mps_pct is None else in_range(
            "initial_mps_pct", initial_mps_pct, *self.mps_bounds_pct)

        if isinstance(model, LatencyModelFamily):
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

        self.inner_settling_periods = self.design.settling_periods()
        if not self.inner_settling_periods < self.outer_every:
            raise ConfigurationError(
                f"the inner loop settles in {self.inner_settling_periods:g} periods, not within "
                f"one outer period (outer_every={self.outer_every}); raise outer_every above "
                f"{self.inner_settling_periods:g} or use a faster design (detune closer to 1)")
        self.decoupled = True

        estimator = None
        if self.adaptive:
            estimator = GainEstimator(nominal.gain, forgetting, adaptive_ratio_bounds,
                                      min_effect_ms=0.01 * self.slo_ms)
        self.inner = InnerSleepController(
            self.design.kp, self.slo_ms, self.sleep_bounds_s, ki=self.design.ki,
            initial_sleep_s=initial_sleep_s, estimator=estimator,
            detune=self._kp_scale if 0 < self._kp_scale < 2 else 1.0)
        lo, hi = self.sleep_bounds_s
        target = lo + 0.05 * (hi - lo) if sleep_target_s is None else in_range(
            "sleep_target_s", sleep_target_s, lo, hi)
        mps_gain = mps_gain_ms_per_pct
        if mps_gain is None and self.family is not None:
            g = self.family.mps_gain(mps0)
            mps_gain = g if math.isfinite(g) and g > 0 else None
        self.outer = OuterMPSOptimizer(
            self.outer_strategy, self.slo_ms, every=self.outer_every, threshold=self.mps_threshold,
            mps_bounds_pct=self.mps_bounds_pct, initial_mps_pct=mps0,
            mps_gain_ms_per_pct=mps_gain, sleep_target_s=target)
        self._hold_left = 0
        self.period = 0

    # ------------------------------------------------------------------------------------------
    @property
    def sleep_s(self) -> float:
        return self.inner.sleep_s

    @property
    def mps_pct(self) -> float:
        return self.outer.mps_pct

    def initial_actuation(self) -> Actuation:
        """The actuation to apply before the first measurement."""
        return Actuation(self.inner.sleep_s, self.outer.mps_pct, False, False, "initial")

    def _gain(self) -> float:
        if self.inner.estimator is not None:
            return self.inner.estimator.gain
        return self.model.gain

    def _schedule(self, mps_pct: float) -> None:
        """Re-point the inner loop at the model of the new MPS level (gain scheduling)."""
        if self.family is None:
            return
        self.model = self.family.at(mps_pct)
        self.inner.kp = self._kp_scale / self.model.gain
        if self.inner.estimator is not None:
            self.inner.estimator.reset(self.model.gain)
        g = self.family.mps_gain(mps_pct)
        if math.isfinite(g) and g > 0:
            self.outer.mps_gain = g

    def update(self, measurement: Any) -> Actuation:
        """Take one period's measurement (float ms or Measurement-like); return the actuation."""
        self.period += 1
        m: Measurement = as_measurement(measurement)
        value = m.mean_ms if self.mode == "mean" else m.p99_ms
        gain_est = self.inner.estimator.gain if self.inner.estimator is not None else math.nan
        if m.count <= 0 or not usable(value):
            r = self.inner.hold("hold: no requests this period" if m.count <= 0
                                else "hold: unusable latency")
            return Actuation(r.sleep_s, self.outer.mps_pct, False, False, r.reason,
                             math.nan, gain_est)
        if m.restarting or self._hold_left > 0:
            self._hold_left = max(0, self._hold_left - 1)
            r = self.inner.hold("hold: training restarting after MPS change")
            return Actuation(r.sleep_s, self.outer.mps_pct, False, False, r.reason,
                             self.slo_ms - value, gain_est)
        r = self.inner.update(value)
        new_mps, why = self.outer.update(value, r.sleep_s, r.saturated, self._gain())
        if new_mps is None:
            reason = r.reason + (f"; {why}" if why else "")
            return Actuation(r.sleep_s, self.outer.mps_pct, False, r.saturated is not None,
                             reason, r.error_ms, gain_est)
        if self.outer_strategy == "mid-range":
            self.inner.set_sleep(self.outer.sleep_target_s)  # feedforward: MPS takes the load
        self._schedule(new_mps)
        self._hold_left = self.hold_periods_after_mps
        return Actuation(self.inner.sleep_s, new_mps, True, r.saturated is not None,
                         f"{r.reason}; {why}", r.error_ms, gain_est)
