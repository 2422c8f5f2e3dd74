"""Result files and the harness's one atomic writer.

Tidy CSV, JSON/Markdown summaries and PNG figures, all written atomically (to a temporary
file in the same folder, then renamed), so a crash never leaves half a file and a reader
never sees one. The small files the GPU harness processes exchange (ready signals, the
inference batch size, line-buffered CSV logs) use the same writer: :func:`read_json`,
:func:`write_int` / :class:`IntFile` and :class:`CSVLog`.

An experiment's files are written as one set (:func:`result_set`): while the set is open,
every write under its folder goes to a hidden staging folder beside it
(``.<name>.partial-<pid>-*``), which replaces the folder only when the run completes. A run
stopped by an error or a signal leaves the previous complete set untouched (or no folder),
and says on one line where its partial output is, or that it wrote nothing; staging folders
and temporary files left by a killed run are removed by the next run into the same folder.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.result_sets import _file_mode, final, result_note, result_set, staged

if TYPE_CHECKING:  # typing.Self is 3.11+; annotations are not evaluated at run time
    from typing_extensions import Self

__all__ = [
    "CSVLog",
    "IntFile",
    "atomic_write_bytes",
    "atomic_write_text",
    "final",
    "json_line",
    "markdown_table",
    "read_csv",
    "read_json",
    "result_note",
    "result_set",
    "save_figure",
    "staged",
    "write_csv",
    "write_int",
    "write_json",
    "write_markdown_table",
]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; create parent folders. Returns the path.

    The file gets the permissions a plain write would give it: an existing file keeps its
    mode, a new one is 0o666 less the process umask.

    Inside an open :func:`result_set` whose folder holds ``path``, the file goes to the set's
    staging folder; the path returned is still ``path``, where it will be once the set is
    complete.
    """
    given = Path(path)
    p = staged(given)
    p.parent.mkdir(parents=True, exist_ok=True)
    mode = _file_mode(given)  # an existing result keeps its mode, also when staged
    # the process id in the name lets a later run tell a killed writer's leftover file
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.{os.getpid()}.", suffix=".tmp", dir=p.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return given


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; create parent folders.

    Parameters
    ----------
    path : str or os.PathLike
        Destination file.
    text : str
        The whole content.

    Returns
    -------
    Path
        ``path``.
    """
    return atomic_write_bytes(path, text.encode("utf-8"))


def _is_float(v: Any) -> bool:
    return isinstance(v, float) or (hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0
                                    and getattr(v.dtype, "kind", "") == "f")


def _cell(v: Any) -> Any:
    if isinstance(v, bool) or (hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0
                               and getattr(v.dtype, "kind", "") == "b"):
        return int(v)
    if _is_float(v):
        if math.isnan(v):
            return ""
        # every digit the value has, never rounded: the shortest text that reads back as
        # the same number (a float32 as its own shortest text, not its float64 expansion)
        return repr(float(v)) if isinstance(v, float) else repr(float(str(v)))
    return v


def write_csv(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike,
              columns: Sequence[str] | None = None) -> Path:
    """Write dict rows as CSV (header = ``columns`` or the union of keys in first-seen order).

    Floats (numpy's too) are written in full, as the shortest text that reads back as the
    same number (``repr``: ``4e-07``, ``1.23456789e-05``), never rounded; NaN (any float
    type) becomes an empty cell, booleans 0/1, numpy scalars plain numbers.
    """
    rows = list(rows)
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows:
            for k in r:
                seen.setdefault(k, None)
        columns = list(seen)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(r.get(k, "")) for k in columns})
    return atomic_write_text(path, buf.getvalue())


def read_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a CSV written by :func:`write_csv` (numbers become floats, empty cells NaN).

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Returns
    -------
    list[dict]
        One dict per row; a row with more or fewer fields than the header raises
        ``ValueError`` naming the file and line.
    """
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None) or []
        for vals in reader:
            if len(vals) != len(header):
                raise ValueError(f"{path}: line {reader.line_num} has {len(vals)} fields, "
                                 f"the header {len(header)}")
            row: dict[str, Any] = {}
            for k, v in zip(header, vals):
                if v == "":
                    row[k] = math.nan
                    continue
                try:
                    row[k] = float(v)
                except ValueError:
                    row[k] = v
            out.append(row)
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if getattr(x, "ndim", 0) and callable(getattr(x, "tolist", None)):  # numpy arrays
        return _jsonable(x.tolist())
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _jsonable(x.item())
    return x


def json_line(obj: Any) -> str:
    """``obj`` as one line of valid JSON: NaN and infinities become ``null`` (``json.dumps``
    writes them as ``NaN``/``Infinity``, which JSON readers refuse), numpy scalars numbers.

    >>> json_line({"iter_s": 0.2, "sm_fraction": float("nan")})
    '{"iter_s": 0.2, "sm_fraction": null}'
    """
    return json.dumps(_jsonable(obj), allow_nan=False)


