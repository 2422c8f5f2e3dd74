"""Shared pieces of the experiments: plant construction, the nominal model, the controller
suite, per-controller metrics and the result container."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpucontrol import LatencyModelFamily, LinearLatencyModel, OperatingPoint
from gpucontrol.errors import PlantUnavailable
from harness.checks import numbers_in
from harness.experiments.plants import make_plant
from harness.sim import baselines as B
from harness.sim.protocol import Records, Scenario
from harness.sim.simulated import SimulatedColocation

__all__ = [
    "ALL_CONTROLLER_NAMES",
    "CONTROLLER_NAMES",
    "ExperimentResult",
    "PlantUnavailable",
    "build_controllers",
    "close_plant",
    "controller_backend",
    "controller_metrics",
    "distinct_numbers",
    "identify_family",
    "latency_range_ms",
    "make_plant",
    "params_meta",
    "plant_mps_enabled",
    "plant_setup",
    "scale_slo",
    "slo_floor_ms",
    "slo_meta",
    "steady_mask",
]

#: The controllers the experiments run when none are named, in display order (the registry
#: :data:`harness.sim.baselines.BASELINES`, its default set).
CONTROLLER_NAMES: tuple[str, ...] = B.DEFAULT_NAMES
#: Every controller the experiments know (the default set and the backend comparison's).
ALL_CONTROLLER_NAMES: tuple[str, ...] = tuple(b.name for b in B.BASELINES)

#: Short aliases accepted on the command line.
ALIASES = B.ALIASES


def plant_mps_enabled(plant: Any) -> bool | None:
    """Whether the plant shares the GPU through MPS (False: time slicing, as in the Fig 4
    "Sleep" run or on a GPU plant without the MPS binary); None if it does not say. Ask a GPU
    plant after it has started."""
    params = getattr(plant, "params", None)
    if params is not None and hasattr(params, "mps_enabled"):
        return bool(params.mps_enabled)
    v = getattr(plant, "mps_enabled", None)
    return None if v is None else bool(v)


def plant_setup(plant: Any) -> dict[str, Any] | None:
    """What a plant with processes ran, for the results' metadata (the GPU plant's training,
    batch and, when sized to its GPU, the sizing); None for a plant that does not say. Ask
    after it has started."""
    setup = getattr(plant, "setup", None)
    return setup() if callable(setup) else None


def close_plant(plant: Any) -> None:
    """Release a plant's processes if it has any (the GPU plant); no-op for the simulator."""
    close = getattr(plant, "close", None)
    if callable(close):
        close()


def latency_range_ms(reference: Any, batch: int) -> tuple[float, float]:
    """``reference``'s noise-free latency at ``batch`` with the training unslept at MPS 20 %
    and at MPS 100 %: the span a sleep/MPS controller can place an SLO in."""
    lo = float(reference.expected_latency_ms(0.0, 20.0, batch))
    hi = float(reference.expected_latency_ms(0.0, 100.0, batch))
    return lo, hi


def scale_slo(slo_ms: float, reference: Any, batch: int) -> float:
    """An SLO stated for the GPUColo paper's RTX 3090 (the ``fig8`` preset) moved to the same
    place in
    ``reference``'s latency range (:func:`latency_range_ms`), e.g. a preset calibrated on
    another GPU. On ``fig8`` itself it returns ``slo_ms``: 90 ms sits at 0.28 of the range
    72.9..134.7 ms at batch 105.

    >>> from harness.sim.simulated import SimulatedColocation
    >>> round(scale_slo(90.0, SimulatedColocation.preset("fig8"), 105), 6)
    90.0
    """
    if not (math.isfinite(slo_ms) and slo_ms > 0):
        raise ValueError(f"slo_ms must be a positive number, got {slo_ms!r}")
    lo0, hi0 = latency_range_ms(SimulatedColocation.preset("fig8"), batch)
    lo, hi = latency_range_ms(reference, batch)
    if not hi0 > lo0:
        raise ValueError(f"batch {batch}: the fig8 preset has no latency range to scale from")
    return lo + (slo_ms - lo0) / (hi0 - lo0) * (hi - lo)


