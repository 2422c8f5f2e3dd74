"""The model file's form: the keys of model.json, and its rows read and checked.

``gpucontrol identify`` writes a :class:`~gpucontrol.models.LatencyModelFamily` as
``{"points": [row, ...][, "sleep_span_s": [low, high]][, "iteration_times": [[share %, s],
...]]}``, one row per identified level (:data:`POINT_KEYS`); a one-level file may be that row
alone with the family's keys beside it (:data:`LEVEL_KEYS`). Reading refuses a key the form
does not define, a row without :data:`ROW_NEEDS`, and half a duty law, naming the row: a key
read wrong, or dropped unseen, would be a controller built on another plant than the one
identified.

>>> from gpucontrol.models import LatencyModelFamily, LinearLatencyModel
>>> fam = LatencyModelFamily.of(LinearLatencyModel(-12.0, 95.0))
>>> document(fam)
{'points': [{'mps_pct': 100.0, 'batch': None, 'gain': -12.0, 'offset': 95.0}]}
>>> read({"gain": -12.0, "offset": 95.0})[0][0].model
LinearLatencyModel(gain=-12.0, offset=95.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpucontrol._validate import known_keys
from gpucontrol.errors import ConfigurationError

if TYPE_CHECKING:
    from gpucontrol.models import LatencyModelFamily, OperatingPoint

__all__ = ["FAMILY_KEYS", "LEVEL_KEYS", "POINT_KEYS", "ROW_NEEDS", "document", "read"]

#: The keys of one level's row.
POINT_KEYS = ("mps_pct", "gain", "offset", "batch", "iteration_s", "idle_ms", "duty_gain_ms",
              "fit_error", "bent_law")
#: The keys beside ``points``; ``source`` (where the curves came from) is a note, not read.
FAMILY_KEYS = ("points", "sleep_span_s", "iteration_times", "source")
#: A one-level file's keys: one row's and the family's; ``r2`` and ``r2_validation`` (the
#: identification's fit) are notes, not read.
LEVEL_KEYS = POINT_KEYS + FAMILY_KEYS[1:] + ("r2", "r2_validation")
#: The keys every row needs.
ROW_NEEDS = ("mps_pct", "gain", "offset")


def document(family: LatencyModelFamily) -> dict[str, Any]:
    """``family`` in the file's form (:meth:`LatencyModelFamily.to_document
    <gpucontrol.models.LatencyModelFamily.to_document>`)."""
    rows = []
    for p in family.points:
        row: dict[str, Any] = {"mps_pct": p.mps_pct, "batch": p.batch, **p.model.to_dict()}
        if p.iteration_s is not None:
            row["iteration_s"] = p.iteration_s
        if p.duty_law is not None:
            row["idle_ms"], row["duty_gain_ms"] = p.duty_law
        if p.fit_error is not None:
            row["fit_error"] = p.fit_error
        if p.bent_law is not None:
            row["bent_law"] = list(p.bent_law)
        rows.append(row)
    doc: dict[str, Any] = {"points": rows}
    if family.sleep_span_s is not None:
        doc["sleep_span_s"] = list(family.sleep_span_s)
    if family.iteration_times:
        doc["iteration_times"] = [list(r) for r in family.iteration_times]
    return doc


def read(doc: Any) -> tuple[tuple[OperatingPoint, ...], tuple[Any, ...] | None, Any]:
    """The file's form, a bare list of its rows, or one row with the family's keys beside it
    (``mps_pct`` 100 unless given), as a family's ``(points, sleep_span_s, iteration_times)``
    (the family checks them as a whole). Raises :class:`~gpucontrol.errors.ConfigurationError`
    naming the key or the row."""
    where = "model points"
    if isinstance(doc, Mapping) and "points" not in doc:  # one level
        known_keys("model", doc, LEVEL_KEYS)
        where = "model"
        doc = {"points": [{"mps_pct": 100.0, **{k: v for k, v in doc.items()
                                                if k in POINT_KEYS}}],
               **{k: v for k, v in doc.items() if k in FAMILY_KEYS}}
    elif isinstance(doc, Mapping):
        known_keys("model", doc, FAMILY_KEYS)
    try:
        rows = doc["points"] if isinstance(doc, Mapping) else doc
        span = doc.get("sleep_span_s") if isinstance(doc, Mapping) else None
        times = doc.get("iteration_times", ()) if isinstance(doc, Mapping) else ()
        if isinstance(rows, (str, bytes, Mapping)):
            raise TypeError(f"points is a {type(rows).__name__}, not a list of rows")
        return (tuple(_point(f"{where}[{i}]" if where != "model" else where, r)
                      for i, r in enumerate(rows)), _span(span), times)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigurationError(
            'family must be a list of {"mps_pct", "gain", "offset"[, "batch"]'
            '[, "iteration_s"]} rows, bare or under "points" '
            f"({type(exc).__name__}: {exc})") from None


def _span(span: Any) -> tuple[Any, ...] | None:
    """``sleep_span_s`` as a tuple, naming the key when it is no sequence."""
    if span is None:
        return None
    try:
        return tuple(span)
    except TypeError:
        raise ConfigurationError("sleep_span_s must be a (low, high) pair within [0, 3600], "
                                 f"got {span!r}") from None


def _point(where: str, r: Any) -> OperatingPoint:
    """One row, called ``where`` in messages (``model points[2]``): its keys checked (none
    unknown, none of :data:`ROW_NEEDS` missing, the duty law's two together), and a bad
    value's message prefixed with the row."""
    from gpucontrol.models import LinearLatencyModel, OperatingPoint

    if not isinstance(r, Mapping):
        raise ConfigurationError(f"{where} must be an object with {', '.join(ROW_NEEDS)}, "
                                 f"got {r!r:.80}")
    known_keys(where, r, POINT_KEYS)
    missing = [k for k in ROW_NEEDS if k not in r]
    if missing:
        raise ConfigurationError(f"{where}: missing key(s) {', '.join(missing)} (every row "
                                 f"needs {', '.join(ROW_NEEDS)})")
    if ("idle_ms" in r) != ("duty_gain_ms" in r):   # one of them alone was dropped unseen
        given, absent = ("idle_ms", "duty_gain_ms")[::1 if "idle_ms" in r else -1]
        raise ConfigurationError(f"{where}: {given} without {absent}; the duty law "
                                 "c + A d needs both (idle_ms = c, duty_gain_ms = A) or neither")
    try:
        return OperatingPoint(r["mps_pct"], LinearLatencyModel(r["gain"], r["offset"]),
                              r.get("batch"), r.get("iteration_s"),
                              (r["idle_ms"], r["duty_gain_ms"]) if "duty_gain_ms" in r
                              else None, r.get("fit_error"),
                              None if r.get("bent_law") is None else tuple(r["bent_law"]))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
