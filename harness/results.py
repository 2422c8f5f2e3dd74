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

import contextlib
import csv
import io
import json
import math
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


_UMASK_LOCK = threading.Lock()


def _file_mode(p: Path) -> int:
    """The mode ``open(p, "w")`` would leave: an existing file's, else 0o666 less the umask
    (``mkstemp`` alone would make every result file 0600)."""
    try:
        return stat.S_IMODE(p.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    with _UMASK_LOCK:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


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


# ---- result sets -------------------------------------------------------------------------------
#: A temporary file of :func:`atomic_write_bytes`: ``.<name>.<pid>.<random>.tmp`` (an older
#: writer left ``.<name>.<random>.tmp``, with no process id).
_TMP = re.compile(r"^\.(?P<name>.+?)\.(?:(?P<pid>\d+)\.)?[a-z0-9_]{8}\.tmp$")
_SETS: list[_ResultSet] = []  # the open sets that write (not the nested ones), outermost first
_SETS_LOCK = threading.Lock()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but is not ours to signal
        return True
    return True


def _under(p: Path, folder: Path) -> bool:
    return p == folder or folder in p.parents


def _abs(path: str | os.PathLike) -> Path:
    return Path(os.path.abspath(path))


def _dir_mode(p: Path) -> int:
    """The mode a new result folder gets: the existing folder's, else 0o777 less the umask
    (``mkdtemp`` alone would make it 0700)."""
    try:
        return stat.S_IMODE(p.stat().st_mode)
    except OSError:
        return 0o777 & ~_umask()


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            p.unlink()


def _stale_pid(name: str, tag: str, entry: str) -> bool:
    """Whether ``entry`` is ``.<name>.<tag>-<pid>-*`` of a process that is gone."""
    head = f".{name}.{tag}-"
    if not entry.startswith(head):
        return False
    pid = entry[len(head):].split("-", 1)[0]
    return pid.isdigit() and not _alive(int(pid))


def _clean_stale(dest: Path, owns: frozenset[str] | None) -> None:
    """Remove what killed runs into ``dest`` left: their staging folders, and temporary files
    in ``dest`` (of its own files only, when ``owns`` names them); put back a previous
    complete set that a kill between the two renames of a swap left aside."""
    parent = dest.parent
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return
    for e in entries:
        if _stale_pid(dest.name, "partial", e):
            _remove(parent / e)
        elif _stale_pid(dest.name, "old", e):
            if not os.path.lexists(dest):
                with contextlib.suppress(OSError):
                    os.rename(parent / e, dest)
                    continue
            _remove(parent / e)
    try:
        inside = os.listdir(dest)
    except OSError:
        return
    for e in inside:
        m = _TMP.match(e)
        if m and (owns is None or m["name"] in owns) and \
                (m["pid"] is None or not _alive(int(m["pid"]))):
            _remove(dest / e)


class _ResultSet:
    """One open :func:`result_set` that writes (the outermost for its folder)."""

    def __init__(self, dest: Path, shown: Path, owns: frozenset[str] | None) -> None:
        self.dest, self.shown, self.owns = dest, shown, owns
        self.staging: Path | None = None

    def path(self) -> Path:
        """The staging folder, created (and stale leftovers removed) on first use."""
        if self.staging is None:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            _clean_stale(self.dest, self.owns)
            mode = _dir_mode(self.dest)
            tmp = tempfile.mkdtemp(prefix=f".{self.dest.name}.partial-{os.getpid()}-",
                                   dir=self.dest.parent)
            os.chmod(tmp, mode)
            self.staging = Path(tmp)
        return self.staging

    def _whole(self) -> bool:
        """Whether the set is the whole folder (else only the files it owns in it)."""
        if self.owns is None:
            return True
        try:
            return all(e in self.owns or _TMP.match(e) for e in os.listdir(self.dest))
        except FileNotFoundError:
            return True

    def commit(self) -> None:
        """Put the staged set in place of the previous one."""
        src = self.staging
        if src is None:  # nothing written: the folder stays as it was
            return
        if self._whole():
            if os.path.lexists(self.dest):
                old = Path(tempfile.mkdtemp(prefix=f".{self.dest.name}.old-{os.getpid()}-",
                                            dir=self.dest.parent))
                os.rename(self.dest, old)  # onto the empty folder
                os.rename(src, self.dest)
                _remove(old)
            else:
                os.rename(src, self.dest)
        else:  # the folder holds other files too: replace ours one by one, keep the rest
            assert self.owns is not None
            new = set(os.listdir(src))
            for e in sorted(new):
                target = self.dest / e
                if (src / e).is_dir() and target.is_dir():
                    _remove(target)
                os.replace(src / e, target)
            for e in sorted(self.owns - new):
                if os.path.lexists(self.dest / e):
                    _remove(self.dest / e)
            _clean_stale(self.dest, self.owns)
            _remove(src)
        self.staging = None

    def abandon(self, exc: BaseException) -> None:
        """The run failed: keep its partial output aside (or remove an empty staging folder)
        and say so in one line on the exception (:func:`result_note`)."""
        src = self.staging
        files = src is not None and any(f for _, _, f in os.walk(src))
        if src is not None and not files:
            _remove(src)
        prev = (f" ({self.shown} still holds the previous complete run)"
                if os.path.lexists(self.dest) else "")
        if src is not None and files:
            note = (f"{self.shown} not updated{prev}: the stopped run's partial output is in "
                    f"{self.shown.parent / src.name} (the next run into {self.shown} removes "
                    f"it)")
        elif not isinstance(exc, Exception):  # an interrupt; an error says what went wrong
            note = f"nothing written to {self.shown}{prev}"
        else:
            return
        setattr(exc, _NOTE, note)
        add_note = getattr(exc, "add_note", None)  # Python 3.11+: shown with the traceback
        if callable(add_note):
            add_note(note)


_NOTE = "gpucontrol_result_note"


def result_note(exc: BaseException) -> str | None:
    """What a :func:`result_set` left behind when ``exc`` stopped it, as one line: where
    the partial output is, or that nothing was written; None if it says nothing.

    Parameters
    ----------
    exc : BaseException
        The exception that ended the run.

    Returns
    -------
    str or None
        The line.
    """
    note = getattr(exc, _NOTE, None)
    return note if isinstance(note, str) else None


@contextlib.contextmanager
def result_set(folder: str | os.PathLike, owns: Iterable[str] | None = None
               ) -> Iterator[Path]:
    """Write an experiment's files into ``folder`` as one set.

    Within the block, every write of this module under ``folder`` goes to a hidden staging
    folder beside it (:func:`staged` gives the place for other writers). When the block ends
    normally the staged set replaces the previous one as a whole: files of an earlier run
    that this run did not write are gone. When it ends by an exception (an error, Ctrl-C,
    SIGTERM) ``folder`` is left as it was; the partial output stays in the staging folder,
    and :func:`result_note` of the exception says where in one line (or that nothing was
    written; the ``gpucontrol`` command prints it). The next run into
    ``folder`` removes what a killed run left (staging folders, temporary files). A set
    opened inside another one's folder joins it.

    Parameters
    ----------
    folder : str or os.PathLike
        The experiment's folder.
    owns : iterable of str or None
        None: the folder is the experiment's own, replaced as a whole. Names: the files the
        experiment writes into a folder that may hold others (``--out`` of ``calibrate``,
        ``cluster``); then only those are replaced or removed, and the rest is left alone.

    Yields
    ------
    Path
        ``folder``.
    """
    dest = _abs(folder)
    with _SETS_LOCK:
        joined = any(_under(dest, s.dest) or (s.staging is not None and _under(dest, s.staging))
                     for s in _SETS)
        rs = None if joined else _ResultSet(dest, Path(folder),
                                            None if owns is None else frozenset(owns))
        if rs is not None:
            _SETS.append(rs)
    if rs is None:
        yield Path(folder)
        return
    try:
        yield Path(folder)
    except BaseException as exc:
        with _SETS_LOCK:
            _SETS.remove(rs)
        rs.abandon(exc)
        raise
    with _SETS_LOCK:
        _SETS.remove(rs)
    rs.commit()


def staged(path: str | os.PathLike) -> Path:
    """Where a write to ``path`` goes now: its place in the staging folder of the open
    :func:`result_set` that holds it (the staging folder is created if need be), else
    ``path`` itself. For writers outside this module (a subprocess's log, a work folder).

    Parameters
    ----------
    path : str or os.PathLike
        A file or folder where the result will be.

    Returns
    -------
    Path
        Where to write it now.
    """
    p = _abs(path)
    with _SETS_LOCK:
        for s in reversed(_SETS):
            if _under(p, s.dest):
                return s.path() / p.relative_to(s.dest)
    return Path(path)


def final(path: str | os.PathLike) -> Path:
    """The inverse of :func:`staged`: where a file written to ``path`` (in a staging folder)
    will be once its set is complete; ``path`` itself when it is in none.

    Parameters
    ----------
    path : str or os.PathLike
        A staged file.

    Returns
    -------
    Path
        Its place after the set is complete.
    """
    p = _abs(path)
    with _SETS_LOCK:
        for s in reversed(_SETS):
            if s.staging is not None and _under(p, s.staging):
                return s.shown / p.relative_to(s.staging)
    return Path(path)


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
