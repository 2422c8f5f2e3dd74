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
           "default_fields", "fact_rows", "facts_from_records", "facts_from_source",
           "fig4_rows", "find_records", "fit_facts", "fit_fig4"]


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
    "inference_weight": (0.001, 20.0),
    "contention_exponent": (0.5, 6.0),
    "train_work_s": (0.01, 1.0),
    "timeslice_inference_share": (0.2, 0.95),
    "timeslice_train_occupancy": (0.05, 1.0),
    "transfer_ms_fixed": (0.0, 100.0),
    "transfer_ms_per_image": (0.0, 10.0),
    "compute_ms_fixed": (0.0, 100.0),
    "compute_ms_per_image": (0.001, 100.0),
    "train_interference": (0.0, 20.0),
    "partition_interference": (0.0, 5.0),
    "timeslice_switch_loss": (0.0, 0.5),
}

#: SM shares below this (%) count as this in the relative SM error (no division by ~0).
SM_FLOOR_PCT = 1.0


def fig4_params(**changes: Any) -> ColocationParams:
    return replace(ColocationParams(), **{**PRESETS["fig4"], **changes})


def model_values(facts: Sequence[Fact], params: ColocationParams
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The noise-free plant's latency (ms), training SM share (%) and training rate
    (iterations/s) at every fact (an infinite sleep: the inference alone; no latency: the
    training alone)."""
    lat = np.empty(len(facts))
    sm = np.empty(len(facts))
    its = np.empty(len(facts))
    groups: dict[tuple[tuple[str, Any], ...], list[int]] = {}
    for i, f in enumerate(facts):
        groups.setdefault(tuple(sorted(f.overrides.items())), []).append(i)
    for key, all_idx in groups.items():   # one plant per set of overrides, vectorised
        plant = SimulatedColocation(replace(params, **dict(key)))
        p = plant.params
        alone = [i for i in all_idx if math.isinf(facts[i].sleep_s)]   # no training at all
        lat[alone] = p.idle_latency_ms(p.batch, plant.inference_mps_pct)
        sm[alone], its[alone] = 0.0, math.nan
        solo = [i for i in all_idx if math.isnan(facts[i].latency_ms)]  # no inference
        m = np.array([facts[i].mps_pct for i in solo], float)
        its[solo] = p.train_rate(m, 100.0, inference_running=False) / p.train_work_s
        lat[solo], sm[solo] = math.nan, 100.0 * p.sm_fraction(m)
        idx = [i for i in all_idx if i not in alone and i not in solo]
        s = np.array([facts[i].sleep_s for i in idx], float)
        m = np.array([facts[i].mps_pct for i in idx], float)
        lat[idx] = plant.expected_latency_ms(s, m)
        sm[idx] = 100.0 * np.asarray(plant.expected_sm_share(s, m))
        its[idx] = plant.expected_training_throughput(s, m)
    return lat, sm, its


def _err_pct(model: float, measured: float) -> float:
    return 100 * (model - measured) / measured if measured else math.nan


def fact_rows(facts: Sequence[Fact], params: ColocationParams, *, label: str = "measured"
              ) -> list[dict[str, Any]]:
    """The model's value for every fact next to the fact's own (``<label>_latency_ms`` ...)."""
    lat, sm, its = model_values(facts, params)
    rows = []
    for f, ml, ms, mi in zip(facts, map(float, lat), map(float, sm), map(float, its)):
        rows.append({"case": f.name, "latency_ms": ml, f"{label}_latency_ms": f.latency_ms,
                     "latency_err_pct": _err_pct(ml, f.latency_ms),
                     "sm_pct": ms, f"{label}_sm_pct": f.sm_pct,
                     "sm_err_pct": _err_pct(ms, f.sm_pct),
                     "its": mi, f"{label}_its": f.its, "its_err_pct": _err_pct(mi, f.its)})
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

    Residuals: each fact's relative latency error, its relative SM-share error times
    ``sm_weight`` (none where the SM share is NaN or the weight 0; shares below
    :data:`SM_FLOOR_PCT` % count as that much) and its relative training-rate error times
    ``its_weight`` (none where the rate is NaN or the weight 0); ``extra(params)`` may add
    residuals (priors).
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
        alone = math.isnan(fact.latency_ms) and math.isfinite(fact.its) and fact.its > 0
        if not (alone or (math.isfinite(fact.latency_ms) and fact.latency_ms > 0)):
            raise ValueError(f"fact {fact.name!r}: latency_ms must be a number > 0 (or NaN "
                             f"for the training alone, with its > 0), got "
                             f"{fact.latency_ms!r}")
    from scipy.optimize import least_squares

    lat_meas = np.array([f.latency_ms for f in facts], float)
    lat_ok = np.isfinite(lat_meas)
    lat_den = np.where(lat_ok, lat_meas, 1.0)
    sm_meas = np.array([f.sm_pct for f in facts], float)
    sm_w = np.array([f.sm_weight if math.isfinite(f.sm_pct) else 0.0 for f in facts], float)
    sm_den = np.maximum(np.where(np.isfinite(sm_meas), sm_meas, 1.0), SM_FLOOR_PCT)
    its_meas = np.array([f.its for f in facts], float)
    its_ok = np.isfinite(its_meas) & (its_meas > 0)
    its_w = np.array([f.its_weight for f in facts], float) * its_ok
    its_den = np.where(its_ok, its_meas, 1.0)

    def residuals_of(p: ColocationParams) -> np.ndarray:
        lat, sm, its = model_values(facts, p)
        res = np.empty(3 * len(facts))
        res[0::3] = np.where(lat_ok, (lat - lat_den) / lat_den, 0.0)
        res[1::3] = np.where(sm_w > 0, sm_w * (sm - sm_meas) / sm_den, 0.0)
        res[2::3] = np.where(its_w > 0, its_w * (its - its_den) / its_den, 0.0)
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

    def residuals_at(x: np.ndarray) -> np.ndarray:
        try:
            p = params_at(x)
        except ValueError:   # a combination the plant refuses (e.g. no time left to train)
            return np.full(r0.size, 1e3)
        return residuals_of(p)

    sol = least_squares(residuals_at, x0, bounds=(lo, hi))
    values = dict(zip(names, map(float, sol.x)))
    tol = 1e-6 * (hi - lo)
    at_bound = tuple(n for n, v, a, b, t in zip(names, sol.x, lo, hi, tol)
                     if v <= a + t or v >= b - t)
    return FactFit(values, fact_rows(facts, params_at(sol.x), label=label), start,
                   bool(sol.success), int(sol.nfev), float(sol.cost), str(sol.message),
                   at_bound, _stderr(sol, names), tuple(undetermined))


def _stderr(sol: Any, names: Sequence[str]) -> dict[str, float]:
    """Standard errors of the fitted values: ``sqrt(diag(pinv(J'J)) * rss / dof)`` over the
    residuals that carry information (rows of the Jacobian that are not all zero); infinite
    for a value no residual depends on at the solution (a zero column: the pseudo-inverse
    would report 0, a perfectly pinned value, for one the data say nothing about)."""
    jac = np.asarray(sol.jac, float)
    live = np.any(jac != 0.0, axis=1)
    dof = int(live.sum()) - len(names)
    if dof <= 0:
        return dict.fromkeys(names, math.nan)
    rss = float(np.sum(np.asarray(sol.fun, float)[live] ** 2))
    cov = np.linalg.pinv(jac[live].T @ jac[live]) * rss / dof
    dead = ~np.any(jac[live] != 0.0, axis=0)
    return {n: math.inf if d else float(math.sqrt(max(v, 0.0)))
            for n, v, d in zip(names, np.diag(cov), dead)}


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
#: compute cost, which differs most between GPUs; :func:`default_fields` adds the laws that
#: only some records pin.
CALIBRATE_FIELDS = (*FIG4_FIT_FIELDS, "compute_ms_per_image")


def default_fields(facts: Sequence[Fact]) -> tuple[str, ...]:
    """:data:`CALIBRATE_FIELDS`, plus what the facts can pin beyond them: with measured
    training rates, the training's slow-down by the inference (``train_interference``) and
    the time lost to context switches (``timeslice_switch_loss``); with green-context facts,
    how much pinning cuts the interference (``partition_interference``); with facts at more
    than one batch size, the fixed per-batch cost (``compute_ms_fixed``)."""
    extra: list[str] = []
    if any(math.isfinite(f.its) and f.its_weight > 0 for f in facts):
        extra += ["train_interference", "timeslice_switch_loss"]
    if any(f.overrides.get("share_backend") == "green-context" for f in facts):
        extra.append("partition_interference")
    if len({f.overrides.get("batch") for f in facts}) > 1:
        extra.append("compute_ms_fixed")
    return (*CALIBRATE_FIELDS, *extra)


def _rms(x: Sequence[float]) -> float:
    a = np.asarray([v for v in x if math.isfinite(v)], float)
    return float(np.sqrt(np.mean(a ** 2))) if a.size else math.nan


def _max_abs(x: Sequence[float]) -> float:
    a = np.asarray([abs(v) for v in x if math.isfinite(v)], float)
    return float(a.max()) if a.size else math.nan


def calibrate(sources: Sequence[str | os.PathLike[str]], preset: str | os.PathLike[str], *,
              fields: Sequence[str] | None = None, settle_periods: int = 2,
              sleep_bin_s: float = 0.1, min_periods: int = 3, sm_weight: float = 1.0,
              its_weight: float = 1.0, check: Sequence[str | os.PathLike[str]] = ()
              ) -> dict[str, Any]:
    """Fit ``fields`` of ``preset`` (``"fig4"``, ``"fig8"``, ``"h100"`` or an earlier
    calibration file; None: :func:`default_fields`) to the facts in the experiment records
    under ``sources`` (:func:`facts_from_records`; the other options are
    :func:`facts_from_source`'s). The set-up the records state (the device's SM count and
    partition granularity, the training kernel's blocks, the resize delay and downtime:
    ``MeasuredFacts.setup``) is applied to the preset first. Returns the calibration document
    that ``gpucontrol calibrate`` writes as calibration.json and that ``--preset`` accepts: the
    base preset, the ``overrides`` to apply on it, the fit with standard errors, the sources
    and, per fact, the measured value next to the base preset's and the calibrated model's.
    The records under ``check`` are compared with both models but not fitted (``"fitted":
    false`` in their facts; their errors summarised apart, ``check_summary``): a regime the
    physics does not describe, or held-out data.
    """
    start_over = preset_overrides(preset)
    base_name = base_preset_name(preset)
    options = {"settle_periods": settle_periods, "sleep_bin_s": sleep_bin_s,
               "min_periods": min_periods, "sm_weight": sm_weight, "its_weight": its_weight}
    mf = facts_from_records(sources, **options)
    names = default_fields(mf.facts) if fields is None else tuple(fields)
    unknown = [f for f in names if f not in FIT_BOUNDS]
    if not names or unknown:
        raise ValueError(f"fields must be a non-empty subset of {sorted(FIT_BOUNDS)}, got "
                         f"{list(names)!r}")
    setup = {k: v["value"] for k, v in mf.setup.items()}
    base = replace(ColocationParams(), **{**start_over, **setup})
    fit = fit_facts(mf.facts, base, fields=names)
    before = fact_rows(mf.facts, base)
    over = {k: v for k, v in {**start_over, **setup}.items()
            if PRESETS[base_name].get(k, None) != v}
    over.update(fit.values)
    facts = [_fact_entry(f, d, b, a) for f, d, b, a in zip(mf.facts, mf.details, before,
                                                            fit.rows)]
    checked: list[dict[str, Any]] = []
    if check:
        cf = facts_from_records(check, **options)
        values: dict[str, Any] = dict(fit.values)
        fitted_params = replace(base, **values)
        checked = [{**_fact_entry(f, d, b, a), "fitted": False} for f, d, b, a in zip(
            cf.facts, cf.details, fact_rows(cf.facts, base), fact_rows(cf.facts, fitted_params))]
        mf.sources.extend({**x, "checked": True} for x in cf.sources)
    fitted = {n: {"value": v, "start": fit.start[n], "stderr": fit.stderr.get(n, math.nan),
                  "change_pct": 100.0 * (v / fit.start[n] - 1.0) if fit.start[n] else math.nan,
                  "at_bound": n in fit.at_bound, "bounds": list(FIT_BOUNDS[n])}
              for n, v in fit.values.items()}
    n_res = sum(1 + (math.isfinite(f.sm_pct) and f.sm_weight > 0)
                + (math.isfinite(f.its) and f.its_weight > 0) for f in mf.facts)
    return {
        "kind": CALIBRATION_KIND, "version": 1, "base_preset": base_name,
        "started_from": str(preset), "overrides": over, "fitted": fitted,
        "undetermined": list(fit.undetermined), "setup": mf.setup,
        "fit": {"success": fit.success, "nfev": fit.nfev, "cost": fit.cost,
                "message": fit.message, "facts": len(mf.facts), "residuals": int(n_res),
                "fields": len(fit.values)},
        "summary": _summary(facts),
        **({"check_summary": _summary(checked)} if checked else {}),
        "options": {"fields": list(names), **options, "check": [str(c) for c in check]},
        "sources": mf.sources,
        "facts": facts + checked,
    }


def _fact_entry(f: Fact, d: Mapping[str, Any], b: Mapping[str, Any], a: Mapping[str, Any]
                ) -> dict[str, Any]:
    """One fact of the calibration document: where it came from, measured, base, calibrated."""
    return {
        "case": f.name, "fitted": True, "overrides": dict(f.overrides), "sleep_s": f.sleep_s,
        "mps_pct": f.mps_pct, "periods": d["periods"], "run": d["run"],
        "source": d["source"], "latency_sd_ms": d["latency_sd_ms"],
        "measured_latency_ms": f.latency_ms, "base_latency_ms": b["latency_ms"],
        "base_latency_err_pct": b["latency_err_pct"], "latency_ms": a["latency_ms"],
        "latency_err_pct": a["latency_err_pct"], "measured_sm_pct": f.sm_pct,
        "base_sm_pct": b["sm_pct"], "base_sm_err_pct": b["sm_err_pct"],
        "sm_pct": a["sm_pct"], "sm_err_pct": a["sm_err_pct"], "sm_weight": f.sm_weight,
        "measured_its": f.its, "base_its": b["its"], "base_its_err_pct": b["its_err_pct"],
        "its": a["its"], "its_err_pct": a["its_err_pct"], "its_weight": f.its_weight,
        **{k: d[k] for k in ("its_counted", "its_note") if k in d}}


def _summary(facts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    out = {}
    for q in ("latency", "sm", "its"):
        out[f"{q}_err_pct_rms_base"] = _rms([r[f"base_{q}_err_pct"] for r in facts])
        out[f"{q}_err_pct_rms"] = _rms([r[f"{q}_err_pct"] for r in facts])
        out[f"{q}_err_pct_max_base"] = _max_abs([r[f"base_{q}_err_pct"] for r in facts])
        out[f"{q}_err_pct_max"] = _max_abs([r[f"{q}_err_pct"] for r in facts])
    return out