def write_json(obj: Any, path: str | os.PathLike) -> Path:
    """Write JSON (NaN/inf become null; numpy scalars become numbers, numpy arrays lists)."""
    return atomic_write_text(path, json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n")


def _fmt(v: Any, digits: int) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int,)) or (hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0
                                  and str(v.dtype).startswith("int")):
        return str(int(v))
    if isinstance(v, float) or hasattr(v, "dtype"):
        f = float(v)
        return "—" if not math.isfinite(f) else f"{f:.{digits}f}"
    return str(v)


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
                   headers: Sequence[str] | None = None, digits: int = 3) -> str:
    """A GitHub-style Markdown table of ``rows`` restricted to ``columns``."""
    hs = list(headers) if headers is not None else list(columns)
    lines = ["| " + " | ".join(hs) + " |", "|" + "|".join("---" for _ in hs) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c, ""), digits) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
                         path: str | os.PathLike, *, title: str | None = None,
                         headers: Sequence[str] | None = None, digits: int = 3) -> Path:
    """Write :func:`markdown_table` to ``path`` atomically, under ``# title`` if given."""
    text = (f"# {title}\n\n" if title else "") + markdown_table(rows, columns, headers, digits)
    return atomic_write_text(path, text)


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 110) -> Path:
    """Save a matplotlib figure as PNG atomically and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    try:
        import matplotlib.pyplot as plt

        plt.close(fig)
    except Exception:
        pass
    return atomic_write_bytes(path, buf.getvalue())


# ---- files the GPU harness processes exchange ---------------------------------------------------
def read_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or (still) unreadable.

    Parameters
    ----------
    path : str or os.PathLike
        The file to read.

    Returns
    -------
    dict or None
        The object; None for a missing file, invalid JSON or JSON that is not an object.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_int(path: str | os.PathLike[str], value: int) -> Path:
    """Atomically set an :class:`IntFile` (one line with the integer).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    value : int
        The new value.

    Returns
    -------
    Path
        ``path``.
    """
    return atomic_write_text(path, f"{int(value)}\n")


class IntFile:
    """An integer another process may change while we run (e.g. the inference batch size).

    ``value()`` re-reads the file only when its inode, mtime or size changed, so polling it
    once per batch costs one ``stat``. A missing or garbled file keeps the last good value.

    Parameters
    ----------
    path : str, os.PathLike or None
        The file (:func:`write_int` sets it); None: always ``default``.
    default : int
        The value until the file holds a valid one.
    lo, hi : int
        Accepted range; a value outside it is ignored.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "batch")
    >>> f = IntFile(p, default=105); f.value()
    105
    >>> _ = open(p, "w").write("115\\n"); f.value()
    115
    """

    def __init__(self, path: str | os.PathLike[str] | None, default: int,
                 lo: int = 1, hi: int = 1 << 20) -> None:
        self.path = None if path is None else Path(path)
        self.lo, self.hi = lo, hi
        self._value = int(default)
        self._sig: tuple[int, int, int] | None = None

    def value(self) -> int:
        """The current value (re-read only when the file changed)."""
        if self.path is None:
            return self._value
        try:
            st = os.stat(self.path)
        except OSError:
            return self._value
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        if sig != self._sig:
            self._sig = sig
            try:
                v = int(self.path.read_text().strip())
            except (OSError, ValueError):
                return self._value
            if self.lo <= v <= self.hi:
                self._value = v
        return self._value


class CSVLog:
    """A line-buffered CSV log another process can tail.

    ``{pid}`` in the path becomes our process id (so restarted processes never overwrite
    each other's logs). With no path, :meth:`write` does nothing. Use as a context manager.

    Parameters
    ----------
    path : str or None
        The log file, opened (truncated) on ``__enter__``.
    fields : tuple[str, ...]
        The columns.
    """

    def __init__(self, path: str | None, fields: tuple[str, ...]) -> None:
        self.path = None if not path else Path(path.replace("{pid}", str(os.getpid())))
        self.fields = fields
        self._f: io.TextIOWrapper | None = None
        self._w: csv.DictWriter[str] | None = None

    def __enter__(self) -> Self:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = self.path.open("w", newline="", buffering=1)
            self._w = csv.DictWriter(self._f, fieldnames=self.fields)
            self._w.writeheader()
        return self

    def write(self, row: dict[str, Any]) -> None:
        """Append one row (no-op without a path)."""
        if self._w is not None:
            self._w.writerow(row)

    def __exit__(self, *exc: object) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
            self._w = None
