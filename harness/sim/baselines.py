"""Baselines for the co-location experiments, all with the controller interface of
:class:`gpucontrol.TwoTierController`: ``initial_actuation()`` and ``update(measurement)``
returning an :class:`~gpucontrol.Actuation` (or the plant-side :class:`~harness.sim.protocol.
PlantActuation` where the inference process is touched too).

========================  ===============================================================
name                      behaviour
========================  ===============================================================
Open                      fixed sleep and training MPS (tuned offline for the normal load)
Simple                    even split: inference 50 %, training 50 % MPS, no sleep
                          (GPUColo paper, Sec. III)
Conservative              inference 40 %, training 10 % per job, no sleep (GPUColo paper, Sec. III)
Sleep-only                GPUColo's inner loop alone; the training MPS stays where it starts
MPS-only                  training MPS only, P step every ~25 s (restarts cost too much for 4 s)
GSLICE-extended           inference + training MPS = 100 %, inference grows when the SLO is
                          missed and shrinks when well below it, every 25 s; every change
                          restarts both processes (GPUColo paper, Sec. VI, VII-A)
GPUColo two-tier          :class:`gpucontrol.TwoTierController`, ``outer="paper"``
GPUColo mid-range + adpt  :class:`gpucontrol.TwoTierController`, ``outer="mid-range"``,
                          ``adaptive=True``
gpucontrol default        ``TwoTierController(model, slo)``: detune 0.5, throughput-seeking
                          outer loop (aliases ``default``, ``throughput``, ``ours``)
Sleep, no MPS             the default controller with its share held at 100 % (the sleep is
                          its only knob) on a time-sliced GPU (no MPS; ``sleep`` backend)
Green context + MPS       the default controller told its share is restart-free, with the
                          green-context partitions as its levels (``green-context+mps``)
Oracle                    best static sleep + MPS per load phase meeting the SLO on the
                          noise-free plant, resizes free: the upper bound
========================  ===============================================================

A baseline may name the spatial-share backend it drives (:data:`harness.sim.physics.BACKENDS`):
the experiments run it on the plant with that backend and give it the nominal model identified
there (:meth:`BaselineContext.family_for`). The last two are not in the default set
(:data:`DEFAULT_NAMES`): the backend comparison names them (GPUColo two-tier on
``mps-restart`` is the paper's loop).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucontrol import Actuation, LatencyModelFamily, LinearLatencyModel, TwoTierController
from gpucontrol.controllers import as_measurement, usable
from harness.sim.protocol import PlantActuation, Scenario

__all__ = [
    "ALIASES",
    "BASELINES",
    "DEFAULT_NAMES",
    "Baseline",
    "BaselineContext",
    "FixedAllocation",
    "GSliceExtended",
    "MPSOnly",
    "Named",
    "Oracle",
    "OraclePoint",
    "best_static_point",
    "gpucolo_midrange_adaptive",
    "gpucolo_two_tier",
    "green_context_mps",
    "names",
    "sleep_only",
]


class Named:
    """Give any controller a display ``name`` (used as the ``controller`` column)."""

    def __init__(self, name: str, controller: Any) -> None:
        self.name = name
        self.controller = controller

    def __getattr__(self, item: str) -> Any:
        if item == "controller":
            raise AttributeError(item)
        return getattr(self.controller, item)

    def initial_actuation(self) -> Actuation:
        return self.controller.initial_actuation()

    def update(self, measurement: Any) -> Actuation:
        return self.controller.update(measurement)


# ----------------------------------------------------------------------------------------------
class FixedAllocation:
    """A fixed allocation that never changes: Open, Simple and Conservative.

    ``inference_mps_pct=None`` leaves the inference at the plant's setting (100 % for GPUColo's
    plant); a value gives the inference its own MPS cap (the static co-location baselines of
    the GPUColo paper, Sec. III split the GPU between the jobs).
    """

    def __init__(self, sleep_s: float = 0.0, mps_pct: float = 100.0, *,
                 inference_mps_pct: float | None = None, slo_ms: float = math.nan,
                 name: str = "Open", inner_period_s: float = 4.0) -> None:
        if not (math.isfinite(sleep_s) and sleep_s >= 0):
            raise ValueError(f"sleep_s must be a finite number >= 0, got {sleep_s!r}")
        if not (1.0 <= mps_pct <= 100.0):
            raise ValueError(f"mps_pct must be in [1, 100], got {mps_pct!r}")
        if inference_mps_pct is not None and not (1.0 <= inference_mps_pct <= 100.0):
            raise ValueError(f"inference_mps_pct must be in [1, 100], got {inference_mps_pct!r}")
        self.sleep_s, self.mps_pct = float(sleep_s), float(mps_pct)
        self.inference_mps_pct = inference_mps_pct
        self.slo_ms = slo_ms
        self.name = name
        self.inner_period_s = inner_period_s

    @classmethod
    def simple(cls, slo_ms: float = math.nan) -> FixedAllocation:
        """Even split between the two co-located jobs (GPUColo paper, Sec. III "Simple")."""
        return cls(0.0, 50.0, inference_mps_pct=50.0, slo_ms=slo_ms, name="Simple")

    @classmethod
    def conservative(cls, slo_ms: float = math.nan) -> FixedAllocation:
        """40 % per inference job, 10 % per training job (GPUColo paper, Sec. III,
        "Conservative")."""
        return cls(0.0, 10.0, inference_mps_pct=40.0, slo_ms=slo_ms, name="Conservative")

    def _act(self, reason: str) -> Actuation:
        return PlantActuation(self.sleep_s, self.mps_pct, False, False, reason,
                              inference_mps_pct=self.inference_mps_pct)

    def initial_actuation(self) -> Actuation:
        return self._act("initial (fixed)")

    def update(self, measurement: Any) -> Actuation:
        return self._act("fixed")


# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OraclePoint:
    """The best static operating point of one load phase."""

    start_s: float
    end_s: float
    batch: int
    sleep_s: float
    mps_pct: float
    latency_ms: float
    training_throughput: float
    feasible: bool


def best_static_point(plant: Any, slo_ms: float, *, batch: int | None = None,
                      sleep_bounds_s: tuple[float, float] = (0.0, 1.0),
                      mps_bounds_pct: tuple[float, float] = (1.0, 100.0),
                      sleep_step_s: float = 0.005, mps_step_pct: float = 1.0
                      ) -> tuple[float, float, float, float, bool]:
    """Grid search on the noise-free plant: ``(sleep, mps, latency, training_tp, feasible)``
    maximising training throughput with ``latency <= slo_ms``; when nothing meets the SLO,
    the point of least latency (``feasible=False``)."""
    s = np.arange(sleep_bounds_s[0], sleep_bounds_s[1] + 1e-9, sleep_step_s)
    m = np.arange(mps_bounds_pct[0], mps_bounds_pct[1] + 1e-9, mps_step_pct)
    S, M = np.meshgrid(s, m)
    lat = np.asarray(plant.expected_latency_ms(S, M, batch))
    tp = np.asarray(plant.expected_training_throughput(S, M, batch))
    ok = lat <= slo_ms
    if ok.any():
        i = np.unravel_index(np.argmax(np.where(ok, tp, -np.inf)), tp.shape)
        feasible = True
    else:
        i = np.unravel_index(np.argmin(lat), lat.shape)
        feasible = False
    return float(S[i]), float(M[i]), float(lat[i]), float(tp[i]), feasible


class Oracle:
    """Upper bound: per load phase, the best static sleep + MPS on the noise-free plant.

    It knows the scenario in advance and switches at the same period boundary at which the
    load changes; its resizes are free (:class:`PlantActuation` with ``free_resize=True``).
    """

    def __init__(self, plant: Any, slo_ms: float, scenario: Scenario | None = None, *,
                 duration_s: float, inner_period_s: float = 4.0,
                 sleep_bounds_s: tuple[float, float] = (0.0, 1.0),
                 mps_bounds_pct: tuple[float, float] = (1.0, 100.0), name: str = "Oracle"
                 ) -> None:
        self.slo_ms = float(slo_ms)
        self.inner_period_s = float(inner_period_s)
        self.name = name
        scen = scenario if scenario is not None else Scenario()
        base_batch = plant.params.batch
        self.points: list[OraclePoint] = []
        for a, b, load in scen.phases(duration_s):
            batch = int(load.get("batch", base_batch))
            s, m, lat, tp, ok = best_static_point(plant, self.slo_ms, batch=batch,
                                                  sleep_bounds_s=sleep_bounds_s,
                                                  mps_bounds_pct=mps_bounds_pct)
            self.points.append(OraclePoint(a, b, batch, s, m, lat, tp, ok))
        self._k = 0

    def point_at(self, t: float) -> OraclePoint:
        for p in self.points:
            if p.start_s <= t < p.end_s:
                return p
        return self.points[-1]

    def _act(self, t: float, reason: str) -> PlantActuation:
        p = self.point_at(t)
        return PlantActuation(p.sleep_s, p.mps_pct, False, not p.feasible, reason,
                              free_resize=True)

    def initial_actuation(self) -> Actuation:
        self._k = 0
        return self._act(0.0, "oracle")

    def update(self, measurement: Any) -> Actuation:
        """The point for the next period: the load in force when it starts (the plant's
        ``t_end_s`` of this period when reported, else ``k * T``)."""
        self._k += 1
        t = getattr(measurement, "t_end_s", math.nan)
        try:
            t = float(t)
        except (TypeError, ValueError):
            t = math.nan
        if not math.isfinite(t):
            t = self._k * self.inner_period_s
        return self._act(t + 1e-9, "oracle")


# ----------------------------------------------------------------------------------------------
def sleep_only(model: LinearLatencyModel | LatencyModelFamily, slo_ms: float, *,
               mps_pct: float = 80.0, **kw: Any) -> Named:
    """GPUColo's inner loop alone (``outer="none"``), the training MPS fixed at ``mps_pct``."""
    return Named("Sleep-only", TwoTierController(model, slo_ms, outer="none",
                                                 initial_mps_pct=mps_pct, **kw))


