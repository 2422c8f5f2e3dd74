"""An experiment's result files as one set, and the modes new result files get.

:func:`result_set` opens a set: while it is open, every write of :mod:`harness.results`
under its folder goes to a hidden staging folder beside it (``.<name>.partial-<pid>-*``,
:func:`staged` gives the place to other writers), which replaces the folder only when the run
completes. A run stopped by an error or a signal leaves the previous complete set untouched
(or no folder) and says on one line where its partial output is, or that it wrote nothing
(:func:`result_note`); staging folders and temporary files left by a killed run are removed by
the next run into the same folder. :mod:`harness.results` re-exports these names.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["final", "result_note", "result_set", "staged"]


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
