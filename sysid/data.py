"""Identification records: input ``u``, output ``y``, sampling period and metadata."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ._checks import in_range, pair, positive

__all__ = ["IdData"]

_HEADER_TAG = "# sysid.IdData "


@dataclass(frozen=True)
class IdData:
    """One single-input single-output record sampled every ``period_s`` seconds.

    ``u[k]`` is the input applied during period ``k`` (e.g. the training sleep interval, s)
    and ``y[k]`` the output measured over that period (e.g. the mean inference latency, ms).
    ``meta`` holds plain scalars describing the experiment (MPS level, batch size, plant).
    Arrays are copied and made read-only; lengths must match and values must be finite.

    Parameters
    ----------
    u : array_like
        Input applied in each period.
    y : array_like
        Output measured over each period, same length.
    period_s : float
        Sampling period (s), > 0.
    meta : mapping
        Plain-scalar metadata of the experiment.

    Examples
    --------
    >>> d = IdData([0.1, 0.5, 0.3, 0.2], [9.0, 7.0, 8.0, 8.5], period_s=4.0, meta={"mps": 80})
    >>> len(d), float(d.t[-1])
    (4, 12.0)
    >>> train, val = d.split(0.5)
    >>> len(train), len(val)
    (2, 2)
    >>> centred, (u0, y0) = d.remove_offset()
    >>> round(float(centred.y.mean()), 12), y0
    (0.0, 8.125)
    """

    u: np.ndarray
    y: np.ndarray
    period_s: float = 4.0
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        u, y = pair(self.u, self.y, min_len=1)
        u, y = u.copy(), y.copy()
        u.flags.writeable = False
        y.flags.writeable = False
        object.__setattr__(self, "u", u)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "period_s", positive("period_s", self.period_s))
        if not isinstance(self.meta, Mapping):
            raise ValueError(
                f"meta must be a mapping, got {type(self.meta).__name__}")
        object.__setattr__(self, "meta", dict(self.meta))

    # ---- basics -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.u.size)

    def __getitem__(self, index: slice) -> IdData:
        """A contiguous slice of the record (``data[10:]``), keeping period and metadata."""
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise ValueError("IdData supports only contiguous slices, e.g. data[10:50]")
        return replace(self, u=self.u[index], y=self.y[index])

    @property
    def t(self) -> np.ndarray:
        """Start time (s) of each period."""
        return np.arange(len(self)) * self.period_s

    # ---- splitting and preprocessing ------------------------------------------------------------
    def split(self, fraction_train: float = 0.7) -> tuple[IdData, IdData]:
        """Contiguous estimation/validation split: the first ``fraction_train`` of the record
        for fitting, the rest for validation (time order kept, as identification requires)."""
        f = in_range("fraction_train", fraction_train, 0.0, 1.0, lo_open=True, hi_open=True)
        k = round(f * len(self))
        if k < 1 or k >= len(self):
            raise ValueError(f"record of {len(self)} samples is too short to split at "
                             f"fraction {f:g}")
        return self[:k], self[k:]

    def remove_offset(self, method: str = "mean") -> tuple[IdData, tuple[float, float]]:
        """Subtract an operating point from ``u`` and ``y``: their means (``"mean"``) or the
        first sample (``"first"``). Returns the centred record and ``(u0, y0)``; the offsets
        are also stored in the new record's ``meta`` as ``u_offset``/``y_offset``."""
        if method == "mean":
            u0, y0 = float(self.u.mean()), float(self.y.mean())
        elif method == "first":
            u0, y0 = float(self.u[0]), float(self.y[0])
        else:
            raise ValueError(f"method must be 'mean' or 'first', got {method!r}")
        meta = {**self.meta, "u_offset": u0, "y_offset": y0}
        return replace(self, u=self.u - u0, y=self.y - y0, meta=meta), (u0, y0)

    # ---- CSV ---------------------------------------------------------------------------------
    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """Write a tidy CSV (``k, t_s, u, y``; one row per period) and return its text.

        The first line is a comment carrying ``period_s`` and ``meta`` as JSON, so that
        :meth:`from_csv` restores the record exactly.
        """
        buf = io.StringIO()
        head = {"period_s": self.period_s, "meta": self.meta}
        buf.write(_HEADER_TAG + json.dumps(head, sort_keys=True, default=_jsonable) + "\n")
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["k", "t_s", "u", "y"])
        for k, (t, u, y) in enumerate(zip(self.t, self.u, self.y)):
            w.writerow([k, repr(float(t)), repr(float(u)), repr(float(y))])
        text = buf.getvalue()
        if path is not None:
            with open(path, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
        return text

    @classmethod
    def from_csv(cls, path: str | os.PathLike, *, u: str = "u", y: str = "y",
                 period_s: float | None = None, meta: Mapping[str, Any] | None = None
                 ) -> IdData:
        """Read a record written by :meth:`to_csv`, or any CSV with a header row naming the
        input and output columns (``u=``/``y=``, e.g. ``u="sleep_s", y="latency_ms"``).

        Without the ``# sysid.IdData`` comment line, ``period_s`` must be given. A UTF-8
        byte-order mark (a spreadsheet's export) is skipped; a header naming a column twice,
        or a data row with more fields than the header, is a ValueError.
        """
        # utf-8-sig: a byte-order mark would otherwise stay in the first column's name
        with open(path, encoding="utf-8-sig", newline="") as fh:
            lines = fh.read().splitlines()
        head: dict[str, Any] = {}
        body = lines
        if lines and lines[0].startswith(_HEADER_TAG):
            try:
                head = json.loads(lines[0][len(_HEADER_TAG):])
            except json.JSONDecodeError as exc:
                raise ValueError(f"{os.fspath(path)}: the {_HEADER_TAG.strip()} header line is "
                                 f"not valid JSON ({exc})") from None
            if not isinstance(head, dict) or not isinstance(head.get("meta", {}), dict):
                raise ValueError(f"{os.fspath(path)}: the {_HEADER_TAG.strip()} header must be "
                                 'a JSON object {"period_s": ..., "meta": {...}}, got '
                                 f"{lines[0][len(_HEADER_TAG):].strip()[:60]}")
            body = lines[1:]
        body = [ln for ln in body if ln.strip() and not ln.startswith("#")]
        uu, yy = _columns(os.fspath(path), body, u, y)
        if meta is not None and not isinstance(meta, Mapping):
            raise ValueError(f"meta must be a mapping, got {type(meta).__name__}")
        if period_s is None:
            if "period_s" not in head:
                raise ValueError(f"{os.fspath(path)}: period_s is not recorded in the file; "
                                 "pass period_s=")
            period_s = head["period_s"]
        return cls(np.asarray(uu), np.asarray(yy), period_s=period_s,
                   meta={**head.get("meta", {}), **(meta or {})})


def _columns(where: str, body: list[str], u: str, y: str) -> tuple[list[float], list[float]]:
    """Columns ``u`` and ``y`` of the CSV lines ``body`` (the header row first) as floats.

    A ValueError names a column the header lacks, with the columns it has (quoted: a stray
    space shows), a column the header names twice, a data row with more fields than the
    header, and a data row that has no value in a named column.
    """
    reader = csv.DictReader(body)
    _check_header(where, reader.fieldnames, u, y)
    rows = list(reader)
    if not rows:
        raise ValueError(f"{where}: no data rows")
    for k, r in enumerate(rows, 1):
        if None in r:   # (csv.DictReader files the extra fields under the key None)
            raise ValueError(f"{where}: data row {k} has {len(r) - 1 + len(r[None])} fields, "
                             f"more than the header's {len(r) - 1}")
    out = []
    for col in (u, y):
        values = []
        for k, r in enumerate(rows, 1):
            text = r[col]
            if text is None:   # a row shorter than the header
                raise ValueError(f"{where}: data row {k} has no value in column {col!r}")
            try:
                values.append(float(text))
            except ValueError as exc:
                raise ValueError(f"{where}: non-numeric value in column {col!r}, data row "
                                 f"{k} ({exc})") from None
        out.append(values)
    return out[0], out[1]


def _check_header(where: str, header: Sequence[str] | None, u: str, y: str) -> None:
    """Raise unless the CSV ``header`` names ``u`` and ``y``, and no column twice (a
    ``csv.DictReader`` row would silently keep the last of two same-named columns)."""
    if not header:
        raise ValueError(f"{where}: no data rows")
    columns = ", ".join(map(repr, header))
    twice = next((c for i, c in enumerate(header) if c in header[:i]), None)
    if twice is not None:
        raise ValueError(f"{where}: column {twice!r} appears more than once in the header "
                         f"(columns: {columns})")
    for col in (u, y):
        # the header, not a row's keys: a row with more fields than the header has a None
        # key, which the message could not join
        if col not in header:
            raise ValueError(f"{where}: no column {col!r} (columns: {columns})")


def require_record(data: object) -> IdData:
    """``data`` itself if it is an :class:`IdData`, else a ValueError saying what it is."""
    if not isinstance(data, IdData):
        raise ValueError(
            f"data must be an IdData record, got {type(data).__name__}")
    return data


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    return str(x)
