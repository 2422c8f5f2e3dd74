"""How the simulated plant's constants are obtained: a least-squares fit of some
:class:`harness.sim.simulated.ColocationParams` fields to *facts* — a mean inference latency and,
where known, a training SM share at a static operating point.

A :class:`Fact` is ``(name, plant overrides, sleep s, training MPS %, latency ms, training
SM % or NaN, SM weight)``; :func:`fit_facts` fits the chosen fields (by default the GPU-sharing
constants and the training work per iteration) so that the plant's noise-free views
(``expected_latency_ms``, ``expected_sm_share``) match them, in relative terms.

The shipped constants come from the seed-000 Fig 4 figures (ARCHITECTURE.md §6):
:func:`fit_fig4` fits ``saturation_per_sqrt_image``, ``interference_sqrt_image``,
``inference_weight``, ``contention_exponent``, ``timeslice_inference_share``,
``timeslice_train_occupancy`` and the emulator's ``train_work_s``, with the Fig 4 batch (5)
and the per-image costs fixed, to the six latencies and four of the six training-SM readings
(:data:`FIG4_FACTS`), plus a soft pull of the time-sliced iteration time towards the stated
~0.2 s. The two Sleep+MPS %smid readings (26.3 %, 2.89 %) get no weight: they fall 9x for a
4x change of sleep, which no duty-cycle model can follow.

Measured facts come from the per-period records the experiments write
(:func:`facts_from_records`: steady periods averaged per run and operating point);
:func:`calibrate` fits a preset to them and returns the document that ``gpucontrol calibrate``
(:mod:`harness.experiments.calibrate`) writes as calibration.json, which every experiment's
``--preset`` accepts (docs/simulated_plant.md).

>>> fit = fit_fig4()
>>> all(abs(r["latency_err_pct"]) < 5 for r in fit.rows)
True
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from harness.results import read_csv
from harness.sim.simulated import (
    CALIBRATION_KIND,
    PRESETS,
    ColocationParams,
    SimulatedColocation,
    base_preset_name,
    preset_overrides,
)

__all__ = ["CALIBRATE_FIELDS", "FIG4_FACTS", "FIG4_FIT_FIELDS", "FIT_BOUNDS", "RECORD_FILES",
           "Fact", "FactFit", "Fig4Fit", "MeasuredFacts", "RecordSource", "calibrate",
           "fact_rows", "facts_from_records", "facts_from_source", "fig4_rows", "find_records",
           "fit_facts", "fit_fig4"]


class Fact(NamedTuple):
    """One operating point with what was measured (or published) there."""

    name: str
    #: :class:`ColocationParams` overrides that hold at this point (``mps_enabled``, ``batch``...)
    overrides: Mapping[str, Any]
    sleep_s: float
    mps_pct: float
    latency_ms: float
    #: time-averaged training SM share in %, NaN when not measured
    sm_pct: float = math.nan
    #: weight of the SM share's relative error against the latency's (weight 1)
    sm_weight: float = 1.0


#: Seed 000 Fig 4: (name, plant overrides, sleep s, training MPS %, latency ms, training SM %,
#: SM weight)
FIG4_FACTS: tuple[Fact, ...] = (
    Fact("MPS 80/80", {}, 0.0, 80.0, 15.1, 38.15, 1.0),
    Fact("MPS 80/20", {}, 0.0, 20.0, 5.62, 1.128, 1.0),
    Fact("Sleep 0.2 s", {"mps_enabled": False}, 0.2, 100.0, 6.68, 32.8, 1.0),
    Fact("Sleep 0.8 s", {"mps_enabled": False}, 0.8, 100.0, 5.52, 15.8, 1.0),
    Fact("Sleep+MPS 0.2 s", {}, 0.2, 80.0, 7.95, 26.3, 0.0),
    Fact("Sleep+MPS 0.8 s", {}, 0.8, 80.0, 6.2, 2.89, 0.0),
)

FIG4_FIT_FIELDS = ("saturation_per_sqrt_image", "interference_sqrt_image", "inference_weight",
                   "contention_exponent", "train_work_s", "timeslice_inference_share",
                   "timeslice_train_occupancy")

#: Search bounds of the fields :func:`fit_facts` can fit.
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "saturation_per_sqrt_image": (0.01, 2.0),
    "interference_sqrt_image": (0.0, 100.0),
    "inference_weight": (0.05, 20.0),
    "contention_exponent": (0.5, 6.0),
    "train_work_s": (0.01, 1.0),
    "timeslice_inference_share": (0.2, 0.95),
    "timeslice_train_occupancy": (0.05, 1.0),
    "transfer_ms_fixed": (0.0, 100.0),
    "transfer_ms_per_image": (0.0, 10.0),
    "compute_ms_fixed": (0.0, 100.0),
    "compute_ms_per_image": (0.001, 100.0),
}

#: SM shares below this (%) count as this in the relative SM error (no division by ~0).
SM_FLOOR_PCT = 1.0


def fig4_params(**changes: Any) -> ColocationParams:
    return replace(ColocationParams(), **{**PRESETS["fig4"], **changes})


def model_values(facts: Sequence[Fact], params: ColocationParams
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The noise-free plant's latency (ms) and training SM share (%) at every fact."""
    lat = np.empty(len(facts))
    sm = np.empty(len(facts))
    groups: dict[tuple[tuple[str, Any], ...], list[int]] = {}
    for i, f in enumerate(facts):
        groups.setdefault(tuple(sorted(f.overrides.items())), []).append(i)
    for key, idx in groups.items():   # one plant per set of overrides, vectorised over points
        plant = SimulatedColocation(replace(params, **dict(key)))
        s = np.array([facts[i].sleep_s for i in idx], float)
        m = np.array([facts[i].mps_pct for i in idx], float)
        lat[idx] = plant.expected_latency_ms(s, m)
        sm[idx] = 100.0 * np.asarray(plant.expected_sm_share(s, m))
    return lat, sm


