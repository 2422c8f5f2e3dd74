"""How the simulated plant's constants are obtained: a least-squares fit of some
:class:`harness.simulated.ColocationParams` fields to *facts* — a mean inference latency and,
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

>>> fit = fit_fig4()
>>> all(abs(r["latency_err_pct"]) < 5 for r in fit.rows)
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from .simulated import PRESETS, ColocationParams, SimulatedColocation

__all__ = ["FIG4_FACTS", "FIG4_FIT_FIELDS", "FIT_BOUNDS", "Fact", "FactFit", "Fig4Fit",
           "fact_rows", "fig4_rows", "fit_facts", "fit_fig4"]


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
    fitted plant; ``start`` the base values, ``at_bound`` the fields that ended on a bound."""

    values: dict[str, float]
    rows: list[dict[str, Any]]
    start: dict[str, float] = field(default_factory=dict)
    success: bool = True
    nfev: int = 0
    cost: float = math.nan
    message: str = ""
    at_bound: tuple[str, ...] = ()


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
    ``bounds`` overrides :data:`FIT_BOUNDS` per field. Raises ValueError for an unknown field,
    an empty fact list or a fact with a latency that is not a positive number.
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

    lo = np.array([bnd[f][0] for f in names], float)
    hi = np.array([bnd[f][1] for f in names], float)
    start = {f: float(getattr(base, f)) for f in names}
    x0 = np.clip(np.array([start[f] for f in names]), lo + 1e-9 * (hi - lo),
                 hi - 1e-9 * (hi - lo))
    lat_meas = np.array([f.latency_ms for f in facts], float)
    sm_meas = np.array([f.sm_pct for f in facts], float)
    sm_w = np.array([f.sm_weight if math.isfinite(f.sm_pct) else 0.0 for f in facts], float)
    sm_den = np.maximum(np.where(np.isfinite(sm_meas), sm_meas, 1.0), SM_FLOOR_PCT)

    def params_at(x: np.ndarray) -> ColocationParams:
        return replace(base, **dict(zip(names, map(float, x))))

    def residuals(x: np.ndarray) -> np.ndarray:
        p = params_at(x)
        lat, sm = model_values(facts, p)
        res = np.empty(2 * len(facts))
        res[0::2] = (lat - lat_meas) / lat_meas
        res[1::2] = np.where(sm_w > 0, sm_w * (sm - sm_meas) / sm_den, 0.0)
        if extra is not None:
            res = np.concatenate([res, np.asarray(extra(p), float)])
        return res

    sol = least_squares(residuals, x0, bounds=(lo, hi))
    values = dict(zip(names, map(float, sol.x)))
    tol = 1e-6 * (hi - lo)
    at_bound = tuple(n for n, v, a, b, t in zip(names, sol.x, lo, hi, tol)
                     if v <= a + t or v >= b - t)
    return FactFit(values, fact_rows(facts, params_at(sol.x), label=label), start,
                   bool(sol.success), int(sol.nfev), float(sol.cost), str(sol.message),
                   at_bound)


def _fig4_iteration_prior(p: ColocationParams) -> list[float]:
    """Seed 000: the time-sliced training iteration takes about 0.2 s."""
    t = float(SimulatedColocation(replace(p, mps_enabled=False)).expected_iteration_s(100))
    return [0.3 * (t - 0.2) / 0.2]


def fit_fig4() -> FactFit:
    """Refit the sharing constants to Fig 4 (scipy least squares)."""
    return fit_facts(FIG4_FACTS, fig4_params(), fields=FIG4_FIT_FIELDS,
                     extra=_fig4_iteration_prior, label="paper")
