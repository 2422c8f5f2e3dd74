"""Follow CSV logs that other processes append to (the inference and training logs)."""

from __future__ import annotations

import csv
import glob
import os
import warnings
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
    partly written last line (no newline yet: ``12.3`` of ``12.34``, a row short of fields) is
    left for the next call, and :meth:`incomplete` names the files that end in one. A
    complete line whose field count is not the header's is not data either (a line cut off
    and written over, as :func:`harness.results.read_csv` refuses it): it is skipped, counted
    in :attr:`malformed` and warned about once per file. Values are floats where they parse
    (empty cells become None). Each row gets ``_file`` (the file name).

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "a-1.csv")
    >>> _ = open(p, "w").write("x,y\\n1,2\\n3,")
    >>> t = CSVTail(os.path.join(d, "a-*.csv"))
    >>> [(r["x"], r["y"]) for r in t.read()], t.incomplete() == [p]
    ([(1.0, 2.0)], True)
    >>> _ = open(p, "a").write("4\\n"); [(r["x"], r["y"]) for r in t.read()], t.incomplete()
    ([(3.0, 4.0)], [])
    """

    def __init__(self, pattern: str | os.PathLike[str]) -> None:
        self.pattern = os.fspath(pattern)
        self._offset: dict[str, int] = {}
        self._header: dict[str, list[str]] = {}
        self._lines: dict[str, int] = {}
        self._partial: set[str] = set()
        #: Complete lines skipped per file: their field count is not the header's.
        self.malformed: dict[str, int] = {}

    def files(self) -> list[str]:
        return sorted(glob.glob(self.pattern))

    def incomplete(self) -> list[str]:
        """The files whose last line had no newline yet at the last :meth:`read` (a line
        being written, or one cut off for good when its writer is gone)."""
        return sorted(self._partial)

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
            if len(chunk) > end + 1:
                self._partial.add(path)
            else:
                self._partial.discard(path)
            if end < 0:
                continue
            self._offset[path] = off + end + 1
            rows.extend(self._rows(path, chunk[:end].decode("utf-8", errors="replace")))
        return rows

    def _rows(self, path: str, text: str) -> list[dict[str, Any]]:
        """The data rows of complete lines ``text`` of ``path``."""
        rows = []
        name = Path(path).name
        for rec in csv.reader(text.splitlines()):
            self._lines[path] = self._lines.get(path, 0) + 1
            if not rec:
                continue
            header = self._header.get(path)
            if header is None:
                self._header[path] = rec
                continue
            if len(rec) != len(header):
                self._skip(path, len(rec), len(header))
                continue
            row = {k: _num(v) for k, v in zip(header, rec)}
            row["_file"] = name
            rows.append(row)
        return rows

    def _skip(self, path: str, fields: int, expected: int) -> None:
        n = self.malformed[path] = self.malformed.get(path, 0) + 1
        if n == 1:
            warnings.warn(f"{path}: line {self._lines[path]} has {fields} fields, the header "
                          f"{expected}: not read as data (a line cut off mid-write?)",
                          RuntimeWarning, stacklevel=3)


def first_and_last_rows(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None,
                                                             dict[str, Any] | None]:
    """The first and last complete data rows of a CSV log (None when it has none): an
    incomplete last line (no newline) and a line with another field count than the header
    are not rows."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None, None
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    recs = [r for r in csv.reader(text.splitlines()) if r]
    if not recs:
        return None, None
    header = recs[0]
    data = [r for r in recs[1:] if len(r) == len(header)]
    if not data:
        return None, None
    first = {k: _num(v) for k, v in zip(header, data[0])}
    last = {k: _num(v) for k, v in zip(header, data[-1])}
    return first, last