def fact_rows(facts: Sequence[Fact], params: ColocationParams, *, label: str = "measured"
              ) -> list[dict[str, Any]]:
    """The model's value for every fact next to the fact's own (``<label>_latency_ms`` ...)."""
    lat, sm = model_values(facts, params)
    rows = []
    for f, ml, ms in zip(facts, map(float, lat), map(float, sm)):
        rows.append({"case": f.name, "latency_ms": ml, f"{label}_latency_ms": f.latency_ms,
                     "latency_err_pct": 100 * (ml - f.latency_ms) / f.latency_ms,
                     "sm_pct": ms, f"{label}_sm_pct": f.sm_pct,
                     "sm_err_pct": 100 * (ms - f.sm_pct) / f.sm_pct if f.sm_pct else math.nan})
    return rows


def fig4_rows(params: ColocationParams | None = None) -> list[dict[str, Any]]:
    """The model's value for every Fig 4 fact, next to the paper's."""
    return fact_rows(FIG4_FACTS, params if params is not None else fig4_params(), label="paper")


@dataclass(frozen=True)
class FactFit:
    """What :func:`fit_facts` found: the fitted ``values`` and the per-fact ``rows`` of the
    fitted plant; ``start``: the base values; ``stderr``: each fitted value's standard error
    from the residuals (NaN without spare residuals); ``at_bound``: fields that ended on a
    search bound; ``undetermined``: requested fields no fact depends on (left at the base)."""

    values: dict[str, float]
    rows: list[dict[str, Any]]
    start: dict[str, float] = field(default_factory=dict)
    success: bool = True
    nfev: int = 0
    cost: float = math.nan
    message: str = ""
    at_bound: tuple[str, ...] = ()
    stderr: dict[str, float] = field(default_factory=dict)
    undetermined: tuple[str, ...] = ()


#: The Fig 4 fit's result type (the general one).
Fig4Fit = FactFit