def gpucolo_two_tier(model: LinearLatencyModel | LatencyModelFamily, slo_ms: float, *,
                     initial_mps_pct: float = 80.0, **kw: Any) -> Named:
    """The paper's two-tier controller (P inner loop, outer MPS loop every 25 periods)."""
    return Named("GPUColo two-tier", TwoTierController(model, slo_ms, outer="paper",
                                                       initial_mps_pct=initial_mps_pct, **kw))


def gpucolo_midrange_adaptive(model: LinearLatencyModel | LatencyModelFamily, slo_ms: float, *,
                              initial_mps_pct: float = 80.0, **kw: Any) -> Named:
    """Ours: mid-ranging outer loop (MPS returns the sleep to a small target) and adaptive
    inner gain (bounded RLS)."""
    return Named("GPUColo mid-range + adaptive",
                 TwoTierController(model, slo_ms, outer="mid-range", adaptive=True,
                                   initial_mps_pct=initial_mps_pct, **kw))


def gpucontrol_default(model: LinearLatencyModel | LatencyModelFamily, slo_ms: float, *,
                       initial_mps_pct: float = 80.0, **kw: Any) -> Named:
    """The library's default ``TwoTierController(model, slo_ms)``: P inner loop detuned to
    0.5 (stable under an unknown one-period delay) and the throughput-seeking outer loop."""
    return Named("gpucontrol default",
                 TwoTierController(model, slo_ms, initial_mps_pct=initial_mps_pct, **kw))