def slo_floor_ms(reference: Any, batch: int) -> float:
    """The least latency the knobs (sleep in [0, 1] s, MPS in [1, 100] %) reach on the
    noise-free ``reference`` at ``batch``: an SLO below it is infeasible for every controller
    (the Oracle's grid, :func:`harness.sim.baselines.best_static_point`).

    Parameters
    ----------
    reference : Any
        A plant with ``expected_latency_ms`` and ``expected_training_throughput``.
    batch : int
        Inference batch size.

    Returns
    -------
    float
        The floor, ms.
    """
    return float(B.best_static_point(reference, -math.inf, batch=batch)[2])


def slo_meta(slo_ms: float, reference: Any, batch: int, relative: bool) -> dict[str, Any]:
    """The SLO an experiment runs at and how it was chosen: ``slo_ms`` as given, or moved by
    :func:`scale_slo` when ``relative``; with the given value and ``reference``'s latency
    range, for the meta JSON."""
    slo = scale_slo(slo_ms, reference, batch) if relative else float(slo_ms)
    return {"slo_ms": slo, "slo_given_ms": float(slo_ms), "relative_slo": bool(relative),
            "latency_range_ms": list(latency_range_ms(reference, batch))}


def params_meta(kind: str, reference: Any) -> dict[str, Any]:
    """Meta entry for the simulated ``reference`` plant of a closed-loop experiment: on the
    simulated plant it is the plant itself (``plant_params``); on the GPU it is only where the
    controllers' nominal model and the Oracle came from (``model_plant_params``)."""
    key = "plant_params" if kind == "sim" else "model_plant_params"
    return {key: reference.describe()}


def distinct_numbers(name: str, values: Any, lo: float | None = None,
                     hi: float | None = None, *, lo_open: bool = False,
                     hi_open: bool = False) -> list[float]:
    """A list of numbers as the command line's lists take them (``--slos``, ``--mps``): at
    least one, each finite and in the range, none twice (it would run, and write, the same
    thing twice); text is refused (``"85"`` is not the list ``[8, 5]``).

    >>> distinct_numbers("slos", [85, 90], 0, 10000, lo_open=True)
    [85.0, 90.0]
    >>> distinct_numbers("slos", [85, 85], 0, 10000, lo_open=True)
    Traceback (most recent call last):
    ...
    ValueError: slos: 85 given more than once; give each value once, got [85, 85]

    Parameters
    ----------
    name : str
        The parameter's name, for the message.
    values : Sequence[float]
        The numbers.
    lo, hi, lo_open, hi_open
        The range of each (None: unbounded), as :func:`harness.checks.number` takes it.

    Returns
    -------
    list[float]
        The values, in order.
    """
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a sequence of numbers, got {values!r}")
    if len(values) == 0:
        raise ValueError(f"{name} must hold at least one number, got {values!r}")
    out = [float(v) for v in numbers_in(name, list(values), lo, hi, lo_open=lo_open,
                                        hi_open=hi_open).ravel()]
    twice = sorted({v for v in out if out.count(v) > 1})
    if twice:
        raise ValueError(f"{name}: {', '.join(f'{v:g}' for v in twice)} given more than once; "
                         f"give each value once, got {values!r}")
    return out


def resolve_names(names: Sequence[str] | str | None) -> list[str]:
    """Controller names from a list or a comma-separated string (aliases allowed)."""
    if names is None:
        return list(CONTROLLER_NAMES)
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    out = []
    for n in names:
        key = n.strip()
        full = key if key in ALL_CONTROLLER_NAMES else ALIASES.get(key.lower())
        if full is None:
            raise ValueError(f"unknown controller {key!r}; choose from "
                             f"{', '.join(ALL_CONTROLLER_NAMES)} (or "
                             f"{', '.join(sorted(ALIASES))})")
        if full not in out:
            out.append(full)
    return out