def fit_facts(facts: Sequence[Fact], base: ColocationParams, *,
              fields: Sequence[str] = FIG4_FIT_FIELDS,
              bounds: Mapping[str, tuple[float, float]] | None = None,
              extra: Callable[[ColocationParams], Sequence[float]] | None = None,
              label: str = "measured") -> FactFit:
    """Fit ``fields`` of ``base`` to ``facts`` (scipy least squares, start at ``base``).

    Residuals: each fact's relative latency error, and its relative SM-share error times
    ``sm_weight`` (none where the SM share is NaN or the weight 0; shares below
    :data:`SM_FLOOR_PCT` % count as that much); ``extra(params)`` may add residuals (priors).
    ``bounds`` overrides :data:`FIT_BOUNDS` per field. Fields that no residual depends on at
    the start (e.g. the time-slicing constants when every fact ran under MPS) are not fitted
    and listed in ``undetermined``. Raises ValueError for an unknown field, an empty fact
    list, a fact with a latency that is not a positive number, or when no field matters.
    """
    names = tuple(fields)
    bnd = {**FIT_BOUNDS, **(bounds or {})}
    unknown = [f for f in names if f not in bnd]
    if not names or unknown:
        raise ValueError(f"fields must be a non-empty subset of {sorted(bnd)}, got "
                         f"{list(names)!r}")
    facts = list(facts)
    if not facts:
        raise ValueError("facts must not be empty")
    for f in facts:
        if not (math.isfinite(f.latency_ms) and f.latency_ms > 0):
            raise ValueError(f"fact {f.name!r}: latency_ms must be a number > 0, got "
                             f"{f.latency_ms!r}")
    from scipy.optimize import least_squares

    lat_meas = np.array([f.latency_ms for f in facts], float)
    sm_meas = np.array([f.sm_pct for f in facts], float)
    sm_w = np.array([f.sm_weight if math.isfinite(f.sm_pct) else 0.0 for f in facts], float)
    sm_den = np.maximum(np.where(np.isfinite(sm_meas), sm_meas, 1.0), SM_FLOOR_PCT)

    def residuals_of(p: ColocationParams) -> np.ndarray:
        lat, sm = model_values(facts, p)
        res = np.empty(2 * len(facts))
        res[0::2] = (lat - lat_meas) / lat_meas
        res[1::2] = np.where(sm_w > 0, sm_w * (sm - sm_meas) / sm_den, 0.0)
        if extra is not None:
            res = np.concatenate([res, np.asarray(extra(p), float)])
        return res

    start = {f: float(getattr(base, f)) for f in names}
    r0 = residuals_of(base)
    undetermined = []
    for f in names:   # does any residual move with this field?
        h = 1e-4 * max(abs(start[f]), 1e-2)
        moved = residuals_of(replace(base, **{f: start[f] + h})) - r0
        if not np.any(np.abs(moved) > 1e-12):
            undetermined.append(f)
    names = tuple(f for f in names if f not in undetermined)
    if not names:
        raise ValueError(f"none of the fields {list(start)} changes the model at the facts; "
                         f"fit other fields or add facts")
    lo = np.array([bnd[f][0] for f in names], float)
    hi = np.array([bnd[f][1] for f in names], float)
    x0 = np.clip(np.array([start[f] for f in names]), lo + 1e-9 * (hi - lo),
                 hi - 1e-9 * (hi - lo))

    def params_at(x: np.ndarray) -> ColocationParams:
        return replace(base, **dict(zip(names, map(float, x))))

    sol = least_squares(lambda x: residuals_of(params_at(x)), x0, bounds=(lo, hi))
    values = dict(zip(names, map(float, sol.x)))
    tol = 1e-6 * (hi - lo)
    at_bound = tuple(n for n, v, a, b, t in zip(names, sol.x, lo, hi, tol)
                     if v <= a + t or v >= b - t)
    return FactFit(values, fact_rows(facts, params_at(sol.x), label=label), start,
                   bool(sol.success), int(sol.nfev), float(sol.cost), str(sol.message),
                   at_bound, _stderr(sol, names), tuple(undetermined))