def green_context_mps(model: LinearLatencyModel | LatencyModelFamily, slo_ms: float, *,
                      partitions_pct: Iterable[float], initial_mps_pct: float = 100.0,
                      **kw: Any) -> Named:
    """The library's default controller on restart-free green-context partitions inside MPS:
    told the share costs no restart (``restart_s=0``) and that the partitions are the only
    levels (``mps_levels_pct``), so its throughput loop may move every period."""
    return Named("Green context + MPS",
                 TwoTierController(model, slo_ms, initial_mps_pct=initial_mps_pct,
                                   restart_s=0.0, mps_levels_pct=tuple(partitions_pct), **kw))


def names(controllers: Iterable[Any]) -> list[str]:
    """The display names of ``controllers``.

    Parameters
    ----------
    controllers : Iterable[Any]
        Controllers; one without a ``name`` attribute is named by its class.

    Returns
    -------
    list[str]
        One name per controller, in order.
    """
    return [getattr(c, "name", type(c).__name__) for c in controllers]


# ---- the registry: one entry per controller the experiments know -----------------------------
@dataclass
class BaselineContext:
    """What a baseline's factory may use to build its controller for one run.

    Parameters
    ----------
    plant : Any
        The noise-free reference plant (the Oracle, the Open setting, the nominal model).
    slo_ms : float
        The latency SLO, ms.
    scenario : Scenario or None
        The load scenario of the run (the Oracle knows it in advance).
    duration_s : float
        Length of the run, s.
    period_s : float
        The inner control period, s.
    family : LatencyModelFamily
        The controllers' nominal model.
    initial_mps_pct : float
        The training MPS share the run starts at, %.
    identify : Callable or None
        ``identify(plant) -> LatencyModelFamily``, how the nominal model of another backend's
        plant is found (:meth:`family_for`); None: ``family`` serves every backend.
    """

    plant: Any
    slo_ms: float
    scenario: Scenario | None
    duration_s: float
    period_s: float
    family: LatencyModelFamily
    initial_mps_pct: float
    identify: Callable[[Any], LatencyModelFamily] | None = None
    _oracle: Oracle | None = field(default=None, init=False, repr=False)
    _families: dict[str, LatencyModelFamily] = field(default_factory=dict, init=False,
                                                     repr=False)

    def plant_for(self, backend: str | None) -> Any:
        """The noise-free reference plant with ``backend`` (None: as it is)."""
        if backend is None:
            return self.plant
        from dataclasses import replace

        from harness.sim.physics import backend_overrides
        from harness.sim.simulated import SimulatedColocation

        return SimulatedColocation(replace(self.plant.params, **backend_overrides(backend)))

    def family_for(self, backend: str | None) -> LatencyModelFamily:
        """The nominal model identified on the reference plant with ``backend``."""
        if backend is None or self.identify is None:
            return self.family
        if backend not in self._families:
            self._families[backend] = self.identify(self.plant_for(backend))
        return self._families[backend]

    @property
    def partitions_pct(self) -> tuple[float, ...]:
        """The green-context partitions of the reference plant, % (25/50/75/100 where it
        names none)."""
        params = getattr(self.plant, "params", None)
        return tuple(getattr(params, "green_shares_pct", (25.0, 50.0, 75.0, 100.0)))

    @property
    def oracle(self) -> Oracle:
        """The run's :class:`Oracle`, built on first use and shared (Open starts from it)."""
        if self._oracle is None:
            self._oracle = Oracle(self.plant, self.slo_ms, self.scenario,
                                  duration_s=self.duration_s, inner_period_s=self.period_s)
        return self._oracle

    @property
    def gain_mps(self) -> float:
        """The nominal model's latency gain per MPS % at the initial MPS (positive), or
        ``slo_ms / 100`` where the model has none."""
        g = self.family.mps_gain(self.initial_mps_pct)
        return g if math.isfinite(g) and g > 0 else self.slo_ms / 100.0

    @property
    def every(self) -> int:
        """Periods between two MPS changes of the slow baselines (about 25 s)."""
        return max(1, round(25.0 / self.period_s))