def identify_family(plant: Any, mps_levels: Sequence[float] = (20, 40, 60, 80, 100), *,
                    batch: int | None = None, sleeps: Sequence[float] | None = None
                    ) -> LatencyModelFamily:
    """The controllers' nominal model: at each MPS level, a least-squares line of latency
    over the sleep range (the procedure of the GPUColo paper (Chen et al., ICDCS 2024),
    Fig. 6), on the noise-free plant, with the training's iteration time there where the plant
    gives it (``expected_iteration_s``) and the sleep span fitted over.

    The fitted gain is clipped below -1e-3 ms/s so a level where sleep has no effect still
    gives a valid (negative-gain) model.

    Parameters
    ----------
    plant : Any
        A plant with ``expected_latency_ms(sleep_s, mps_pct, batch)``.
    mps_levels : Sequence[float]
        The MPS levels, %.
    batch : int or None
        Batch size (None: the plant's).
    sleeps : Sequence[float] or None
        The sleeps to fit over, s (None: 0..1 s in 21 steps).

    Returns
    -------
    LatencyModelFamily
        One linear model per MPS level (and iteration time), and the sleep span.
    """
    s = np.linspace(0.0, 1.0, 21) if sleeps is None else np.asarray(sleeps, float)
    times = getattr(plant, "expected_iteration_s", None)
    pts = []
    for m in mps_levels:
        lat = np.asarray(plant.expected_latency_ms(s, float(m), batch), float)
        gain, offset = np.polyfit(s, lat, 1)
        t = float(times(float(m))) if callable(times) else None
        pts.append(OperatingPoint(float(m), LinearLatencyModel(min(float(gain), -1e-3),
                                                               float(offset)),
                                  iteration_s=t if t is not None and t > 0 else None))
    return LatencyModelFamily.from_points(pts, sleep_span_s=(float(s.min()), float(s.max())))


def _identify_backend(plant: SimulatedColocation) -> LatencyModelFamily:
    """The nominal model of a reference plant with some backend: at its green-context
    partitions when the share is one (a level between them runs on the one below), else at
    the MPS levels of :func:`identify_family`."""
    p = plant.params
    if p.share_backend == "green-context":
        return identify_family(plant, p.green_shares_pct)
    return identify_family(plant)


def build_controllers(names: Sequence[str], *, plant: Any, slo_ms: float,
                      scenario: Scenario | None, duration_s: float, period_s: float = 4.0,
                      family: LatencyModelFamily | None = None, initial_mps_pct: float = 80.0
                      ) -> list[Any]:
    """Instantiate the named controllers for one run from the registry
    :data:`harness.sim.baselines.BASELINES`.

    Parameters
    ----------
    names : Sequence[str]
        Display names (:func:`resolve_names` turns aliases into them).
    plant : Any
        A noise-free reference plant for the Oracle, the Open setting and the nominal model.
    slo_ms : float
        Latency SLO, ms.
    scenario : Scenario or None
        The run's load scenario.
    duration_s : float
        Length of the run, s.
    period_s : float
        Inner control period, s.
    family : LatencyModelFamily or None
        Nominal model (None: :func:`identify_family` on ``plant``).
    initial_mps_pct : float
        Training MPS the run starts at, %.

    Returns
    -------
    list
        One controller per name, in order.
    """
    fam = family if family is not None else identify_family(plant)
    ctx = B.BaselineContext(plant, slo_ms, scenario, duration_s, period_s, fam, initial_mps_pct,
                            identify=_identify_backend if isinstance(plant, SimulatedColocation)
                            else None)
    registry = {b.name: b for b in B.BASELINES}
    out: list[Any] = []
    for n in names:
        if n not in registry:
            raise ValueError(f"unknown controller {n!r}")
        out.append(registry[n].factory(ctx))
    return out


def controller_backend(name: str) -> str | None:
    """The spatial-share backend the named controller drives (None: the plant's own)."""
    return next((b.backend for b in B.BASELINES if b.name == name), None)


