"""Private runtime files of the daemon: where they live and how they are created.

Every file the daemon shares with other processes (the latency socket, the state file, the
hook file) is created mode 0600 inside a directory the daemon owns (mode 0700), without
following symbolic links, so another user can neither read nor plant them.

Default directory: ``$GPUCONTROL_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/gpucontrol``, else
``/run/gpucontrol`` for root, else ``/tmp/gpucontrol-<uid>``.
"""

from __future__ import annotations

import errno
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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40


def _check_dir(st: os.stat_result, shown: str, *, last: bool) -> None:
    """A directory on the way to our files: owned by us or root, and not writable by group or
    others unless sticky (where nobody may rename or remove what we create)."""
    if st.st_uid not in (os.geteuid(), 0):
        what = "is" if last else "(an ancestor of the runtime directory) is"
        raise ValueError(f"{shown} {what} owned by uid {st.st_uid}, not by us "
                         f"(uid {os.geteuid()}) or root")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise ValueError(f"{shown} is writable by group or others (mode "
                         f"{stat.S_IMODE(st.st_mode):o}); use a private directory")


def open_private_dir(path: str | os.PathLike[str], *, create: bool = False) -> int:
    """Open ``path`` as a directory file descriptor, checking *every* directory on the way.

    The walk starts at ``/`` and opens one component at a time relative to the previous one
    (``O_DIRECTORY | O_NOFOLLOW``), so nothing can be swapped in between a check and a use.
    Each directory must be owned by us or root and not be writable by group or others unless
    it is sticky (like ``/tmp``). A symbolic link on the way is followed only when it is owned
    by us or root (its directory already passed, so nobody else can have planted it). With
    ``create``, missing directories are created mode 0700; an existing one's mode is never
    changed.

    Parameters
    ----------
    path : str or os.PathLike
        The directory.
    create : bool
        Create missing directories (mode 0700), like ``mkdir -p``.

    Returns
    -------
    int
        An ``O_DIRECTORY`` descriptor of the checked directory; the caller closes it.

    Raises
    ------
    ValueError
        A directory on the way is another user's, writable by others, or not a directory
        (the message names it).
    FileNotFoundError
        A directory on the way is missing and ``create`` is false: an OS condition, so a
        failed write-ahead holds the sleep actuator instead of stopping it.
    """
    todo = [c for c in os.path.abspath(os.fspath(path)).split("/") if c][::-1]
    fd = os.open("/", _DIR_FLAGS)
    shown = "/"
    links = 0
    try:
        _check_dir(os.fstat(fd), shown, last=not todo)
        while todo:
            name = todo.pop()
            shown = os.path.join(shown, name)
            if name == "..":  # only from a link's target; abspath removed the others
                nfd = os.open("..", _DIR_FLAGS, dir_fd=fd)
            else:
                try:
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise FileNotFoundError(errno.ENOENT, f"{shown} does not exist") from None
                    try:
                        os.mkdir(name, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:  # ELOOP (a link) or ENOTDIR
                    st = os.lstat(name, dir_fd=fd)
                    if not stat.S_ISLNK(st.st_mode):
                        raise ValueError(f"{shown} exists and is not a directory") from None
                    if not todo and create:
                        raise ValueError(f"{shown} must be a real directory, not a link"
                                         ) from None
                    if st.st_uid not in (os.geteuid(), 0):
                        raise ValueError(f"{shown} is a link owned by uid {st.st_uid}") from exc
                    links += 1
                    if links > _MAX_LINKS:
                        raise ValueError(f"too many links resolving {path}") from None
                    target = os.readlink(name, dir_fd=fd)
                    todo.extend([c for c in target.split("/") if c and c != "."][::-1])
                    if target.startswith("/"):
                        os.close(fd)
                        fd = os.open("/", _DIR_FLAGS)
                        shown = "/"
                    continue
            os.close(fd)
            fd = nfd
            _check_dir(os.fstat(fd), shown, last=not todo)
        return fd
    except BaseException:
        os.close(fd)
        raise


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (mode 0700) if missing, or check an existing one, and check every
    ancestor (see :func:`open_private_dir`): it must be a real directory (not a link), owned by
    us or root, and not writable by others unless sticky (like /tmp, where our files are then
    created exclusively). An existing directory's mode is never changed."""
    p = Path(path)
    os.close(open_private_dir(p, create=True))
    return p


def create_exclusive(path: str | os.PathLike[str], flags: int = os.O_WRONLY, *,
                     dir_fd: int | None = None) -> tuple[int, str]:
    """Create a fresh temporary file next to ``path`` (mode 0600, O_EXCL, no symlinks);
    returns (fd, its path -- its name alone when ``dir_fd`` is given). Nobody can have
    planted it, even in a shared directory."""
    p = Path(path)
    for _ in range(16):
        tmp = str(p.with_name(f".{p.name}.{secrets.token_hex(6)}.tmp"))
        if dir_fd is not None:
            tmp = os.path.basename(tmp)
        try:
            fd = os.open(tmp, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        os.fchmod(fd, 0o600)
        return fd, tmp
    raise FileExistsError(f"cannot create a temporary file next to {p}")


def _check_private_stat(st: os.stat_result, path: object) -> os.stat_result:
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if st.st_uid != os.geteuid():
        raise ValueError(f"{path} is owned by uid {st.st_uid}, not by us")
    if st.st_mode & 0o022:
        raise ValueError(f"{path} is writable by group or others (mode {st.st_mode & 0o777:o})")
    return st


def read_private_file(path: str | os.PathLike[str], limit: int = 1 << 20) -> bytes:
    """Read a file of ours: opened with ``O_NOFOLLOW`` (non-blocking, so a FIFO cannot hang
    us) and checked on the open descriptor (a regular file we own that no one else can
    write), so the file checked is the file read. Raises ValueError, or FileNotFoundError
    when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
                     | os.O_NOCTTY)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if os.path.islink(path):
            raise ValueError(f"{path} is a symbolic link") from None
        raise
    try:
        _check_private_stat(os.fstat(fd), path)
        chunks = []
        while limit > 0:
            b = os.read(fd, min(limit, 1 << 16))
            if not b:
                break
            chunks.append(b)
            limit -= len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_private_atomic(path: str | os.PathLike[str], data: bytes, *,
                         flags: int = os.O_WRONLY,
                         before_rename: Callable[[int], None] | None = None,
                         mode: int = 0o600, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (exclusive temp file + rename), mode 0600.

    The one atomic-write helper of the node: a reader sees either the old or the new
    content, never a torn write. The directory is opened once, every ancestor checked
    (:func:`open_private_dir`), and the temporary file is created and renamed relative to
    that descriptor, so a directory swapped for a link in between cannot redirect the write.
    Durable by default: the temporary file's data is fsynced before the rename and the
    directory (the same descriptor) after it, so after a power loss the file holds the old
    or the new content, never nothing (the state file lists what a restarted daemon must
    resume). Stdlib only (the guardian loads this module by path).

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
    mode : int
        The file's final mode (0600; 0644 for a metrics text file others must read).
    durable : bool
        fsync the file before the rename and the directory after it (False: only for a
        file rewritten every period whose loss costs nothing, the metrics text file).

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "f.json")
    >>> write_private_atomic(p, b"{}")
    >>> open(p).read(), oct(os.stat(p).st_mode & 0o777)
    ('{}', '0o600')
    """
    p = os.path.abspath(os.fspath(path))
    name = os.path.basename(p)
    dfd = open_private_dir(os.path.dirname(p))
    try:
        fd, tmp = create_exclusive(p, flags, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if mode != 0o600:
                    os.fchmod(fd, mode)
                if before_rename is not None:
                    before_rename(fd)
                if durable:
                    os.fsync(fd)  # the data on disk before the name points at it
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:  # a failed write or rename leaves no temporary file behind
            _unlink_at(tmp, dfd)
            raise
        if durable:
            os.fsync(dfd)  # the rename itself on disk
    finally:
        os.close(dfd)


def _unlink_at(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def resolve_group(group: str | int) -> int:
    """The group id of ``--socket-group`` (a name or a number); ValueError when unknown."""
    import grp

    text = str(group).strip()
    try:
        if text.isdigit():
            return grp.getgrgid(int(text)).gr_gid
        return grp.getgrnam(text).gr_gid
    except (KeyError, OverflowError):
        raise ValueError(f"--socket-group must be an existing group name or id, got "
                         f"{group!r}") from None


def grant_group(gid: int, *, rw: tuple[str, ...] = (), ro: tuple[str, ...] = ()) -> None:
    """Give group ``gid`` access to our files: ``rw`` (the latency socket) become 0660,
    ``ro`` (the hook file) 0640, and every directory holding them gets group search
    permission (g+x, never g+w or a listing). Links are never followed."""
    dirs = {os.path.dirname(os.path.abspath(p)) for p in (*rw, *ro)}
    for d in sorted(dirs):
        fd = open_private_dir(d)
        try:
            st = os.fstat(fd)
            if st.st_uid == os.geteuid():  # only a directory of ours is changed
                if st.st_gid != gid:
                    os.fchown(fd, -1, gid)
                os.fchmod(fd, stat.S_IMODE(st.st_mode) | 0o010)
        finally:
            os.close(fd)
    for paths, mode in ((rw, 0o660), (ro, 0o640)):
        for p in paths:
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
                raise ValueError(f"{p} is a link or not ours; not granting it to a group")
            os.chown(p, -1, gid, follow_symlinks=False)
            os.chmod(p, mode)  # not a link (checked), inside a checked private directory


def unlink_quietly(path: str | os.PathLike[str] | None) -> None:
    if path is None:
        return
    try:
        os.unlink(path)
    except OSError:
        pass
