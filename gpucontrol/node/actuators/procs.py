"""Processes the actuators may signal: identity through pidfds, descendants, security checks.

A PID alone is not an identity: once a process exits its PID can be handed to a new one. Every
process the actuators touch is therefore held as a :class:`ProcessHandle`: a pidfd
(``os.pidfd_open``) plus the process's start time (field 22 of ``/proc/PID/stat``). Signals go
through ``signal.pidfd_send_signal``, which can only ever reach the process the pidfd was
opened on; a recycled PID is never signaled.

Identities written to disk (the state file) are ``{"pid", "start", "ino"}``: the start time is
in clock ticks (10 ms), so a PID recycled within the same tick would match it; on kernels with
pidfs (6.9+) every process's pidfd has its own inode number, unique for the boot, which is
then recorded and compared too, making the identity exact.

Security rules (:func:`check_target`): never PID 1, never ourselves or one of our ancestors,
never a kernel thread, and only processes whose real, effective and saved uids are all in the
caller's explicit set ``uids`` (default: our own uid); a set naming another user needs root.
:func:`account_spec` resolves the account a launched training runs as.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection, Iterable
from dataclasses import dataclass

try:
    from gpucontrol.errors import TargetRefused
except ImportError:  # loaded by path in the guardian (python -I -S, without the package)

    class TargetRefused(ValueError):  # type: ignore[no-redef]
        """Stand-in for :class:`gpucontrol.errors.TargetRefused` in the guardian process."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` the actuators need."""

    pid: int
    state: str  # R, S, D, T (stopped), t (traced), Z (zombie), ...
    ppid: int
    start_ticks: int  # start time since boot, in clock ticks: with the pid, the identity
    flags: int


PF_KTHREAD = 0x00200000


def read_stat(pid: int) -> ProcStat | None:
    """Parse ``/proc/PID/stat``; None when the process does not exist (any more)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    except OSError:
        return None
    # comm (field 2) is in parentheses and may itself contain ')' or spaces.
    try:
        rest = raw[raw.rindex(b")") + 2:].split()
        return ProcStat(pid=int(pid), state=rest[0].decode(), ppid=int(rest[1]),
                        start_ticks=int(rest[19]), flags=int(rest[6]))
    except (ValueError, IndexError):
        return None


def proc_all_uids(pid: int) -> tuple[int, ...] | None:
    """(real, effective, saved, filesystem) uids of a process, or None when it is gone."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return tuple(int(x) for x in line.split()[1:5])
    except (OSError, ValueError):
        return None
    return None


def target_uids(uids: Collection[int] | None) -> frozenset[int]:
    """The uids a target may run as: ``uids``, or our own effective uid when None.

    Raises :class:`TargetRefused` when the set names another user and we are not root."""
    euid = os.geteuid()
    if uids is None:
        return frozenset({euid})
    out = frozenset(int(u) for u in uids)
    if euid != 0 and out - {euid}:
        raise TargetRefused(f"only root may signal other users' processes (uids "
                            f"{', '.join(str(u) for u in sorted(out - {euid}))})")
    return out


