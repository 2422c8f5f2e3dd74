"""Exclusive ownership between daemons: advisory ``flock`` locks on small files.

* The **owner lock** (``<state>.lock``): one daemon per state file. A second daemon that finds
  it held refuses to start *before touching anything* -- it neither resumes nor removes the
  first daemon's state file.
* **Target locks** (``target-<pid>-<start ticks>.lock`` and ``cgroup-<dev>-<ino>.lock`` in the
  runtime directory): one daemon per training process or cgroup, whatever its ``--gpu``, so two
  daemons never cycle the same process against each other. The CPU-share group
  (``--share-backend cpu``) is claimed by its path (``cgroup-share-<hash>.lock``), before it is
  made, so two daemons never cap one group against each other nor remove it under the other.

A lock is held by an open descriptor, so the kernel releases it when its daemon dies by any
means (SIGKILL included); the file left behind is stale and is reused or pruned. Files are
created mode 0600 without following links; after ``flock`` succeeds the descriptor is checked
to still be the file at that path (a concurrent release may have unlinked it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from pathlib import Path

__all__ = ["FileLock", "LockHeld", "TargetLocks", "cgroup_lock_name", "share_lock_name",
           "target_lock_name"]


class LockHeld(ValueError):
    """The lock belongs to another live process (``holder``: its pid when known)."""

    def __init__(self, message: str, holder: int | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class FileLock:
    """An exclusive, non-blocking ``flock`` on ``path``; :meth:`release` unlinks the file.

    Parameters
    ----------
    path : str or os.PathLike
        The lock file (its directory should be private).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.fd = -1

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def acquire(self) -> FileLock:
        """Take the lock or raise :class:`LockHeld` (never blocks).

        Returns
        -------
        FileLock
            ``self``, holding the lock.
        """
        for _ in range(16):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    raise ValueError(f"{self.path} is not a lock file of ours")
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise LockHeld(f"{self.path} is held", _read_pid(fd)) from None
                try:
                    now = os.lstat(self.path)
                except FileNotFoundError:
                    now = None
                if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)  # released and unlinked meanwhile: take the new file
                    continue
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.close(fd)
                raise
            self.fd = fd
            return self
        raise LockHeld(f"{self.path}: cannot take the lock (it keeps being replaced)")

    def release(self) -> None:
        """Unlink the file and drop the lock (idempotent)."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def target_lock_name(pid: int, start_ticks: int) -> str:
    """File name of the lock of one training process (pid plus start time: its identity).

    Parameters
    ----------
    pid : int
        The process.
    start_ticks : int
        Its start time in clock ticks (``/proc/PID/stat`` field 22).

    Returns
    -------
    str
        ``target-<pid>-<start>.lock``.
    """
    return f"target-{int(pid)}-{int(start_ticks)}.lock"


def cgroup_lock_name(path: str | os.PathLike[str]) -> str:
    """File name of the lock of one cgroup directory (device and inode: its identity).

    Parameters
    ----------
    path : str or os.PathLike
        The cgroup directory.

    Returns
    -------
    str
        ``cgroup-<dev>-<ino>.lock``.
    """
    st = os.stat(path)
    return f"cgroup-{st.st_dev}-{st.st_ino}.lock"


def share_lock_name(path: str | os.PathLike[str]) -> str:
    """File name of the lock of one CPU-share group, by its path (it may not exist yet).

    Parameters
    ----------
    path : str or os.PathLike
        The group directory, absolute.

    Returns
    -------
    str
        ``cgroup-share-<hash of the resolved path>.lock``.

    Examples
    --------
    >>> share_lock_name("/sys/fs/cgroup/cpu/a") == share_lock_name("/sys/fs/cgroup/cpu/b/../a")
    True
    """
    real = os.path.realpath(os.fspath(path))
    return f"cgroup-share-{hashlib.sha256(os.fsencode(real)).hexdigest()[:24]}.lock"


class TargetLocks:
    """The target locks one daemon holds, in one directory.

    Parameters
    ----------
    directory : str or os.PathLike
        Where the lock files live (the runtime directory shared by the node's daemons).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.held: dict[str, FileLock] = {}

    def claim(self, name: str, what: str) -> None:
        """Take the lock ``name`` (no-op when already ours).

        Parameters
        ----------
        name : str
            The lock file name (:func:`target_lock_name`, :func:`cgroup_lock_name`).
        what : str
            The target in words, for the error message.

        Raises
        ------
        LockHeld
            Another daemon controls it.
        """
        if name in self.held:
            return
        try:
            self.held[name] = FileLock(self.dir / name).acquire()
        except LockHeld as exc:
            who = f" (pid {exc.holder})" if exc.holder else ""
            raise LockHeld(f"{what} is already controlled by another daemon{who}; one daemon "
                           "per training process", exc.holder) from None

    def keep_only(self, names: set[str]) -> None:
        """Release every lock not in ``names``.

        Parameters
        ----------
        names : set of str
            The locks to keep.
        """
        for name in list(self.held):
            if name not in names:
                self.held.pop(name).release()

    def release_all(self) -> None:
        """Release every lock."""
        self.keep_only(set())

    def prune_stale(self) -> int:
        """Remove lock files nobody holds (left by daemons that died).

        Returns
        -------
        int
            How many were removed.
        """
        n = 0
        try:
            names = os.listdir(self.dir)
        except OSError:
            return 0
        for name in names:
            if not name.endswith(".lock") or not name.startswith(("target-", "cgroup-")):
                continue
            if name in self.held:
                continue
            lock = FileLock(self.dir / name)
            try:
                lock.acquire()
            except (LockHeld, OSError, ValueError):
                continue
            lock.release()
            n += 1
        return n
