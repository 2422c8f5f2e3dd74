"""The curves an identification found, as the daemon's model file (``model.json``) and as
the controller takes them: :func:`model_document` from the identification's rows (one per
share level), :func:`family_of` from its result. Kept apart from :mod:`.identify`, which runs
the excitation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gpucontrol import LatencyModelFamily
from harness.experiments.common import ExperimentResult

__all__ = ["family_of", "model_document"]


def family_of(res: ExperimentResult, every_level: bool = False) -> LatencyModelFamily | None:
    """The curves an identification found, as the controller takes them (what model.json
    holds): None when no level has a significantly negative gain.

    Parameters
    ----------
    res : ExperimentResult
        What :func:`identify` returned.
    every_level : bool
        Keep the levels whose gain is not significantly negative too, their gain capped at
        -1e-3 ms/s (a statistic the sleep barely moves, such as a p99 set by the share: the
        outer loop still needs that level's latency and iteration time).

    Returns
    -------
    LatencyModelFamily or None
        The latency model and iteration time per level, and the sleep span.
    """
    rows = res.summary if not every_level else [
        {**r, "gain": min(r["gain"], -1e-3), "gain_ci_high": min(r["gain_ci_high"], -1e-3)}
        for r in res.summary]
    doc = model_document(rows, sleep_span_s=tuple(res.meta["sleep_range_s"]),
                         iteration_times=res.meta.get("iteration_times", ()))
    return None if doc is None else LatencyModelFamily.from_document(doc)  # one level or more


def model_document(summary: Sequence[dict[str, Any]],
                   sleep_span_s: tuple[float, float] | None = None,
                   iteration_times: Sequence[Sequence[float]] = ()) -> dict[str, Any] | None:
    """The daemon's model file from identification rows (one per MPS level).

    Parameters
    ----------
    summary : sequence of dict
        Rows with ``mps_pct``, ``gain``, ``offset``, ``r2``, ``r2_validation``, ``gain_ci_high``
        and optionally ``iteration_s`` (the training's iteration time there, s; NaN or
        absent: not measured).
    sleep_span_s : (float, float), optional
        The sleep range the excitation covered, recorded as ``sleep_span_s``: the daemon's
        gain schedule needs the span the secant slope was fitted over.
    iteration_times : sequence of (float, float)
        The rate sweep's ``(share %, iteration time s)`` pairs, recorded as
        ``iteration_times`` (none: the key is left out).

    Returns
    -------
    dict or None
        ``{"gain", "offset", ...}`` for one usable level, ``{"points": [...]}`` (a family,
        gain-scheduled by MPS) for several; None when no level has a significantly negative
        gain (no model to design from). Read by :func:`gpucontrol.node.daemon.load_model`.
    """
    usable = [r for r in summary if r["gain"] < 0 and r["gain_ci_high"] < 0]
    if not usable:
        return None
    span: dict[str, Any] = {} if sleep_span_s is None else {
        "sleep_span_s": [float(sleep_span_s[0]), float(sleep_span_s[1])]}
    if len(iteration_times):
        span["iteration_times"] = [[float(m), float(t)] for m, t in iteration_times]
    if len(usable) == 1:
        r = usable[0]
        return {"gain": float(r["gain"]), "offset": float(r["offset"]),
                "mps_pct": float(r["mps_pct"]), "r2": float(r["r2"]),
                "r2_validation": float(r["r2_validation"]), **_iteration(r), **_misfit(r),
                **span}
    return {"points": [{"mps_pct": float(r["mps_pct"]), "gain": float(r["gain"]),
                        "offset": float(r["offset"]), **_iteration(r), **_misfit(r)}
                       for r in usable],
            **span}


def _iteration(r: dict[str, Any]) -> dict[str, Any]:
    """A row's iteration time and the duty law fitted with it, where measured, and the bent
    law where the level is time-sliced (:func:`time_sliced`)."""
    t = float(r.get("iteration_s", math.nan))
    if not (math.isfinite(t) and t > 0):
        return {}
    c, a = float(r.get("idle_ms", math.nan)), float(r.get("duty_gain_ms", math.nan))
    law: dict[str, Any] = {"idle_ms": c, "duty_gain_ms": a} if math.isfinite(c) and a > 0 else {}
    if time_sliced(r):
        law["bent_law"] = [float(r[k]) for k in ("bend_idle_ms", "bend_gain_ms", "bend")]
    return {"iteration_s": t, **law}


#: A level is time-sliced when its law bends at least this much (``B``) and the bent law's
#: residual is at most half the line's.
BEND_TIME_SLICED = 0.3


def time_sliced(r: dict[str, Any]) -> bool:
    """Whether an identified level's latency is hyperbolic in the training's duty: the bent
    law ``(c + A d) / (1 - B d)`` (``bend_*`` columns) bends by ``B >= 0.3`` and leaves at
    most half the line's residual (``fit_error``). A level with noisy readings and a little
    curvature is not: the law is kept where it explains what the line cannot."""
    b, e_bent = float(r.get("bend", math.nan)), float(r.get("bend_fit_error", math.nan))
    e_line = float(r.get("fit_error", math.nan))
    c, a = float(r.get("bend_idle_ms", math.nan)), float(r.get("bend_gain_ms", math.nan))
    return bool(BEND_TIME_SLICED <= b < 1.0 and e_bent <= 0.5 * e_line and c > 0 and a >= 0)


def _misfit(r: dict[str, Any]) -> dict[str, float]:
    """A row's ``fit_error`` (the residual's RMS over the level's mean latency), where
    finite and within the model file's [0, 10]."""
    e = float(r.get("fit_error", math.nan))
    return {"fit_error": e} if math.isfinite(e) and 0 <= e <= 10 else {}
