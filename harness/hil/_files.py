"""Small file helpers shared by the GPU harness processes (ready signals, control files)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing.Self is 3.11+; annotations are not evaluated at run time
    from typing import Self


def write_json_atomic(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` via a temp file and a rename (no torn reads)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, p)


def read_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or (still) unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class IntFile:
    """An integer another process may change while we run (e.g. the inference batch size).

    ``value()`` re-reads the file only when its inode, mtime or size changed, so polling it once per
    batch costs one ``stat``. A missing or garbled file keeps the last good value.

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


def write_int(path: str | os.PathLike[str], value: int) -> None:
    """Atomically set an :class:`IntFile`."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{int(value)}\n")
    os.replace(tmp, p)


class CSVLog:
    """A line-buffered CSV log another process can tail; ``{pid}`` in the path becomes our
    process id (so restarted processes never overwrite each other's logs). With no path,
    :meth:`write` does nothing."""

    def __init__(self, path: str | None, fields: tuple[str, ...]) -> None:
        self.path = None if not path else Path(path.replace("{pid}", str(os.getpid())))
        self.fields = fields
        self._f = None
        self._w: csv.DictWriter | None = None

    def __enter__(self) -> Self:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = self.path.open("w", newline="", buffering=1)
            self._w = csv.DictWriter(self._f, fieldnames=self.fields)
            self._w.writeheader()
        return self

    def write(self, row: dict[str, Any]) -> None:
        if self._w is not None:
            self._w.writerow(row)

    def __exit__(self, *exc: object) -> None:
        if self._f is not None:
            self._f.close()
            self._f = self._w = None
