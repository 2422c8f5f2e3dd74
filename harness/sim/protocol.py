"""The plant protocol and the closed-loop runner.

A *plant* is anything that runs one control period with a given actuation and reports what
happened: the simulated co-location (:class:`harness.sim.simulated.SimulatedColocation`) and the
real GPU plant both implement :class:`Plant`. A *controller* is anything with
``initial_actuation()`` and ``update(measurement) -> Actuation`` — :class:`gpucontrol.
TwoTierController` and every baseline in :mod:`harness.sim.baselines`.

:func:`run_loop` closes the loop and returns tidy records, one row per period::

    >>> from gpucontrol import LinearLatencyModel, TwoTierController
    >>> from gpucontrol.knobs import ShareKnob
    >>> from harness.sim.simulated import SimulatedColocation
    >>> plant = SimulatedColocation.preset("fig8", seed=1)
    >>> ctl = TwoTierController(LinearLatencyModel(-19.0, 102.0), slo_ms=90.0, outer="none",
    ...                         share=ShareKnob(initial_pct=80.0))
    >>> rec = run_loop(ctl, plant, periods=20)
    >>> len(rec), round(float(rec.col("latency_ms")[-5:].mean()))
    (20, 90)

The records are a ``list`` of ``dict`` (``pandas.DataFrame(rec)`` works as is) with helpers
:meth:`Records.col` and :meth:`Records.columns`.

Plant-side actuation
--------------------
:class:`gpucontrol.Actuation` carries the training knobs only (sleep and training MPS). Some
baselines also move the *inference* process (GSLICE-extended gives the inference an MPS share
and restarts it) or are an idealised upper bound whose resizes cost nothing (the Oracle). They
return a :class:`PlantActuation`, a subclass that adds ``inference_mps_pct`` and
``free_resize``; a plant reads these with :func:`inference_mps_of` / :func:`free_resize_of`, so
a plain ``Actuation`` keeps meaning "inference at its configured share, resizes cost a
restart".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gpucontrol import Actuation
from harness.checks import integer, number

__all__ = [
    "LoadEvent",
    "PeriodResult",
    "Plant",
    "PlantActuation",
    "Records",
    "Scenario",
    "actuation_knobs",
    "free_resize_of",
    "inference_mps_of",
    "run_loop",
]


@dataclass(frozen=True)
class PlantActuation(Actuation):
    """An :class:`~gpucontrol.Actuation` with plant-side extras used by some baselines.

    Parameters
    ----------
    sleep_s : float
        Training sleep per iteration for the next period, s.
    mps_pct : float
        Training MPS share, %.
    mps_changed : bool
        The training processes must restart with ``mps_pct``.
    saturated : bool
        The sleep is pinned at a bound.
    reason : str
        What the controller did, in words.
    error_ms : float
        The latency error the controller saw, ms (NaN if none).
    gain_estimate : float
        The controller's current gain estimate (NaN if none).
    inference_mps_pct : float or None
        The inference process's MPS share (None: leave as configured); changing it restarts
        the inference process.
    free_resize : bool
        Apply MPS changes without the restart downtime (only the Oracle, an idealised upper
        bound, sets this).
    """

    inference_mps_pct: float | None = None
    free_resize: bool = False


def actuation_knobs(actuation: Any) -> tuple[float, float, float | None]:
    """The knobs an actuation asks for, checked: ``(sleep_s, mps_pct, inference_mps_pct)``
    with the sleep a finite number >= 0 s and the MPS shares in [1, 100] % (the inference's
    None: leave it as configured). A plant calls this on every ``step``, so a controller's
    bad output is refused where it enters the plant instead of being clamped.

    Parameters
    ----------
    actuation : Any
        An :class:`~gpucontrol.Actuation` (or anything with ``sleep_s`` and ``mps_pct``).

    Returns
    -------
    tuple
        The sleep (s), the training MPS (%) and the inference MPS (% or None).

    Raises
    ------
    ValueError, TypeError
        Naming the field and its range.
    """
    s = number("actuation.sleep_s", getattr(actuation, "sleep_s", None), 0.0, None)
    m = number("actuation.mps_pct", getattr(actuation, "mps_pct", None), 1.0, 100.0)
    ci = getattr(actuation, "inference_mps_pct", None)
    if ci is not None:
        ci = number("actuation.inference_mps_pct", ci, 1.0, 100.0)
    return s, m, ci


def inference_mps_of(actuation: Any) -> float | None:
    """The inference MPS share an actuation asks for, or None (keep the plant's setting)."""
    v = getattr(actuation, "inference_mps_pct", None)
    return None if v is None else float(v)


def free_resize_of(actuation: Any) -> bool:
    return bool(getattr(actuation, "free_resize", False))


@dataclass(frozen=True)
class PeriodResult:
    """What one control period produced.

    It is also a valid controller measurement: ``mean_ms``, ``p99_ms``, ``count`` and
    ``restarting`` are what :func:`gpucontrol.measurement.as_measurement` reads. With a
    measurement delay the latency fields describe the previous period; the throughput fields
    always describe this one.

    Parameters
    ----------
    mean_ms, p99_ms : float
        Mean and 99th percentile of the per-batch inference latency (NaN when ``count`` is 0).
    count : int
        Inference batches measured.
    t_end_s : float
        Plant time at the end of the period.
    period_s : float
        Length of the period.
    inference_batches : int
        Inference batches completed in this period.
    inference_images : int
        Images (requests) completed in this period.
    training_iterations : float
        Training iterations' worth of useful work done (work lost to a restart is subtracted).
    training_sm_share : float
        Time-averaged fraction of SMs held by training in this period, in [0, 1].
    iteration_s : float
        Mean compute time of one training iteration in the period (s, sleep excluded), what
        a node measures with its iteration hook; NaN when the plant does not report it.
    restarting : bool
        The training process was restarting (MPS change) during part of the period.
    inference_restarting : bool
        The inference process was restarting during part of the period.
    sleep_s, mps_pct, inference_mps_pct : float
        The knobs in force at the end of the period.
    batch : int
        Inference batch size in force.
    samples_ms : tuple of float
        The individual batch latencies (kept only when the plant is asked to).
    """

    mean_ms: float
    p99_ms: float
    count: int
    t_end_s: float = math.nan
    period_s: float = math.nan
    inference_batches: int = 0
    inference_images: int = 0
    training_iterations: float = 0.0
    training_sm_share: float = 0.0
    iteration_s: float = math.nan
    restarting: bool = False
    inference_restarting: bool = False
    sleep_s: float = math.nan
    mps_pct: float = math.nan
    inference_mps_pct: float = math.nan
    batch: int = 0
    samples_ms: tuple[float, ...] = ()

    @property
    def inference_throughput(self) -> float:
        """Images per second in this period."""
        return self.inference_images / self.period_s if self.period_s > 0 else math.nan

    @property
    def training_throughput(self) -> float:
        """Training iterations per second in this period."""
        return self.training_iterations / self.period_s if self.period_s > 0 else math.nan


@runtime_checkable
class Plant(Protocol):
    """A co-located GPU seen by a controller, one control period at a time."""

    def step(self, actuation: Actuation, period_s: float) -> PeriodResult:
        """Apply ``actuation``, run ``period_s`` seconds, report the period."""
        ...

    def set_load(self, **changes: Any) -> None:
        """Change the inference load (e.g. ``batch=115``) from now on."""
        ...


@dataclass(frozen=True)
class LoadEvent:
    """At ``time_s`` (plant time, s) apply ``changes`` with ``plant.set_load(**changes)``.

    Parameters
    ----------
    time_s : float
        When the change is due, plant time in s.
    changes : tuple[tuple[str, Any], ...]
        ``(field, value)`` pairs for ``plant.set_load`` (:meth:`at` builds them).
    """

    time_s: float
    changes: tuple[tuple[str, Any], ...]

    @classmethod
    def at(cls, time_s: float, **changes: Any) -> LoadEvent:
        if not (math.isfinite(time_s) and time_s >= 0):
            raise ValueError(f"time_s must be a finite number >= 0, got {time_s!r}")
        if not changes:
            raise ValueError("a LoadEvent needs at least one change, e.g. batch=115")
        return cls(float(time_s), tuple(sorted(changes.items())))


@dataclass(frozen=True)
class Scenario:
    """A load script: each event is applied at the first period boundary at or after its time
    (so with T = 4 s an event at 90 s takes effect at 92 s; :meth:`load_at` gives the load in
    force for a period starting at ``t``).

    Parameters
    ----------
    events : tuple[LoadEvent, ...]
        The load events, sorted by time (:meth:`of` sorts them).

    >>> burst = Scenario.of(LoadEvent.at(0, batch=105), LoadEvent.at(90, batch=115),
    ...                     LoadEvent.at(290, batch=105))
    >>> burst.load_at(100.0)
    {'batch': 115}
    >>> burst.phases(400.0)
    [(0.0, 90.0, {'batch': 105}), (90.0, 290.0, {'batch': 115}), (290.0, 400.0, {'batch': 105})]
    """

    events: tuple[LoadEvent, ...] = ()

    @classmethod
    def of(cls, *events: LoadEvent) -> Scenario:
        return cls(tuple(sorted(events, key=lambda e: e.time_s)))

    def due(self, t0: float, t1: float) -> list[LoadEvent]:
        """Events with ``t0 <= time_s < t1``."""
        return [e for e in self.events if t0 <= e.time_s < t1]

    def load_at(self, t: float) -> dict[str, Any]:
        """The accumulated load settings in force at time ``t``."""
        out: dict[str, Any] = {}
        for e in self.events:
            if e.time_s <= t:
                out.update(dict(e.changes))
        return out

    def phases(self, duration_s: float) -> list[tuple[float, float, dict[str, Any]]]:
        """``(start, end, load)`` for each constant-load phase within ``[0, duration_s)``."""
        cuts = sorted({0.0, *[e.time_s for e in self.events if e.time_s < duration_s]})
        bounds = [*cuts, float(duration_s)]
        return [(a, b, self.load_at(a)) for a, b in itertools.pairwise(bounds) if b > a]


class Records(list):
    """Tidy per-period records: a list of dicts with column helpers.

    Parameters
    ----------
    iterable : Iterable[dict]
        The rows (optional; empty records by default).
    """

    def col(self, name: str) -> np.ndarray:
        """One column as a float array (booleans become 0/1, missing values NaN).

        Raises ``KeyError`` naming the available columns when no row has ``name`` (empty
        records give an empty array).
        """
        if self and not any(name in r for r in self):
            raise KeyError(f"no column {name!r}; the records have "
                           f"{', '.join(self.columns())}")
        return np.array([_num(r.get(name, math.nan)) for r in self], dtype=float)

    def columns(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self:
            for k in r:
                seen.setdefault(k, None)
        return list(seen)

    def where(self, pred: Callable[[dict], bool]) -> Records:
        return Records(r for r in self if pred(r))


def _num(v: Any) -> float:
    if isinstance(v, bool):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def run_loop(controller: Any, plant: Plant, periods: int, scenario: Scenario | None = None, *,
             period_s: float | None = None, label: str | None = None,
             extra: dict[str, Any] | None = None,
             on_period: Callable[[int], None] | None = None) -> Records:
    """Run ``controller`` against ``plant`` for ``periods`` control periods.

    Each period: apply the scenario's load events that fall due, ``plant.step`` with the
    current actuation, record the row, then ``controller.update(result)`` gives the actuation
    for the next period.

    Parameters
    ----------
    controller : Any
        ``initial_actuation()`` and ``update(measurement)`` returning an Actuation.
    plant : Plant
        The plant to step.
    periods : int
        Number of control periods (>= 1).
    scenario : Scenario, optional
        Load changes over time.
    period_s : float, optional
        Period length; default the controller's ``inner_period_s`` or 4 s.
    label : str, optional
        Written into every row as ``controller`` (default: the controller's class name).
    extra : dict, optional
        Constant columns added to every row (e.g. the SLO of a sweep point).
    on_period : callable, optional
        Called with the period index after each period (progress bars).

    Returns
    -------
    Records
        One row per period with the columns ``period, t_start_s, t_end_s, controller,
        slo_ms, batch, sleep_s, mps_pct, inference_mps_pct, latency_ms, p99_ms, count,
        inference_throughput, training_throughput, training_iterations, training_sm_share,
        restarting, inference_restarting, next_sleep_s, next_mps_pct, mps_changed,
        saturated, gain_estimate, reason`` (plus ``extra``). ``sleep_s``/``mps_pct`` are the
        knobs that were in force during the period; ``next_*`` what the controller asked for
        after it.
    """
    periods = integer("periods", periods, 1)
    T = number("period_s", period_s if period_s is not None else
               getattr(controller, "inner_period_s", 4.0), 0.0, None, lo_open=True)
    name = label or getattr(controller, "name", None) or type(controller).__name__
    slo = float(getattr(controller, "slo_ms", math.nan))
    act = controller.initial_actuation()
    out = Records()
    t = 0.0
    pending = list(scenario.events) if scenario is not None else []
    for k in range(periods):
        while pending and pending[0].time_s <= t + 1e-9:
            plant.set_load(**dict(pending.pop(0).changes))
        res = plant.step(act, T)
        nxt = controller.update(res)
        row = {
            "period": k, "t_start_s": t, "t_end_s": t + T, "controller": name, "slo_ms": slo,
            "batch": res.batch, "sleep_s": res.sleep_s, "mps_pct": res.mps_pct,
            "inference_mps_pct": res.inference_mps_pct, "latency_ms": res.mean_ms,
            "p99_ms": res.p99_ms, "count": res.count,
            "inference_throughput": res.inference_throughput,
            "training_throughput": res.training_throughput,
            "training_iterations": res.training_iterations,
            "training_sm_share": res.training_sm_share, "restarting": res.restarting,
            "inference_restarting": res.inference_restarting,
            "next_sleep_s": float(nxt.sleep_s), "next_mps_pct": float(nxt.mps_pct),
            "mps_changed": bool(getattr(nxt, "mps_changed", False)),
            "saturated": bool(getattr(nxt, "saturated", False)),
            "gain_estimate": float(getattr(nxt, "gain_estimate", math.nan)),
            "reason": str(getattr(nxt, "reason", "")),
        }
        if extra:
            row.update(extra)
        out.append(row)
        act = nxt
        t += T
        if on_period is not None:
            on_period(k)
    return out


def concat(parts: Iterable[Sequence[dict]]) -> Records:
    """Join several runs' records into one table."""
    out = Records()
    for p in parts:
        out.extend(p)
    return out