@dataclass(frozen=True)
class Baseline:
    """One controller the experiments know: display name, command-line aliases, factory.

    Parameters
    ----------
    name : str
        The display name (the ``controller`` column).
    factory : Callable[[BaselineContext], Any]
        Builds the controller for one run.
    aliases : tuple[str, ...]
        Short lower-case names accepted on the command line.
    backend : str or None
        The spatial-share backend it drives (:data:`harness.sim.physics.BACKENDS`); None:
        the plant's own.
    default : bool
        In the set the experiments run when no controllers are named.
    """

    name: str
    factory: Callable[[BaselineContext], Any]
    aliases: tuple[str, ...] = ()
    backend: str | None = None
    default: bool = True


def _open(c: BaselineContext) -> FixedAllocation:
    p0 = c.oracle.points[0]
    return FixedAllocation(p0.sleep_s, p0.mps_pct, slo_ms=c.slo_ms, name="Open",
                           inner_period_s=c.period_s)


#: Every controller the experiments know, in display order; a new baseline is one entry here.
BASELINES: tuple[Baseline, ...] = (
    Baseline("Open", _open, ("open",)),
    Baseline("Simple", lambda c: FixedAllocation.simple(c.slo_ms), ("simple",)),
    Baseline("Conservative", lambda c: FixedAllocation.conservative(c.slo_ms),
             ("conservative",)),
    Baseline("Sleep-only", lambda c: sleep_only(c.family, c.slo_ms, mps_pct=c.initial_mps_pct,
                                                inner_period_s=c.period_s),
             ("sleep", "sleep-only")),
    Baseline("MPS-only", lambda c: MPSOnly(c.slo_ms, c.gain_mps, every=c.every,
                                           initial_mps_pct=c.initial_mps_pct,
                                           inner_period_s=c.period_s),
             ("mps", "mps-only")),
    Baseline("GSLICE-extended", lambda c: GSliceExtended(c.slo_ms, every=c.every,
                                                         inner_period_s=c.period_s),
             ("gslice", "gslice-extended")),
    Baseline("GPUColo two-tier",
             lambda c: gpucolo_two_tier(c.family, c.slo_ms, initial_mps_pct=c.initial_mps_pct,
                                        inner_period_s=c.period_s),
             ("two-tier", "paper", "gpucolo")),
    Baseline("GPUColo mid-range + adaptive",
             lambda c: gpucolo_midrange_adaptive(c.family, c.slo_ms,
                                                 initial_mps_pct=c.initial_mps_pct,
                                                 inner_period_s=c.period_s),
             ("mid-range", "adaptive")),
    Baseline("gpucontrol default",
             lambda c: gpucontrol_default(c.family, c.slo_ms, initial_mps_pct=c.initial_mps_pct,
                                          inner_period_s=c.period_s),
             ("default", "throughput", "ours")),
    Baseline("Oracle", lambda c: c.oracle, ("oracle",)),
    Baseline("Sleep, no MPS",
             lambda c: Named("Sleep, no MPS", TwoTierController(
                 c.family_for("sleep"), c.slo_ms, initial_mps_pct=100.0,
                 mps_levels_pct=(100.0,), inner_period_s=c.period_s)),
             ("sleep-no-mps", "time-sliced"), backend="sleep", default=False),
    Baseline("Green context + MPS",
             lambda c: green_context_mps(c.family_for("green-context+mps"), c.slo_ms,
                                         partitions_pct=c.partitions_pct,
                                         initial_mps_pct=c.initial_mps_pct,
                                         inner_period_s=c.period_s),
             ("green", "green-mps", "green-context+mps"), backend="green-context+mps",
             default=False),
)

#: Short aliases accepted on the command line -> display name.
ALIASES: dict[str, str] = {a: b.name for b in BASELINES for a in b.aliases}

#: The controllers the experiments run when none are named.
DEFAULT_NAMES: tuple[str, ...] = tuple(b.name for b in BASELINES if b.default)
