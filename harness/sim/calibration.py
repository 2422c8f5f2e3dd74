"""How the simulated plant's constants are obtained: a least-squares fit of some
:class:`harness.sim.simulated.ColocationParams` fields to *facts* — a mean inference latency and,
where known, a training SM share at a static operating point.

A :class:`Fact` is ``(name, plant overrides, sleep s, training MPS %, latency ms, training
SM % or NaN, SM weight)``; :func:`fit_facts` fits the chosen fields (by default the GPU-sharing
constants and the training work per iteration) so that the plant's noise-free views
(``expected_latency_ms``, ``expected_sm_share``) match them, in relative terms.

The shipped constants come from the GPUColo paper's Fig. 4:
:func:`fit_fig4` fits ``saturation_per_sqrt_image``, ``interference_sqrt_image``,
``inference_weight``, ``contention_exponent``, ``timeslice_inference_share``,
``timeslice_train_occupancy`` and the emulator's ``train_work_s``, with the Fig 4 batch (5)
and the per-image costs fixed, to the six latencies and four of the six training-SM readings
(:data:`FIG4_FACTS`), plus a soft pull of the time-sliced iteration time towards the stated
~0.2 s. The two Sleep+MPS %smid readings (26.3 %, 2.89 %) get no weight: they fall 9x for a
4x change of sleep, which no duty-cycle model can follow.

Measured facts come from the per-period records the experiments write
(:mod:`harness.sim.facts`, re-exported here: :func:`facts_from_records`, steady periods
averaged per run and operating point);
:func:`calibrate` fits a preset to them and returns the document that ``gpucontrol calibrate``
(:mod:`harness.experiments.calibrate`) writes as calibration.json, which every experiment's
``--preset`` accepts (docs/simulated_plant.md).

>>> fit = fit_fig4()
>>> all(abs(r["latency_err_pct"]) < 5 for r in fit.rows)
True
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from harness.sim.facts import (
    RECORD_FILES,
    Fact,
    MeasuredFacts,
    RecordSource,
    facts_from_records,
    facts_from_source,
    find_records,
)
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


#: GPUColo paper, Fig. 4: (name, plant overrides, sleep s, training MPS %, latency ms, training
#: SM %,
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
    for fact in facts:
        if not (math.isfinite(fact.latency_ms) and fact.latency_ms > 0):
            raise ValueError(f"fact {fact.name!r}: latency_ms must be a number > 0, got "
                             f"{fact.latency_ms!r}")
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
        nudged: dict[str, Any] = {f: start[f] + h}
        moved = residuals_of(replace(base, **nudged)) - r0
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
        values: dict[str, Any] = dict(zip(names, map(float, x)))
        return replace(base, **values)

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
    """The GPUColo paper: the time-sliced training iteration takes about 0.2 s."""
    t = float(SimulatedColocation(replace(p, mps_enabled=False)).expected_iteration_s(100))
    return [0.3 * (t - 0.2) / 0.2]


def fit_fig4() -> FactFit:
    """Refit the sharing constants to Fig 4 (scipy least squares)."""
    return fit_facts(FIG4_FACTS, fig4_params(), fields=FIG4_FIT_FIELDS,
                     extra=_fig4_iteration_prior, label="paper")


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