def _stderr(sol: Any, names: Sequence[str]) -> dict[str, float]:
    """Standard errors of the fitted values: ``sqrt(diag(pinv(J'J)) * rss / dof)`` over the
    residuals that carry information (rows of the Jacobian that are not all zero)."""
    jac = np.asarray(sol.jac, float)
    live = np.any(jac != 0.0, axis=1)
    dof = int(live.sum()) - len(names)
    if dof <= 0:
        return dict.fromkeys(names, math.nan)
    rss = float(np.sum(np.asarray(sol.fun, float)[live] ** 2))
    cov = np.linalg.pinv(jac[live].T @ jac[live]) * rss / dof
    return {n: float(math.sqrt(max(v, 0.0))) for n, v in zip(names, np.diag(cov))}


def _fig4_iteration_prior(p: ColocationParams) -> list[float]:
    """Seed 000: the time-sliced training iteration takes about 0.2 s."""
    t = float(SimulatedColocation(replace(p, mps_enabled=False)).expected_iteration_s(100))
    return [0.3 * (t - 0.2) / 0.2]


def fit_fig4() -> FactFit:
    """Refit the sharing constants to Fig 4 (scipy least squares)."""
    return fit_facts(FIG4_FACTS, fig4_params(), fields=FIG4_FIT_FIELDS,
                     extra=_fig4_iteration_prior, label="paper")


# ---- facts from measured experiment records -----------------------------------------------------
#: The per-period CSV each experiment writes next to its ``<experiment>_meta.json``.
RECORD_FILES: dict[str, str] = {"knobs": "knobs.csv", "identify": "identify_periods.csv",
                                "burst": "burst.csv", "slo_sweep": "slo_sweep.csv"}


@dataclass(frozen=True)
class RecordSource:
    """One experiment's per-period records: the CSV, its meta JSON (``{}`` if none) and rows."""

    csv: Path
    meta: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def experiment(self) -> str:
        return str(self.meta.get("experiment") or self.csv.stem)


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"source {str(path)!r}: not a readable JSON file ({exc})") from None
    return meta if isinstance(meta, dict) else {}


def find_records(source: str | os.PathLike[str]) -> list[RecordSource]:
    """The experiment records under ``source``: a results folder (``<out>`` or
    ``<out>/<experiment>``; every ``*_meta.json`` in it or one level below whose per-period CSV,
    :data:`RECORD_FILES`, is present) or one per-period CSV (with the ``*_meta.json`` beside
    it, if any)."""
    p = Path(source)
    if not p.exists():
        raise ValueError(f"source {str(source)!r}: no such file or folder")
    if p.is_file():
        if p.suffix.lower() != ".csv":
            raise ValueError(f"source {str(source)!r}: expected a results folder or a "
                             f"per-period CSV ({', '.join(RECORD_FILES.values())})")
        meta: dict[str, Any] = {}
        for cand in (p.with_name(f"{p.stem}_meta.json"),
                     p.with_name(f"{p.stem.split('_')[0]}_meta.json")):
            if cand.is_file():
                meta = _read_meta(cand)
                break
        return [RecordSource(p, meta, read_csv(p))]
    out = []
    for m in sorted(p.glob("*_meta.json")) + sorted(p.glob("*/*_meta.json")):
        meta = _read_meta(m)
        name = RECORD_FILES.get(str(meta.get("experiment")))
        if name and (m.parent / name).is_file():
            out.append(RecordSource(m.parent / name, meta, read_csv(m.parent / name)))
    if not out:
        raise ValueError(
            f"source {str(source)!r}: no experiment records found (expected an "
            f"<experiment>_meta.json with its per-period CSV — "
            f"{', '.join(RECORD_FILES.values())} — in the folder or one level below)")
    return out