def stop_requested(pid: int) -> bool:
    """True when ``pid`` can run no more user code: stopped (state T) or a SIGSTOP pending.

    A runnable process that is sent SIGSTOP enters state T only once it gets a CPU; until then
    the signal is pending and it executes nothing. Measurements of the achieved stopped
    fraction count both (used by the tests and benchmarks/actuation.py)."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f:
                if line.startswith(b"State:") and line.split()[1] in (b"T", b"t"):
                    return True
                if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & (
                        1 << (signal.SIGSTOP - 1)):
                    return True
    except (OSError, ValueError, IndexError):
        return False
    return False


def ancestors(pid: int) -> list[int]:
    """PIDs of the parent chain of ``pid`` (nearest first, ending at 1 or where it breaks)."""
    out: list[int] = []
    seen = {pid}
    st = read_stat(pid)
    while st is not None and st.ppid > 0 and st.ppid not in seen:
        out.append(st.ppid)
        seen.add(st.ppid)
        st = read_stat(st.ppid)
    return out


def _children_map() -> dict[int, list[int]]:
    """ppid -> child PIDs, from one scan of /proc (the kernel here may lack
    /proc/PID/task/TID/children, which needs CONFIG_PROC_CHILDREN)."""
    out: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        st = read_stat(int(name))
        if st is not None:
            out.setdefault(st.ppid, []).append(st.pid)
    return out


def descendants(pids: Iterable[int]) -> list[int]:
    """All descendants of the given PIDs (breadth first, the PIDs themselves excluded)."""
    return [c for c, _p in descendant_edges(pids)]


def descendant_edges(pids: Iterable[int]) -> list[tuple[int, int]]:
    """``(child, parent)`` for every descendant of the given PIDs, breadth first (a parent
    always comes before its children), as one scan of /proc saw them."""
    roots = list(pids)
    tree = _children_map()
    out: list[tuple[int, int]] = []
    seen = set(roots)
    frontier = roots
    while frontier:
        nxt: list[int] = []
        for p in frontier:
            for c in tree.get(p, ()):
                if c not in seen:
                    seen.add(c)
                    out.append((c, p))
                    nxt.append(c)
        frontier = nxt
    return out


def check_target(pid: int, *, uids: Collection[int] | None = None) -> ProcStat:
    """Raise :class:`TargetRefused` unless the actuators may signal ``pid``; return its stat.

    Refused: PID <= 1, ourselves, our ancestors (our supervisor or shell), kernel threads,
    processes that do not exist, and processes with a real, effective or saved uid outside
    ``uids`` (default: our own effective uid only).

    Parameters
    ----------
    pid : int
        The process to check.
    uids : collection of int or None
        The uids a target may run as, given explicitly (another user's needs root); None:
        ours.

    Returns
    -------
    ProcStat
        The process's ``/proc/PID/stat`` fields.

    Raises
    ------
    TargetRefused
        The process may not be signalled; the message says why.
    """
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TargetRefused(f"pid must be an integer, got {pid!r}")
    allowed = target_uids(uids)
    if pid <= 1:
        raise TargetRefused(f"refusing to signal pid {pid} (init or invalid)")
    me = os.getpid()
    if pid == me:
        raise TargetRefused(f"refusing to signal ourselves (pid {pid})")
    if pid in ancestors(me):
        raise TargetRefused(f"refusing to signal pid {pid}: it is an ancestor of this process")
    st = read_stat(pid)
    if st is None:
        raise TargetRefused(f"no such process: {pid}")
    if st.flags & PF_KTHREAD or (st.ppid == 2 and pid != 2):
        raise TargetRefused(f"refusing to signal kernel thread {pid}")
    ids = proc_all_uids(pid)
    if ids is None:
        raise TargetRefused(f"no such process: {pid}")
    other = [u for u in ids[:3] if u not in allowed]
    if other:
        mine = ", ".join(str(u) for u in sorted(allowed))
        raise TargetRefused(
            f"pid {pid} runs as uid {other[0]}, not as an allowed uid ({mine}); only root "
            "may signal other users' processes, and only of the uids it is given (--allow-uid)")
    return st


_PIDFS: bool | None = None


def pidfs_unique_inodes() -> bool:
    """Whether pidfds carry a per-process inode number (pidfs, Linux 6.9+)."""
    global _PIDFS
    if _PIDFS is None:
        fds: list[int] = []
        try:
            for pid in (os.getpid(), os.getppid() or 1):
                fds.append(os.pidfd_open(pid))
            _PIDFS = os.fstat(fds[0]).st_ino != os.fstat(fds[1]).st_ino
        except (AttributeError, OSError):
            _PIDFS = False
        finally:
            for fd in fds:
                os.close(fd)
    return _PIDFS


class ProcessHandle:
    """One process, held by pidfd: signals can never reach a recycled PID.

    Use :meth:`open` (which checks :func:`check_target`); :meth:`signal` returns False once the
    process is gone instead of raising.

    Parameters
    ----------
    pid : int
        The process id.
    fd : int
        A pidfd on it (the handle owns it and closes it in :meth:`close`).
    start_ticks : int
        Its start time in clock ticks since boot (``/proc/PID/stat`` field 22).
    """

    __slots__ = ("_fd", "ino", "pid", "start_ticks")

    def __init__(self, pid: int, fd: int, start_ticks: int) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
        self._fd: int | None = fd
        self.ino = os.fstat(fd).st_ino if pidfs_unique_inodes() else None

    @classmethod
    def open(cls, pid: int, *, expected_start: int | None = None,
             expected_ino: int | None = None, uids: Collection[int] | None = None,
             check: bool = True) -> ProcessHandle:
        """Open a handle on ``pid``.

        ``expected_start`` (start ticks) and ``expected_ino`` (pidfs inode), e.g. from a state
        file, make the open fail with ProcessLookupError when the PID now belongs to a
        different process. With ``check``, :func:`check_target` (``uids``) runs once the
        pidfd is open, and the process is confirmed alive after it: the process checked is
        the one held (a PID recycled in between is never accepted).
        """
        if check:
            check_target(pid, uids=uids)  # a clear error for a missing process
        fd = os.pidfd_open(pid)
        try:
            if check:
                check_target(pid, uids=uids)
            st = read_stat(pid)
            # The stat we read belongs to the pidfd's process only if that process is still
            # alive (not reaped) now: a live process's PID cannot have been recycled.
            signal.pidfd_send_signal(fd, 0)
            if st is None:
                raise ProcessLookupError(pid)
            if expected_start is not None and st.start_ticks != expected_start:
                raise ProcessLookupError(f"pid {pid} was recycled (start time differs)")
            if (expected_ino is not None and pidfs_unique_inodes()
                    and os.fstat(fd).st_ino != expected_ino):
                raise ProcessLookupError(f"pid {pid} was recycled (pidfd inode differs)")
        except BaseException:
            os.close(fd)
            raise
        return cls(pid, fd, st.start_ticks)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("handle is closed")
        return self._fd

    def signal(self, sig: int) -> bool:
        """Send ``sig`` through the pidfd; False when the process has exited (or is closed)."""
        fd = self._fd
        if fd is None:
            return False
        try:
            signal.pidfd_send_signal(fd, sig)
            return True
        except ProcessLookupError:
            return False
        except OSError:
            return False

    def alive(self) -> bool:
        """True while the process exists and is not a zombie."""
        if not self.signal(0):
            return False
        st = self.stat()
        return st is not None and st.state != "Z"

    def stat(self) -> ProcStat | None:
        """Current /proc stat, or None when the PID no longer names this process."""
        st = read_stat(self.pid)
        if st is None or st.start_ticks != self.start_ticks:
            return None
        return st

    def state(self) -> str | None:
        st = self.stat()
        return None if st is None else st.state

    def identity(self) -> dict[str, int]:
        out = {"pid": self.pid, "start": self.start_ticks}
        if self.ino is not None:
            out["ino"] = self.ino
        return out

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"ProcessHandle(pid={self.pid}, start={self.start_ticks})"

    def __del__(self) -> None:  # pragma: no cover - best effort
        self.close()


def account_spec(user: str) -> str:
    """``uid:gid:name:home`` of an account given by name or number (what the launch gate
    switches to).

    Parameters
    ----------
    user : str
        A user name or a numeric uid.

    Returns
    -------
    str
        The account's uid, primary gid, name and home directory.

    Raises
    ------
    ValueError
        No such user.

    Examples
    --------
    >>> account_spec("0").split(":")[:3]
    ['0', '0', 'root']
    """
    import pwd

    try:
        pw = pwd.getpwuid(int(user)) if str(user).isdigit() else pwd.getpwnam(str(user))
    except (KeyError, OverflowError):
        raise ValueError(f"no such user: {user!r}") from None
    return f"{pw.pw_uid}:{pw.pw_gid}:{pw.pw_name}:{pw.pw_dir}"
