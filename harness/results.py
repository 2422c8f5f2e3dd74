"""Result writers: tidy CSV, JSON/Markdown summaries and PNG figures, all written atomically
(to a temporary file in the same folder, then renamed), so a crash never leaves half a file
and a reader never sees one."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "markdown_table",
    "read_csv",
    "save_figure",
    "write_csv",
    "write_json",
    "write_markdown_table",
]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; create parent folders. Returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
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
    return p


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        v = float(v)  # numpy scalars: repr(np.float64) is "np.float64(...)" since numpy 2
        return repr(round(v, 6)) if abs(v) < 1e15 else repr(v)
    if isinstance(v, bool):
        return int(v)
    return v


def write_csv(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike,
              columns: Sequence[str] | None = None) -> Path:
    """Write dict rows as CSV (header = ``columns`` or the union of keys in first-seen order;
    NaN becomes an empty cell, booleans 0/1)."""
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
    """Read a CSV written by :func:`write_csv` (numbers become floats, empty cells NaN)."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in r.items():
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
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _jsonable(x.item())
    return x


def write_json(obj: Any, path: str | os.PathLike) -> Path:
    """Write JSON (NaN/inf become null; numpy scalars become numbers)."""
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
