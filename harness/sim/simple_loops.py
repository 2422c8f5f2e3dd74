"""The simple loops the experiments compare against: the MPS-only and GSLICE-extended baselines
of the GPUColo paper (Chen et al., ICDCS 2024), Sec. VI, and the integral controller a
practitioner would write (re-exported by :mod:`harness.sim.baselines`)."""

from __future__ import annotations

import math
from typing import Any

from gpucontrol import Actuation
from gpucontrol.knobs import ShareKnob
from gpucontrol.measurement import as_measurement, usable
from harness.sim.protocol import PlantActuation

__all__ = ["GSliceExtended", "IntegralController", "MPSOnly"]


class _Windowed:
    """Shared bookkeeping: a slow controller that acts every ``every`` periods on the
    count-weighted mean latency of the usable periods in its window."""

    def __init__(self, slo_ms: float, every: int) -> None:
        if not (math.isfinite(slo_ms) and slo_ms > 0):
            raise ValueError(f"slo_ms must be a finite number > 0, got {slo_ms!r}")
        if int(every) != every or every < 1:
            raise ValueError(f"every must be an integer >= 1, got {every!r}")
        self.slo_ms = float(slo_ms)
        self.every = int(every)
        self._n = 0
        self._sum = 0.0
        self._cnt = 0

    def _collect(self, measurement: Any) -> float | None:
        """Add a period; at the end of a window return its mean latency (None otherwise or
        when nothing usable was measured)."""
        m = as_measurement(measurement)
        if m.count > 0 and usable(m.mean_ms):
            self._sum += m.mean_ms * m.count
            self._cnt += m.count
        self._n += 1
        if self._n < self.every:
            return None
        mean = self._sum / self._cnt if self._cnt else None
        self._n, self._sum, self._cnt = 0, 0.0, 0
        return mean


class MPSOnly(_Windowed):
    """Training MPS is the only knob: ``mps += (slo - l) / mps_gain`` every ``every`` periods
    (default 6 x 4 s ~ 25 s, the restart-limited period of the GPUColo paper, Sec. VI), sleep 0,
    only when
    the error exceeds ``threshold`` of the SLO. ``mps_gain`` is ms of latency per MPS point."""

    def __init__(self, slo_ms: float, mps_gain_ms_per_pct: float, *, every: int = 6,
                 initial_mps_pct: float = 80.0, mps_bounds_pct: tuple[float, float] = (1, 100),
                 threshold: float = 0.02, inner_period_s: float = 4.0,
                 name: str = "MPS-only") -> None:
        super().__init__(slo_ms, every)
        if not (math.isfinite(mps_gain_ms_per_pct) and mps_gain_ms_per_pct > 0):
            raise ValueError(f"mps_gain_ms_per_pct must be > 0, got {mps_gain_ms_per_pct!r}")
        self.mps_gain = float(mps_gain_ms_per_pct)
        self.lo, self.hi = map(float, mps_bounds_pct)
        self.mps_pct = min(max(float(initial_mps_pct), self.lo), self.hi)
        self.threshold = float(threshold)
        self.inner_period_s = inner_period_s
        self.name = name

    def initial_actuation(self) -> Actuation:
        return Actuation(0.0, self.mps_pct, False, False, "initial")

    def update(self, measurement: Any) -> Actuation:
        mean = self._collect(measurement)
        if mean is None:
            return Actuation(0.0, self.mps_pct, False, False, "hold")
        e = self.slo_ms - mean
        if abs(e) / self.slo_ms <= self.threshold:
            return Actuation(0.0, self.mps_pct, False, False, "within threshold", e)
        new = float(min(max(round(self.mps_pct + e / self.mps_gain), self.lo), self.hi))
        changed = new != self.mps_pct
        self.mps_pct = new
        return Actuation(0.0, new, changed, new in (self.lo, self.hi) and not changed,
                         f"MPS -> {new:g}" if changed else "at MPS bound", e)


