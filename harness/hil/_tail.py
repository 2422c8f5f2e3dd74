"""Follow CSV logs that other processes append to (the inference and training logs)."""

from __future__ import annotations

import csv
import glob
import os
from pathlib import Path
from typing import Any


def _num(v: str) -> Any:
    if v == "":
        return None
    try:
        return float(v)
    except ValueError:
        return v


class CSVTail:
    """New complete rows of every CSV file matching ``pattern`` (a glob), since the last call.

    Files may appear at any time (a restarted process writes a new ``...-{pid}.csv``); a
    partly written last line is left for the next call. Values are floats where they parse
    (empty cells become None). Each row gets ``_file`` (the file name).

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "a-1.csv")
    >>> _ = open(p, "w").write("x,y\\n1,2\\n3,")
    >>> t = CSVTail(os.path.join(d, "a-*.csv"))
    >>> [(r["x"], r["y"]) for r in t.read()]
    [(1.0, 2.0)]
    >>> _ = open(p, "a").write("4\\n"); [(r["x"], r["y"]) for r in t.read()]
    [(3.0, 4.0)]
    """

    def __init__(self, pattern: str | os.PathLike[str]) -> None:
        self.pattern = os.fspath(pattern)
        self._offset: dict[str, int] = {}
        self._header: dict[str, list[str]] = {}

    def files(self) -> list[str]:
        return sorted(glob.glob(self.pattern))

    def read(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for path in self.files():
            off = self._offset.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(off)
                    chunk = f.read()
            except OSError:
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._offset[path] = off + end + 1
            lines = chunk[:end].decode("utf-8", errors="replace").splitlines()
            name = Path(path).name
            for rec in csv.reader(lines):
                if not rec:
                    continue
                header = self._header.get(path)
                if header is None:
                    self._header[path] = rec
                    continue
                row = {k: _num(v) for k, v in zip(header, rec)}
                row["_file"] = name
                rows.append(row)
        return rows


def first_and_last_rows(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None,
                                                             dict[str, Any] | None]:
    """The first and last complete data rows of a CSV log (None when it has none)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None, None
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    recs = [r for r in csv.reader(text.splitlines()) if r]
    if len(recs) < 2:
        return None, None
    header = recs[0]
    first = {k: _num(v) for k, v in zip(header, recs[1])}
    last = {k: _num(v) for k, v in zip(header, recs[-1])}
    return first, last