def _num(r: Mapping[str, Any], key: str) -> float:
    v = r.get(key, math.nan)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _key(x: float, digits: int) -> float | None:
    """A grouping key: rounded, None for NaN (NaN never equals itself)."""
    return round(x, digits) if math.isfinite(x) else None


def _label(r: Mapping[str, Any]) -> str:
    for key in ("run", "controller"):
        v = r.get(key)
        if isinstance(v, str) and v:
            return v
    return ""


def _split_runs(rows: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Consecutive rows of one run: a new run starts where the run/controller label changes
    or the period index (``period`` or ``k``) does not increase."""
    runs: list[list[Mapping[str, Any]]] = []
    prev_label, prev_idx = None, math.nan
    for r in rows:
        lab = _label(r)
        idx = _num(r, "period") if "period" in r else _num(r, "k")
        if not runs or lab != prev_label or (math.isfinite(idx) and math.isfinite(prev_idx)
                                             and idx <= prev_idx):
            runs.append([])
        runs[-1].append(r)
        prev_label, prev_idx = lab, idx
    return runs


def _source_defaults(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Batch and inference MPS of a source whose CSV does not say (from its meta)."""
    out: dict[str, Any] = {}
    pp = meta.get("plant_params") if meta.get("plant", "sim") == "sim" else None
    if isinstance(pp, Mapping):
        out.update({k: pp[k] for k in ("batch", "inference_mps_pct") if k in pp})
    if "preset" in meta:
        try:
            pre = preset_overrides(str(meta["preset"]))
        except ValueError:
            pre = {}
        for k in ("batch", "inference_mps_pct"):
            if k not in out and k in pre:
                out[k] = pre[k]
    return out


def _mps_enabled(meta: Mapping[str, Any], run: str) -> bool:
    """Whether a run shared the GPU through MPS, from the experiment's meta (default True)."""
    runs = meta.get("runs")
    r = runs.get(run) if isinstance(runs, Mapping) else None
    if isinstance(r, Mapping):
        if r.get("mps_enabled") is not None:
            return bool(r["mps_enabled"])
        over = r.get("overrides")
        if isinstance(over, Mapping) and "mps_enabled" in over:
            return bool(over["mps_enabled"])
    if meta.get("mps_enabled") is not None:
        return bool(meta["mps_enabled"])
    pp = meta.get("plant_params")
    if meta.get("plant", "sim") == "sim" and isinstance(pp, Mapping) and "mps_enabled" in pp:
        return bool(pp["mps_enabled"])
    return True


@dataclass(frozen=True)
class MeasuredFacts:
    """Facts from records: ``facts``, per fact ``details`` (source, run, periods, spread) and
    per source ``sources`` (path, experiment, plant, preset and how many periods were used or
    why not)."""

    facts: list[Fact]
    details: list[dict[str, Any]]
    sources: list[dict[str, Any]]


def _check_options(settle_periods: Any, sleep_bin_s: Any, min_periods: Any,
                   sm_weight: Any) -> None:
    def integer(name: str, v: Any, lo: int) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")

    def number(name: str, v: Any, lo: float, strict: bool) -> None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or (v <= lo if strict else v < lo):
            raise ValueError(f"{name} must be a number {'>' if strict else '>='} {lo:g}, "
                             f"got {v!r}")

    integer("settle_periods", settle_periods, 0)
    number("sleep_bin_s", sleep_bin_s, 0.0, True)
    integer("min_periods", min_periods, 1)
    number("sm_weight", sm_weight, 0.0, False)


def facts_from_source(src: RecordSource, *, label: str | None = None, settle_periods: int = 2,
                      sleep_bin_s: float = 0.1, min_periods: int = 3, sm_weight: float = 1.0
                      ) -> tuple[list[Fact], list[dict[str, Any]], dict[str, Any]]:
    """Facts from one experiment's per-period records.

    A period is steady when it has a latency, neither process was restarting, and it is not
    among the first ``settle_periods`` periods of a run, of an operating point or after a
    restart. Steady periods are grouped per run and operating point: training MPS, inference
    MPS, batch, whether MPS was on (from the meta JSON: the knobs "Sleep" run is time-sliced)
    and the sleep. In a run whose sleep changes nearly every period (the white-noise
    excitation of ``identify``, a closed loop) a sleep change is not a knob change and the
    sleep is binned by ``sleep_bin_s``. Each group of at least ``min_periods`` periods is a
    fact: mean latency (weighted by the batches counted, where known), mean sleep and mean
    training SM share (NaN when not recorded).

    Returns the facts, per-fact details and a per-source account of the periods.
    """
    _check_options(settle_periods, sleep_bin_s, min_periods, sm_weight)
    rows = src.rows
    lab = src.experiment if label is None else label
    cols = set().union(*(r.keys() for r in rows)) if rows else set()
    missing = [c for c in ("latency_ms", "sleep_s", "mps_pct") if c not in cols]
    if rows and missing:
        raise ValueError(f"source {str(src.csv)!r}: column(s) {', '.join(missing)} missing; "
                         f"per-period records need latency_ms, sleep_s and mps_pct")
    defaults = _source_defaults(src.meta)
    count = {"periods": len(rows), "restarting": 0, "settling": 0, "no_latency": 0,
             "thin": 0, "used": 0}
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    batches: set[int] = set()
    for run in _split_runs(rows):
        name = _label(run[0])
        mps_on = _mps_enabled(src.meta, name)
        sleeps = np.array([_num(r, "sleep_s") for r in run])
        moves = int(np.sum(np.abs(np.diff(sleeps)) > 1e-9)) if len(run) > 1 else 0
        excited = len(run) >= 3 and moves > 0.5 * (len(run) - 1)
        left, prev = 0, None
        for i, r in enumerate(run):
            s, m = _num(r, "sleep_s"), _num(r, "mps_pct")
            b = _num(r, "batch")
            b = float(defaults["batch"]) if not math.isfinite(b) and "batch" in defaults else b
            ci = _num(r, "inference_mps_pct")
            if not math.isfinite(ci) and defaults.get("inference_mps_pct") is not None:
                ci = float(defaults["inference_mps_pct"])
            knobs = (_key(m, 6), _key(ci, 6), _key(b, 0)) + (() if excited else (_key(s, 6),))
            restarting = _num(r, "restarting") > 0 or _num(r, "inference_restarting") > 0
            if restarting:
                left = settle_periods + 1
            elif i == 0 or knobs != prev:
                left = max(left, settle_periods)
            prev = knobs
            steady = left == 0
            left = max(0, left - 1)
            if not steady:
                count["restarting" if restarting else "settling"] += 1
                continue
            lat, n = _num(r, "latency_ms"), _num(r, "count")
            if not (math.isfinite(lat) and lat > 0 and math.isfinite(s) and math.isfinite(m)
                    and n != 0):
                count["no_latency"] += 1
                continue
            sk = round(s / sleep_bin_s) if excited else round(s, 4)
            key = (name, mps_on, _key(b, 0), _key(ci, 3) if mps_on else None, round(m, 3), sk)
            groups.setdefault(key, []).append(r)
            if math.isfinite(b):
                batches.add(int(b))
    facts: list[Fact] = []
    details: list[dict[str, Any]] = []
    order = {k: i for i, k in enumerate(dict.fromkeys(k[0] for k in groups))}

    def place(item: tuple[tuple[Any, ...], list[Mapping[str, Any]]]) -> tuple[Any, ...]:
        (name, mps_on, b, _ci, m, sk), _rs = item
        return order[name], not mps_on, -1 if b is None else b, m, sk

    for (name, mps_on, b, ci, m, _sk), rs in sorted(groups.items(), key=place):
        if len(rs) < min_periods:
            count["thin"] += len(rs)
            continue
        count["used"] += len(rs)
        lat = np.array([_num(r, "latency_ms") for r in rs])
        w = np.array([_num(r, "count") for r in rs])
        mean_lat = (float(np.sum(lat * w) / np.sum(w))
                    if np.all(np.isfinite(w)) and np.sum(w) > 0 else float(np.mean(lat)))
        s = np.array([_num(r, "sleep_s") for r in rs])
        sm = 100.0 * np.array([_num(r, "training_sm_share") for r in rs])
        sm = sm[np.isfinite(sm)]
        over: dict[str, Any] = {"mps_enabled": bool(mps_on)}
        if b is not None:
            over["batch"] = int(b)
        if ci is not None:
            over["inference_mps_pct"] = float(ci)
        text = (f"{lab}{'/' + name if name else ''}: sleep {float(s.mean()):.2f} s, "
                f"MPS {m:g} %" + ("" if mps_on else " (no MPS)")
                + (f", batch {int(b)}" if len(batches) > 1 and b is not None else ""))
        facts.append(Fact(text, over, float(s.mean()), float(m), mean_lat,
                          float(sm.mean()) if sm.size else math.nan, float(sm_weight)))
        details.append({"source": str(src.csv), "run": name, "periods": len(rs),
                        "latency_sd_ms": float(np.std(lat, ddof=1)) if len(rs) > 1 else math.nan,
                        "sleep_min_s": float(s.min()), "sleep_max_s": float(s.max()),
                        "sm_periods": int(sm.size)})
    if not facts:
        raise ValueError(
            f"source {str(src.csv)!r}: no usable periods ({count['periods']} read: "
            f"{count['restarting']} restarting or just after, {count['settling']} within "
            f"settle_periods={settle_periods} of a run start or knob change, "
            f"{count['no_latency']} without a latency, {count['thin']} in operating points with "
            f"fewer than min_periods={min_periods}); lower settle_periods (an integer >= 0) or "
            f"min_periods (an integer >= 1), or record longer runs")
    info = {"path": str(src.csv), "experiment": src.experiment,
            "plant": src.meta.get("plant"), "preset": src.meta.get("preset"),
            "seed": src.meta.get("seed"), "facts": len(facts), **count}
    return facts, details, info


def facts_from_records(sources: Sequence[str | os.PathLike[str]], **options: Any
                       ) -> MeasuredFacts:
    """Facts from every experiment record under ``sources`` (folders or CSVs,
    :func:`find_records`); ``options`` go to :func:`facts_from_source`."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    if not sources:
        raise ValueError("sources must name at least one results folder or CSV")
    found = [s for src in sources for s in find_records(src)]
    seen: dict[str, int] = {}
    facts: list[Fact] = []
    details: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []
    for src in found:
        seen[src.experiment] = seen.get(src.experiment, 0) + 1
        lab = src.experiment + (f"#{seen[src.experiment]}" if seen[src.experiment] > 1 else "")
        f, d, info = facts_from_source(src, label=lab, **options)
        facts += f
        details += d
        infos.append(info)
    return MeasuredFacts(facts, details, infos)


# ---- calibrating a preset from records ----------------------------------------------------------
#: Fields ``gpucontrol calibrate`` fits unless told otherwise: the Fig 4 set and the per-image
#: compute cost, which differs most between GPUs.
CALIBRATE_FIELDS = (*FIG4_FIT_FIELDS, "compute_ms_per_image")


def _rms(x: Sequence[float]) -> float:
    a = np.asarray([v for v in x if math.isfinite(v)], float)
    return float(np.sqrt(np.mean(a ** 2))) if a.size else math.nan


def _max_abs(x: Sequence[float]) -> float:
    a = np.asarray([abs(v) for v in x if math.isfinite(v)], float)
    return float(a.max()) if a.size else math.nan


def calibrate(sources: Sequence[str | os.PathLike[str]], preset: str | os.PathLike[str], *,
              fields: Sequence[str] = CALIBRATE_FIELDS, settle_periods: int = 2,
              sleep_bin_s: float = 0.1, min_periods: int = 3, sm_weight: float = 1.0
              ) -> dict[str, Any]:
    """Fit ``fields`` of ``preset`` (``"fig4"``, ``"fig8"`` or an earlier calibration file) to
    the facts in the experiment records under ``sources`` (:func:`facts_from_records`; the
    other options are :func:`facts_from_source`'s). Returns the calibration document that
    ``gpucontrol calibrate`` writes as calibration.json and that ``--preset`` accepts: the base
    preset, the ``overrides`` to apply on it, the fit, the sources and, per fact, the measured
    value next to the base preset's and the calibrated model's.
    """
    start_over = preset_overrides(preset)
    base_name = base_preset_name(preset)
    names = tuple(fields)
    unknown = [f for f in names if f not in FIT_BOUNDS]
    if not names or unknown:
        raise ValueError(f"fields must be a non-empty subset of {sorted(FIT_BOUNDS)}, got "
                         f"{list(names)!r}")
    options = {"settle_periods": settle_periods, "sleep_bin_s": sleep_bin_s,
               "min_periods": min_periods, "sm_weight": sm_weight}
    mf = facts_from_records(sources, **options)
    base = replace(ColocationParams(), **start_over)
    fit = fit_facts(mf.facts, base, fields=names)
    before = fact_rows(mf.facts, base)
    over = {k: v for k, v in start_over.items() if PRESETS[base_name].get(k, None) != v}
    over.update(fit.values)
    facts = []
    for f, d, b, a in zip(mf.facts, mf.details, before, fit.rows):
        facts.append({
            "case": f.name, "overrides": dict(f.overrides), "sleep_s": f.sleep_s,
            "mps_pct": f.mps_pct, "periods": d["periods"], "run": d["run"],
            "source": d["source"], "latency_sd_ms": d["latency_sd_ms"],
            "measured_latency_ms": f.latency_ms, "base_latency_ms": b["latency_ms"],
            "base_latency_err_pct": b["latency_err_pct"], "latency_ms": a["latency_ms"],
            "latency_err_pct": a["latency_err_pct"], "measured_sm_pct": f.sm_pct,
            "base_sm_pct": b["sm_pct"], "base_sm_err_pct": b["sm_err_pct"],
            "sm_pct": a["sm_pct"], "sm_err_pct": a["sm_err_pct"], "sm_weight": f.sm_weight})
    fitted = {n: {"value": v, "start": fit.start[n], "stderr": fit.stderr.get(n, math.nan),
                  "change_pct": 100.0 * (v / fit.start[n] - 1.0) if fit.start[n] else math.nan,
                  "at_bound": n in fit.at_bound, "bounds": list(FIT_BOUNDS[n])}
              for n, v in fit.values.items()}
    n_res = len(mf.facts) + sum(1 for f in mf.facts
                                if math.isfinite(f.sm_pct) and f.sm_weight > 0)
    return {
        "kind": CALIBRATION_KIND, "version": 1, "base_preset": base_name,
        "started_from": str(preset), "overrides": over, "fitted": fitted,
        "undetermined": list(fit.undetermined),
        "fit": {"success": fit.success, "nfev": fit.nfev, "cost": fit.cost,
                "message": fit.message, "facts": len(mf.facts), "residuals": n_res,
                "fields": len(fit.values)},
        "summary": {
            "latency_err_pct_rms_base": _rms([r["base_latency_err_pct"] for r in facts]),
            "latency_err_pct_rms": _rms([r["latency_err_pct"] for r in facts]),
            "latency_err_pct_max_base": _max_abs([r["base_latency_err_pct"] for r in facts]),
            "latency_err_pct_max": _max_abs([r["latency_err_pct"] for r in facts]),
            "sm_err_pct_rms_base": _rms([r["base_sm_err_pct"] for r in facts]),
            "sm_err_pct_rms": _rms([r["sm_err_pct"] for r in facts])},
        "options": {"fields": list(names), **options},
        "sources": mf.sources,
        "facts": facts,
    }