class GSliceExtended(_Windowed):
    """GSLICE extended to a co-located training job (GPUColo paper, Sec. VI, VII-A).

    The inference and training MPS shares always sum to 100 %. Every ``every`` periods
    (6 x 4 s ~ 25 s: "we choose 25 s") the inference share grows by ``step_up`` points when the
    window's mean latency misses the SLO and shrinks by ``step_down`` when it is below
    ``(1 - slack)`` of it — our reading of GSLICE's threshold-based self-tuning. Every change
    restarts both processes: the plant reads :class:`PlantActuation.inference_mps_pct`. No
    sleep is used.
    """

    def __init__(self, slo_ms: float, *, every: int = 6, initial_inference_pct: float = 70.0,
                 step_up: float = 10.0, step_down: float = 5.0, slack: float = 0.05,
                 inference_bounds_pct: tuple[float, float] = (10.0, 99.0),
                 inner_period_s: float = 4.0, name: str = "GSLICE-extended") -> None:
        super().__init__(slo_ms, every)
        self.lo, self.hi = map(float, inference_bounds_pct)
        self.inference_pct = min(max(float(initial_inference_pct), self.lo), self.hi)
        if step_up <= 0 or step_down <= 0:
            raise ValueError("step_up and step_down must be > 0")
        if not (0.0 <= slack < 1.0):
            raise ValueError(f"slack must be in [0, 1), got {slack!r}")
        self.step_up, self.step_down, self.slack = float(step_up), float(step_down), float(slack)
        self.inner_period_s = inner_period_s
        self.name = name

    @property
    def mps_pct(self) -> float:
        return 100.0 - self.inference_pct

    def _act(self, changed: bool, reason: str, e: float = math.nan) -> PlantActuation:
        return PlantActuation(0.0, self.mps_pct, changed, False, reason, e,
                              inference_mps_pct=self.inference_pct)

    def initial_actuation(self) -> Actuation:
        return self._act(False, "initial")

    def update(self, measurement: Any) -> Actuation:
        mean = self._collect(measurement)
        if mean is None:
            return self._act(False, "hold")
        e = self.slo_ms - mean
        if mean > self.slo_ms:
            new = min(self.inference_pct + self.step_up, self.hi)
        elif mean < (1.0 - self.slack) * self.slo_ms:
            new = max(self.inference_pct - self.step_down, self.lo)
        else:
            return self._act(False, "within band", e)
        changed = new != self.inference_pct
        self.inference_pct = new
        return self._act(changed, f"inference MPS -> {new:g}, training -> {self.mps_pct:g}"
                         if changed else "at bound", e)


class IntegralController:
    """The practitioner's loop the default must beat: integral action on the sleep at a quarter
    of the model's deadbeat gain (at half of it the loop rang on a plant whose slope near sleep
    0 is several times the fitted line's), and a rule-of-thumb share step (10 points, or the
    next partition) every ``every`` periods when the window's mean sleep is past 90 % of its
    range with the latency over the SLO (down), or under 5 % with the latency 5 % under it
    (up).

    Parameters
    ----------
    slo_ms : float
        The SLO (ms).
    gain_ms_per_s : float
        The identified latency-vs-sleep slope (ms per s, < 0).
    share : ShareKnob, optional
        The share's levels and bounds (default 1-100 %, start 100).
    sleep_bounds_s : (float, float)
        Sleep range (s).
    every : int
        Periods between share decisions.
    step_pct : float
        The share step (points) when the knob has no levels.
    """

    name = "Integral"

    def __init__(self, slo_ms: float, gain_ms_per_s: float, *, share: ShareKnob | None = None,
                 sleep_bounds_s: tuple[float, float] = (0.0, 1.0), every: int = 25,
                 step_pct: float = 10.0) -> None:
        self.slo_ms, self.ki = float(slo_ms), 0.25 / abs(float(gain_ms_per_s))
        self.knob = share or ShareKnob()
        self.lo, self.hi = map(float, sleep_bounds_s)
        self.every, self.step = int(every), float(step_pct)
        self.sleep_s, self.share_pct, self._n, self._sum = self.lo, self.knob.start_pct, 0, 0.0

    def initial_actuation(self) -> Actuation:
        return Actuation(self.sleep_s, self.share_pct, False, False, "initial")

    def _step(self, direction: float) -> float:
        levels = self.knob.levels_pct
        if levels is None:
            return self.knob.snap(self.share_pct + direction * self.step)
        i = levels.index(self.share_pct) + int(direction)
        return levels[min(max(i, 0), len(levels) - 1)]

    def update(self, measurement: Any) -> Actuation:
        m = as_measurement(measurement)
        if m.count <= 0 or m.restarting or not usable(m.mean_ms, 50.0 * self.slo_ms):
            return Actuation(self.sleep_s, self.share_pct, False, False, "hold")
        self.sleep_s = min(max(self.sleep_s + self.ki * (m.mean_ms - self.slo_ms), self.lo),
                           self.hi)
        self._n, self._sum = self._n + 1, self._sum + self.sleep_s
        new = self.share_pct
        if self._n >= self.every:
            mean = self._sum / self._n
            self._n, self._sum = 0, 0.0
            if mean > self.lo + 0.9 * (self.hi - self.lo) and m.mean_ms > self.slo_ms:
                new = self._step(-1.0)
            elif mean < self.lo + 0.05 * (self.hi - self.lo) and m.mean_ms < 0.95 * self.slo_ms:
                new = self._step(1.0)
        changed, self.share_pct = new != self.share_pct, new
        return Actuation(self.sleep_s, new, changed, False, "integral")