def steady_mask(rec: Records, *, warmup_s: float = 100.0, settle_periods: int = 2
                ) -> np.ndarray:
    """Periods that count as steady state: after ``warmup_s``, not restarting (training or
    inference), and not within ``settle_periods`` after a restart or an MPS change."""
    t = rec.col("t_start_s")
    bad = (rec.col("restarting") > 0) | (rec.col("inference_restarting") > 0)
    changed = np.r_[False, rec.col("mps_pct")[1:] != rec.col("mps_pct")[:-1]]
    bad = bad | changed
    after = np.zeros(len(rec), bool)
    left = 0
    for i, b in enumerate(bad):
        if b:
            left = settle_periods + 1
        after[i] = left > 0
        left = max(0, left - 1)
    return (t >= warmup_s) & ~after


def controller_metrics(rec: Records, slo_ms: float, *, tolerance: float = 0.05,
                       window: tuple[float, float] | None = None) -> dict[str, float]:
    """Per-run metrics: mean latency, % periods over ``(1 + tolerance)`` SLO, throughputs,
    MPS changes; ``window`` (start, end) restricts to periods starting inside it."""
    if window is not None:
        t = rec.col("t_start_s")
        rec = Records(r for r, ok in zip(rec, (t >= window[0]) & (t < window[1])) if ok)
    if not rec:
        return {"mean_latency_ms": math.nan, "pct_over": math.nan, "periods_over": 0,
                "inference_throughput": math.nan, "training_throughput": math.nan,
                "mps_changes": 0, "periods": 0}
    lat = rec.col("latency_ms")
    cnt = rec.col("count")
    have = np.isfinite(lat) & (cnt > 0)
    over = have & (lat > (1.0 + tolerance) * slo_ms)
    w = np.where(have, cnt, 0.0)
    mean_lat = float(np.sum(np.where(have, lat, 0.0) * w) / w.sum()) if w.sum() else math.nan
    return {
        "mean_latency_ms": mean_lat,
        "pct_over": 100.0 * float(over.sum()) / max(1, int(have.sum())),
        "periods_over": int(over.sum()),
        "inference_throughput": float(np.nanmean(rec.col("inference_throughput"))),
        "training_throughput": float(np.nanmean(rec.col("training_throughput"))),
        "mps_changes": int(np.sum(rec.col("mps_pct")[1:] != rec.col("mps_pct")[:-1])),
        "periods": len(rec),
    }


@dataclass
class ExperimentResult:
    """What an experiment returns: the tidy records, a per-controller (or per-point) summary,
    the files written, and metadata (seed, plant parameters ...).

    Parameters
    ----------
    name : str
        The experiment.
    records : Records
        One row per period (and controller).
    summary : list[dict]
        The summary rows.
    files : list[Path]
        Files written.
    meta : dict
        Metadata, as written to the meta JSON.
    """

    name: str
    records: Records
    summary: list[dict[str, Any]]
    files: list[Path] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def write_set(self, out: Path, columns: Sequence[str], title: str,
                  plot: Callable[[ExperimentResult, Path], Path], digits: int | None = None
                  ) -> None:
        """Write the standard set -- ``NAME.csv`` (records), ``NAME_summary.csv`` and ``.md``
        (``columns``), ``NAME_meta.json`` and ``NAME.png`` (``plot``) -- into ``out`` as one
        result set: it replaces the previous run's files as a whole (:func:`result_set`)."""
        from harness.results import result_set, write_csv, write_json, write_markdown_table

        n = self.name
        md_kw: dict[str, Any] = {"title": title} if digits is None else {"title": title,
                                                                          "digits": digits}
        with result_set(out):
            self.files += [write_csv(self.records, out / f"{n}.csv"),
                           write_csv(self.summary, out / f"{n}_summary.csv", columns),
                           write_markdown_table(self.summary, columns,
                                                out / f"{n}_summary.md", **md_kw),
                           write_json(self.meta, out / f"{n}_meta.json"),
                           plot(self, out / f"{n}.png")]

    def row(self, controller: str) -> dict[str, Any]:
        for r in self.summary:
            if r.get("controller") == controller:
                return r
        raise KeyError(controller)


ProgressHook = Callable[[int], None]
