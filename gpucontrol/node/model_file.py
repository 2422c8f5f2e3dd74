"""The model file the daemon reads (``--model``): what ``gpucontrol identify`` writes, the latency
model per share level and, where measured, the training's iteration time there (the two curves
the controller's outer loop optimises over)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpucontrol._validate import known_keys
from gpucontrol.model_form import LEVEL_KEYS
from gpucontrol.models import LatencyModelFamily, LinearLatencyModel

#: What makes a one-level file a one-point family rather than a bare line.
_FAMILY = ("iteration_s", "sleep_span_s", "iteration_times")

__all__ = ["load_model", "load_sleep_span"]


def _read(path: str | os.PathLike[str]) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read model {path}: {exc}") from None


def load_model(path: str | os.PathLike[str]) -> LinearLatencyModel | LatencyModelFamily:
    """Read a latency model file.

    Parameters
    ----------
    path : str or os.PathLike
        JSON: ``{"gain": g, "offset": n}`` (one linear model; with ``iteration_s``, the
        training's iteration time, ``sleep_span_s`` or ``iteration_times`` it is read as a
        one-level family at its ``mps_pct``, default 100, read as one row under ``"points"``
        is: its line, iteration time, and duty and bent laws where measured), or
        a list of ``{"mps_pct", "gain", "offset"[, "batch"][, "iteration_s"]}`` rows (a
        family: the latency and training-rate curves across the share), bare or under
        ``"points"`` beside an optional ``"sleep_span_s"`` and ``"iteration_times"`` (a rate
        sweep's ``[share %, s]`` pairs). The keys are
        :data:`~gpucontrol.model_form.LEVEL_KEYS` (one level),
        :data:`~gpucontrol.model_form.FAMILY_KEYS` and
        :data:`~gpucontrol.model_form.POINT_KEYS` (a row); ``source``, ``r2`` and
        ``r2_validation`` are notes, not read.

    Returns
    -------
    LinearLatencyModel or LatencyModelFamily
        The model the controller designs its gains from and its outer loop optimises over.

    Raises
    ------
    ValueError
        The file cannot be read, is not one of these shapes, or has a key they do not define
        (named, with the keys allowed there: a misspelt ``sleep_span`` would otherwise drop
        the gain schedule's span unseen).
    """
    doc = _read(path)
    if not isinstance(doc, (dict, list)):
        raise ValueError(f"model {path} must be a JSON object or list")
    if isinstance(doc, list) or "points" in doc:
        return LatencyModelFamily.from_document(doc)
    known_keys("model", doc, LEVEL_KEYS)
    model = LinearLatencyModel.from_dict(doc)
    if not set(_FAMILY) & set(doc):
        return model
    # one level: read as one row under "points" is, its duty and bent laws included (what the
    # harness reads from the same file)
    return LatencyModelFamily.from_document(doc)


def load_sleep_span(path: str | os.PathLike[str]) -> tuple[float, float] | None:
    """The sleep range the model was identified over (``sleep_span_s``), if the file has one.

    Parameters
    ----------
    path : str or os.PathLike
        The model file (:func:`load_model`'s).

    Returns
    -------
    (float, float) or None
        ``(low, high)`` seconds, ``0 <= low < high``; None when the file records none.

    Raises
    ------
    ValueError
        The file cannot be read, or ``sleep_span_s`` is not two numbers ``0 <= low < high``.
    """
    doc = _read(path)
    span = doc.get("sleep_span_s") if isinstance(doc, dict) else None
    if span is None:
        return None
    try:
        lo, hi = (float(x) for x in span)
    except (TypeError, ValueError):
        raise ValueError(f"model {path}: sleep_span_s must be [low, high] seconds, "
                         f"got {span!r}") from None
    if not (0.0 <= lo < hi <= 3600.0):
        raise ValueError(f"model {path}: sleep_span_s must satisfy 0 <= low < high <= 3600, "
                         f"got {span!r}")
    return lo, hi
