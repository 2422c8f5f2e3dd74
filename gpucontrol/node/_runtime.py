"""Private runtime files of the daemon: where they live and how they are created.

Every file the daemon shares with other processes (the latency socket, the state file, the
hook file) is created mode 0600 inside a directory the daemon owns (mode 0700), without
following symbolic links, so another user can neither read nor plant them.

Default directory: ``$GPUCONTROL_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/gpucontrol``, else
``/run/gpucontrol`` for root, else ``/tmp/gpucontrol-<uid>``.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

ENV_RUNTIME_DIR = "GPUCONTROL_RUNTIME_DIR"


def runtime_dir() -> Path:
    """The default directory for the daemon's socket, state and hook files (not created)."""
    env = os.environ.get(ENV_RUNTIME_DIR)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "gpucontrol"
    if os.geteuid() == 0:
        return Path("/run/gpucontrol")
    return Path(f"/tmp/gpucontrol-{os.geteuid()}")


def default_path(kind: str, gpu: int = 0) -> Path:
    """Default file of one daemon: ``kind`` is ``sock``, ``state`` or ``hook``."""
    suffix = {"sock": ".sock", "state": ".state.json", "hook": ".hook"}[kind]
    return runtime_dir() / f"gpu{int(gpu)}{suffix}"


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (mode 0700) if missing, or check an existing one: it must be a real
    directory (not a link), owned by us or root, and not writable by others unless sticky
    (like /tmp, where our files are then created exclusively). An existing directory's mode
    is never changed."""
    p = Path(path)
    try:
        os.makedirs(p, mode=0o700, exist_ok=True)
    except FileExistsError:
        raise ValueError(f"{p} exists and is not a directory") from None
    st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{p} must be a real directory, not a link or a file")
    if st.st_uid not in (os.geteuid(), 0):
        raise ValueError(f"{p} is owned by uid {st.st_uid}, not by us (uid {os.geteuid()})")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise ValueError(f"{p} is writable by group or others (mode "
                         f"{stat.S_IMODE(st.st_mode):o}); use a private directory")
    return p


def create_exclusive(path: str | os.PathLike[str], flags: int = os.O_WRONLY) -> tuple[int, str]:
    """Create a fresh temporary file next to ``path`` (mode 0600, O_EXCL, no symlinks);
    returns (fd, its path). Nobody can have planted it, even in a shared directory."""
    p = Path(path)
    for _ in range(16):
        tmp = str(p.with_name(f".{p.name}.{secrets.token_hex(6)}.tmp"))
        try:
            fd = os.open(tmp, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
        except FileExistsError:
            continue
        os.fchmod(fd, 0o600)
        return fd, tmp
    raise FileExistsError(f"cannot create a temporary file next to {p}")


def check_private_file(path: str | os.PathLike[str]) -> os.stat_result:
    """lstat ``path`` and make sure it is a regular file we own that no one else can write.

    Raises ValueError otherwise (and FileNotFoundError when it does not exist)."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if st.st_uid != os.geteuid():
        raise ValueError(f"{path} is owned by uid {st.st_uid}, not by us")
    if st.st_mode & 0o022:
        raise ValueError(f"{path} is writable by group or others (mode {st.st_mode & 0o777:o})")
    return st


def write_private_atomic(path: str | os.PathLike[str], data: bytes, *,
                         flags: int = os.O_WRONLY,
                         before_rename: Callable[[int], None] | None = None) -> None:
    """Write ``data`` to ``path`` atomically (exclusive temp file + rename), mode 0600.

    The one atomic-write helper of the node: a reader sees either the old or the new
    content, never a torn write. Stdlib only (the guardian loads this module by path).

    Parameters
    ----------
    path : str or os.PathLike
        The file to replace; its directory should be private (:func:`ensure_private_dir`).
    data : bytes
        The whole new content.
    flags : int
        Open flags of the temporary file (``os.O_RDWR`` to map it in ``before_rename``).
    before_rename : callable or None
        Called with the temporary file's descriptor after ``data`` is written and before it
        is renamed into place (the hook writer maps the file here); if it raises, nothing is
        renamed and the temporary file is removed.

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "f.json")
    >>> write_private_atomic(p, b"{}")
    >>> open(p).read(), oct(os.stat(p).st_mode & 0o777)
    ('{}', '0o600')
    """
    fd, tmp = create_exclusive(path, flags)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if before_rename is not None:
            before_rename(fd)
    except BaseException:
        os.close(fd)
        unlink_quietly(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


def unlink_quietly(path: str | os.PathLike[str] | None) -> None:
    if path is None:
        return
    try:
        os.unlink(path)
    except OSError:
        pass
