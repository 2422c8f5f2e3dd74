"""Runtime controllers: the inner sleep loop, the paper's outer MPS loop, adaptive gain.

These are the per-period state machines that :class:`gpucontrol.TwoTierController` composes.
They are pure Python with no numpy in the hot path, so one update costs microseconds.

Odd measurements (NaN, inf, negative, a period with no requests) never raise and never move
an actuator: the controller holds its last output and says why. What a measurement is, and
how a reading becomes one, is :mod:`gpucontrol.measurement` (re-exported here).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from gpucontrol._validate import bounds, finite, flag, in_range, positive
from gpucontrol.design import check_delay_periods
from gpucontrol.errors import ConfigurationError

# Measurements live in gpucontrol.measurement; they stay importable from here, where the
# controllers that read them have always been.
from gpucontrol.measurement import (  # noqa: F401
    MEASUREMENT_KEYS,
    Measurement,
    as_measurement,
    check_measurement,
    measurement_from_mapping,
    usable,
)


class GainEstimator:
    """Scalar recursive least squares for the incremental gain ``m`` in ``dl = m * u``.

    Uses pairs (applied increment ``u(k-1)``, latency change ``l(k) - l(k-1)``) with
    exponential forgetting, and keeps the stability guarantee by confining the estimate to
    ``[ratio_bounds[0], ratio_bounds[1]] * nominal_gain`` (in particular it keeps the
    nominal's negative sign). With ``kp = detune / estimate`` the loop is stable whenever the
    real gain is within ``(0, 2 / detune)`` times the estimate.

    Closed-loop bias and the dead zone: in closed loop ``u(k-1) = kp (SLO - l(k-1))`` carries
    the measurement noise ``n(k-1)``, which also enters ``dl`` with the opposite sign, so plain
    least squares overestimates ``|m|`` by about ``|kp| var(n) / var(u)`` — at steady state,
    where ``u`` is noise-driven, the estimate drifts to about twice the true gain and the loop
    detunes itself. The estimator therefore adapts only on informative increments, those with
    ``|estimate * u| >= max(min_effect_ms, noise_kappa * sigma)``, where ``sigma`` is a running
    estimate of the latency noise taken from the residuals of the pairs it does not use.

    Parameters
    ----------
    nominal_gain : float
        The model's gain (ms per s of sleep), non-zero; the estimate starts there.
    forgetting : float
        Exponential forgetting factor, in [0.5, 1].
    ratio_bounds : (float, float)
        Bounds of the estimate as ratios of ``nominal_gain``, within [1e-3, 1e3].
    min_effect_ms : float
        Smallest predicted latency effect learnt from (ms, >= 0).
    initial_variance : float
        Starting (and largest) covariance of the estimate, > 0.
    noise_kappa : float
        Dead-zone width in latency-noise standard deviations, in [0, 100].
    huber_k : float
        Huber threshold in noise standard deviations (> 0): a pair's residual beyond
        ``max(huber_k * sqrt(2) * sigma, 4 |estimate * u|)`` is clipped there, so one wild
        reading moves neither the estimate nor the noise variance by more than a bounded step.

    Notes
    -----
    Under a measurement delay of ``d`` periods the caller pairs each latency change with the
    increment applied ``d`` periods earlier (:class:`InnerSleepController` does).
    """

    def __init__(self, nominal_gain: float, forgetting: float = 0.85,
                 ratio_bounds: tuple[float, float] = (0.1, 10.0), min_effect_ms: float = 0.5,
                 initial_variance: float = 10.0, noise_kappa: float = 3.0,
                 huber_k: float = 3.0) -> None:
        self.nominal_gain = finite("nominal_gain", nominal_gain)
        if self.nominal_gain == 0:
            raise ConfigurationError("nominal_gain must be non-zero")
        self.forgetting = in_range("forgetting", forgetting, 0.5, 1.0)
        self.ratio_bounds = bounds("ratio_bounds", ratio_bounds, 1e-3, 1e3)
        self.min_effect_ms = in_range("min_effect_ms", min_effect_ms, 0.0, math.inf)
        self.noise_kappa = in_range("noise_kappa", noise_kappa, 0.0, 100.0)
        self.huber_k = positive("huber_k", huber_k)
        self._p0 = positive("initial_variance", initial_variance)
        self.reset(self.nominal_gain)

    def reset(self, gain: float | None = None) -> None:
        if gain is not None:
            self.nominal_gain = float(gain)
        self.theta = self.nominal_gain
        self.p = self._p0  # covariance of theta per unit data: units of 1/u**2
        self.noise_var = (self.min_effect_ms / max(self.noise_kappa, 1.0)) ** 2
        self.updates = 0

    @property
    def gain(self) -> float:
        return self.theta

    @property
    def ratio(self) -> float:
        return self.theta / self.nominal_gain

    @property
    def threshold_ms(self) -> float:
        """Smallest predicted latency effect ``|estimate * u|`` that the estimator learns from."""
        return max(self.min_effect_ms, self.noise_kappa * math.sqrt(self.noise_var))

    def update(self, u: float, dl: float) -> bool:
        """Use one (u, dl) pair; returns whether it was used."""
        if not (math.isfinite(u) and math.isfinite(dl)):
            return False
        # Huber: a residual is clipped at huber_k noise deviations of dl (variance 2 sigma^2)
        # or at 4x the predicted effect, whichever is wider, so a wrong model still learns
        # in a few steps while a wild pair moves things by a bounded step
        clip = max(self.huber_k * math.sqrt(2.0 * self.noise_var), 4.0 * abs(self.theta * u))
        r = dl - self.theta * u
        r = min(max(r, -clip), clip)  # Huber: a wild pair moves things by a bounded step
        if abs(self.theta * u) < self.threshold_ms:
            # a quiet pair: its residual is mostly noise (n(k) - n(k-1))
            self.noise_var = 0.95 * self.noise_var + 0.05 * r * r / 2.0
            return False
        k = self.p * u / (self.forgetting + u * self.p * u)
        theta = self.theta + k * r
        if not math.isfinite(theta):  # absurd data (e.g. latencies near float max): ignore
            return False
        self.p = (self.p - k * u * self.p) / self.forgetting
        self.p = min(self.p, self._p0)  # bounded so forgetting cannot blow it up
        lo, hi = sorted((self.ratio_bounds[0] * self.nominal_gain,
                         self.ratio_bounds[1] * self.nominal_gain))
        self.theta = min(max(theta, lo), hi)
        self.updates += 1
        return True


@dataclass(slots=True)    # (not frozen: built every period, a frozen field costs a call)
class InnerResult:
    sleep_s: float
    saturated: str | None  # "low", "high" or None
    error_ms: float
    held: bool
    reason: str


class InnerSleepController:
    """Velocity-form sleep controller ``s(k+1) = clamp(s(k) + kp e(k) + ki I(k))``.

    ``e = slo - l``. The sleep is clamped to ``sleep_bounds_s`` and, because the state *is* the
    clamped sleep, nothing winds up past a bound; the integral term of a PI (``ki != 0``) is
    frozen only while the output is pinned at a bound *and* the error pushes it further out
    (conditional integration): an error pulling it back in is integrated at once.
    With an :class:`GainEstimator` the gain is re-read every period (``kp = detune / gain``).
    With a ``schedule`` the gain is also multiplied by ``schedule(sleep)``, the ratio of the
    local slope at the current sleep to the model's (gain scheduling on the operating point).

    Parameters
    ----------
    kp : float
        Proportional gain (s of sleep per ms of error).
    slo_ms : float
        Latency set point (ms), > 0.
    sleep_bounds_s : (float, float)
        Sleep limits within [0, 3600] s.
    ki : float
        Integral gain (0: P).
    initial_sleep_s : float, optional
        Starting sleep (default: the lower bound).
    estimator : GainEstimator, optional
        Adaptive gain estimate; when given, ``kp`` is ``detune / estimator.gain``.
    detune : float
        ``kp * gain`` used with an estimator, in (0, 2).
    delay_periods : int
        Measurement delay (whole periods, in [0, 100]): the estimator pairs each latency
        change with the increment applied that many periods earlier.
    schedule : callable, optional
        ``sleep_s -> local slope / model slope`` (> 0); None: 1.
    oscillation_guard : bool
        Halve the gain (down to 1/8) when errors above 2 % of the set point change sign 3
        times within 8 periods with a mean |error| above 3.5 % — the signature of a loop
        ringing past its stable gain (an underestimated slope, an unknown delay); recover by
        1.25x after 20 calm periods (errors within 2 %, or the sleep pinned at a bound, where
        the loop cannot be ringing). The 3.5 % keeps a plant's own period-to-period
        alternation (a training iteration aliasing against the period, about 3 % amplified
        by the loop) from reading as ringing. :meth:`new_operating_point` restarts the window
        and sets the backoff when the plant changes under the loop.
    """

    def __init__(self, kp: float, slo_ms: float, sleep_bounds_s: tuple[float, float] = (0.0, 1.0),
                 *, ki: float = 0.0, initial_sleep_s: float | None = None,
                 estimator: GainEstimator | None = None, detune: float = 1.0,
                 delay_periods: int = 0, schedule: Any = None,
                 oscillation_guard: bool = False) -> None:
        self.kp = finite("kp", kp)
        self.ki = finite("ki", ki)
        self.slo_ms = positive("slo_ms", slo_ms)
        self.lo, self.hi = bounds("sleep_bounds_s", sleep_bounds_s, 0.0, 3600.0)
        s0 = self.lo if initial_sleep_s is None else in_range(
            "initial_sleep_s", initial_sleep_s, self.lo, self.hi)
        self.estimator = estimator
        self.detune = in_range("detune", detune, 0.0, 2.0, lo_open=True, hi_open=True)
        self.delay_periods = check_delay_periods("delay_periods", delay_periods)
        self.schedule = schedule
        self.oscillation_guard = flag("oscillation_guard", oscillation_guard)
        self._crossings: deque[bool] = deque(maxlen=8)
        self._errs: deque[float] = deque(maxlen=8)
        self._last_l: float | None = None
        self._us: deque[float] = deque(maxlen=self.delay_periods + 1)
        self.start_afresh(s0)

    def start_afresh(self, sleep_s: float) -> None:
        """Start over at ``sleep_s`` as if just built: the integral, the guard's backoff and
        window, the last readings and the gain estimate go; the gains and settings stay."""
        self.set_sleep(sleep_s)
        self.integral = 0.0
        self.backoff = 1.0
        self._crossings.clear()
        self._errs.clear()
        self._calm = 0
        self._last_sign = 0.0
        if self.estimator is not None:
            self.estimator.reset()

    def gain_scale(self, sleep_s: float | None = None) -> float:
        """The schedule's local-slope ratio at ``sleep_s`` (default: the current sleep)."""
        if self.schedule is None:
            return 1.0
        r = float(self.schedule(self.sleep_s if sleep_s is None else sleep_s))
        return r if math.isfinite(r) and r > 0 else 1.0

    def effective_kp(self) -> float:
        scale = self.gain_scale() / self.backoff
        if self.estimator is not None:
            return self.detune / (self.estimator.gain * scale)
        return self.kp / scale

    def _guard(self, u: float, e: float) -> None:
        """Count sign changes of large errors (> 2 % of the set point) over the last 8
        periods; 3 or more with a mean |error| above 3.5 % mean the loop rings past its stable
        gain (measurement noise alone crosses too, but with small errors)."""
        big = abs(e) > 0.02 * self.slo_ms
        sign = math.copysign(1.0, e) if big else 0.0
        crossing = bool(sign and self._last_sign and sign != self._last_sign)
        if sign:
            self._last_sign = sign
        self._crossings.append(crossing)
        self._errs.append(abs(e))
        # a period pinned at a bound is not ringing either: the gain comes back there too
        pinned = self.sleep_s <= self.lo or self.sleep_s >= self.hi
        self._calm = 0 if big and not pinned else self._calm + 1
        if sum(self._crossings) >= 3 and sum(self._errs) / len(self._errs) > 0.035 * self.slo_ms:
            self.backoff = max(self.backoff * 0.5, 0.125)
            self._crossings.clear()
        elif self._calm >= 20 and self.backoff < 1.0:
            self.backoff = min(self.backoff * 1.25, 1.0)
            self._calm = 0

    def new_operating_point(self, backoff: float = 1.0) -> float:
        """The plant changed under the loop (a share change): the guard's window restarts (the
        errors of another operating point, and the step of the change, say nothing of ringing
        at this one) and its backoff becomes ``backoff``, what it learnt at this operating
        point before. Returns the backoff it leaves (what it learnt where it was)."""
        left = self.backoff
        self._crossings.clear()
        self._errs.clear()
        self._last_sign = 0.0
        self.backoff = min(max(float(backoff), 0.125), 1.0)
        return left

    def set_sleep(self, sleep_s: float) -> None:
        """Move the state (bumpless transfer, e.g. after an MPS feedforward)."""
        self.sleep_s = min(max(float(sleep_s), self.lo), self.hi)
        self._last_l = None
        self._us.clear()

    def hold(self, reason: str) -> InnerResult:
        self._last_l = None
        self._us.clear()
        return InnerResult(self.sleep_s, None, math.nan, True, reason)

    def update(self, latency_ms: float) -> InnerResult:
        l = float(latency_ms) if isinstance(latency_ms, (int, float)) else math.nan
        if not usable(l):
            return self.hold("hold: no usable latency this period")
        if (self.estimator is not None and self._last_l is not None
                and len(self._us) == self._us.maxlen):
            # the change l(k) - l(k-1) answers the increment applied delay_periods earlier;
            # normalised by the schedule, the estimator learns the model-frame gain
            self.estimator.update(self._us[0] * self.gain_scale(self.sleep_s - sum(self._us)),
                                  l - self._last_l)
        e = self.slo_ms - l
        kp = self.effective_kp()
        integral = self.integral + e if self.ki != 0.0 else 0.0
        raw = self.sleep_s + kp * e + self.ki * integral
        if math.isnan(raw) or not math.isfinite(integral):
            return self.hold("hold: latency too large to act on")
        sat = None
        if raw > self.hi:
            new, sat = self.hi, "high"
        elif raw < self.lo:
            new, sat = self.lo, "low"
        else:
            new = raw
        # anti-windup: freeze the integral only when pinned and the error pushes outward
        outward = (sat == "high" and self.ki * e > 0) or (sat == "low" and self.ki * e < 0)
        if not outward:
            self.integral = integral
        u = new - self.sleep_s
        if self.oscillation_guard:
            self._guard(u, e)
        self._us.append(u)
        self._last_l = l
        self.sleep_s = new
        reason = "inner" if sat is None else f"inner: sleep saturated {sat}"
        return InnerResult(new, sat, e, False, reason)


class OuterMPSOptimizer:
    """The GPUColo paper's outer loop and its mid-ranging variant: moves the training share
    every ``every`` inner periods.

    It acts only when ``|drive| / slo > threshold`` or the inner loop is saturated, where the
    drive is the latency error for ``"paper"`` and the error plus the sleep's distance from its
    target (in ms of latency) for ``"mid-range"``.
    Strategies:

    * ``"paper"`` (the GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-C):
      ``d_mps = (slo - l) / mps_gain``.
    * ``"mid-range"``: ``d_mps = (slo - l + sleep_gain (s - s_target)) / mps_gain`` — move MPS so
      the inner loop's sleep returns to ``s_target``, keeping sleep headroom for bursts and
      letting training use the more efficient spatial share instead of sleeping; on a move the
      sleep is set to ``s_target`` (feedforward: the share takes over the load the sleep was
      carrying).
    * ``"none"``: the share stays where it starts (sleep only).

    ``mps_gain`` is the latency sensitivity to the training MPS percentage (ms per point).
    Built with its own settings; :class:`~gpucontrol.TwoTierController` binds it to the set
    point, the knobs and the model (:meth:`bind`).

    Parameters
    ----------
    strategy : {"paper", "mid-range", "none"}
        The outer strategy.
    every : int
        Inner periods per outer period (>= 1).
    threshold : float
        Relative drive in [0, 1) below which the loop does not act.
    mps_gain_ms_per_pct : float, optional
        Latency sensitivity to the MPS percentage (default: the model family's slope at the
        starting share, else ``slo_ms / 100``).
    sleep_target_s : float, optional
        The ``"mid-range"`` sleep target (s; default 5 % into the sleep range).
    saturated_step_pct : float
        MPS step taken when the inner loop is saturated (points, in [0, 100]).
    """

    STRATEGIES = ("paper", "mid-range", "none")

    def __init__(self, strategy: str = "paper", *, every: int = 25, threshold: float = 0.02,
                 mps_gain_ms_per_pct: float | None = None, sleep_target_s: float | None = None,
                 saturated_step_pct: float = 5.0) -> None:
        from gpucontrol._validate import choice, int_at_least

        self.strategy = choice("outer", strategy, self.STRATEGIES)
        self.every = int_at_least("outer_every", every, 1)
        self.threshold = in_range("mps_threshold", threshold, 0.0, 1.0, hi_open=True)
        self._gain_given = None if mps_gain_ms_per_pct is None else positive(
            "mps_gain_ms_per_pct", mps_gain_ms_per_pct)
        self._target_given = None if sleep_target_s is None else in_range(
            "sleep_target_s", sleep_target_s, 0.0, 3600.0)
        self.saturated_step_pct = in_range("saturated_step_pct", saturated_step_pct, 0.0, 100.0)
        self.count = 0
        self._moved = False
        self._bound = False

    def bind(self, slo_ms: float, share: Any, sleep: Any, period_s: float,
             family: Any) -> OuterMPSOptimizer:
        """Attach to a controller: its set point, share knob (bounds, start), sleep knob
        (the mid-range target's range), period and model family (the default slope)."""
        if self._bound:
            raise ConfigurationError("this outer loop object already serves a controller")
        self._bound = True
        self.slo_ms = positive("slo_ms", slo_ms)
        self.lo, self.hi = share.bounds_pct
        self.mps_pct = float(share.start_pct)
        g = family.mps_gain(self.mps_pct) if len(family.points) > 1 else math.nan
        self.mps_gain = self._gain_given if self._gain_given is not None else (
            g if math.isfinite(g) and g > 0 else self.slo_ms / 100.0)
        lo, hi = sleep.bounds_s
        self.sleep_target_s = lo + 0.05 * (hi - lo) if self._target_given is None else \
            in_range("sleep_target_s", self._target_given, lo, hi)
        return self

    def start_sleep(self) -> None:
        """The paper's loop starts its sleep at the bottom of the range (None: the default)."""
        return None

    @property
    def share_pct(self) -> float:
        """The share now (%)."""
        return self.mps_pct

    def move_sleep(self) -> float | None:
        """The sleep to set after a move: the mid-range target (once), else None."""
        moved, self._moved = self._moved, False
        return self.sleep_target_s if moved and self.strategy == "mid-range" else None

    def update(self, latency_ms: float, sleep_s: float, saturated: str | None,
               sleep_gain: float) -> tuple[float | None, str]:
        """Return (new MPS % or None when unchanged, reason)."""
        if self.strategy == "none":
            return None, ""
        self.count += 1
        if self.count < self.every:
            return None, ""
        self.count = 0
        if not usable(latency_ms):
            return None, "outer: hold, no usable latency"
        e = self.slo_ms - latency_ms
        rel = abs(e) / self.slo_ms
        if self.strategy == "paper":
            drive = e
        else:
            drive = e + sleep_gain * (sleep_s - self.sleep_target_s)
        if abs(drive) / self.slo_ms <= self.threshold and saturated is None:
            return None, "outer: within threshold"
        delta = drive / self.mps_gain
        # a move beyond the whole range saturates anyway; clamping first keeps a huge finite
        # latency (delta = +-inf) from overflowing round()
        delta = min(max(delta, self.lo - self.hi), self.hi - self.lo)
        if saturated == "high":
            delta = min(delta, -self.saturated_step_pct)
        elif saturated == "low" and e > 0:
            delta = max(delta, self.saturated_step_pct if rel > self.threshold else 0.0)
        new = min(max(round(self.mps_pct + delta), self.lo), self.hi)
        if new == self.mps_pct:
            return None, "outer: at MPS bound" if delta else "outer: no change"
        old, self.mps_pct = self.mps_pct, float(new)
        self._moved = True
        return self.mps_pct, f"outer {self.strategy}: MPS {old:g} -> {new:g}"
