"""The cgroup v2 freezer as a sleep actuator: :class:`CgroupFreezer`.

Writing ``cgroup.freeze`` freezes every member of a group, whatever it forks; the kernel
reports completion in ``cgroup.events``. :func:`freezable_cgroup_for` finds a group that holds
exactly the training (and may be written), which :func:`~.sleep.choose_sleep_actuator` prefers
over signals. On hybrid hosts the v2 hierarchy is mounted at ``/sys/fs/cgroup/unified``; the
mount points come from /proc/self/mountinfo.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable
from pathlib import Path

from gpucontrol.node.actuators.duty import DutyCycler
from gpucontrol.node.actuators.procs import TargetRefused, check_target, descendants, read_stat

__all__ = ["CgroupFreezer", "cgroup2_mounts", "cgroup_of", "check_cgroup_holds",
           "find_freezable_cgroup", "freezable_cgroup_for", "locate_cgroup"]

#: Where /proc is read (tests point it at a fake one).
PROC = Path("/proc")

#: What the freezer needs when the training's group cannot be reached from the agent's view.
NAMESPACE_FIX = ("the freezer needs the agent in the host's cgroup namespace, with the host's "
                 "cgroup v2 hierarchy mounted")


def cgroup2_mounts() -> list[Path]:
    """Mount points of cgroup v2 hierarchies (``/sys/fs/cgroup`` or, on hybrid systems,
    ``/sys/fs/cgroup/unified``), from /proc/self/mountinfo."""
    out: list[Path] = []
    try:
        with open(PROC / "self" / "mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    out.append(Path(left.split()[4]))
    except OSError:
        pass
    return out


def locate_cgroup(pid: int) -> tuple[Path | None, str]:
    """The cgroup v2 directory of a process as this process sees it, or why there is none.

    ``/proc/PID/cgroup`` shows the group relative to the *reader's* cgroup namespace root: a
    group outside it (another pod's, read from an agent in a private cgroup namespace) shows
    ``..`` components (cgroup_namespaces(7)), and its directory is not under our cgroupfs
    mount; neither is a group the mounted hierarchy does not show (a container's own view).

    Parameters
    ----------
    pid : int
        The process.

    Returns
    -------
    tuple[pathlib.Path or None, str]
        ``(directory, "")``, or ``(None, reason)``: no v2 hierarchy, the process is gone or
        in the root group, its group lies outside our namespace or is missing under the mount
        (the reason names the path and, for those two, what to do).
    """
    mounts = cgroup2_mounts()
    if not mounts:
        return None, "no cgroup v2 hierarchy is mounted here"
    try:
        text = (PROC / str(int(pid)) / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, f"pid {pid} is gone (no /proc/{pid}/cgroup)"
    rel = next((ln[3:].strip() for ln in text.splitlines() if ln.startswith("0::")), None)
    if rel is None:
        return None, f"pid {pid} has no cgroup v2 group in /proc/{pid}/cgroup"
    if rel in ("", "/"):
        return None, f"pid {pid} is in the root cgroup"
    if not rel.startswith("/") or ".." in rel.split("/"):
        return None, (f"pid {pid}'s cgroup {rel} lies outside this agent's cgroup namespace "
                      f"(a private one, as in a container): its directory cannot be reached "
                      f"from here; {NAMESPACE_FIX}")
    path = mounts[0] / rel.lstrip("/")
    if not path.is_dir():
        return None, (f"pid {pid}'s cgroup {rel} is not under the cgroup v2 mount {mounts[0]} "
                      f"({path} does not exist: the mount shows another part of the "
                      f"hierarchy, e.g. a container's own group); "
                      f"{NAMESPACE_FIX}")
    return path, ""


def cgroup_of(pid: int) -> Path | None:
    """The cgroup v2 directory of a process, or None (see :func:`locate_cgroup` for why)."""
    return locate_cgroup(pid)[0]


def _cgroup_members(path: Path) -> list[int]:
    """PIDs in a cgroup and all its descendant cgroups."""
    pids: list[int] = []
    for d, _dirs, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(d, "cgroup.procs"), encoding="ascii") as f:
                    pids.extend(int(x) for x in f.read().split())
            except (OSError, ValueError):
                pass
    return pids


def check_cgroup_holds(group: str | os.PathLike[str], pids: Iterable[int]) -> None:
    """Make sure every training process sits in ``group`` (or a sub-group of it).

    Parameters
    ----------
    group : str or os.PathLike
        The cgroup directory given to the daemon.
    pids : iterable of int
        The training processes.

    Raises
    ------
    TargetRefused
        The directory is missing, or a process is outside it (freezing it would throttle
        nothing while reporting a stopped fraction).
    """
    if not os.path.isdir(group):
        raise TargetRefused(f"--cgroup {group} does not exist (it is created only for a "
                            "training the daemon launches with --training-cmd)")
    root = Path(os.path.realpath(group))
    for pid in pids:
        where, why = locate_cgroup(pid)
        if where is None:
            raise TargetRefused(f"--cgroup {group} does not contain training pid {pid} as "
                                f"this agent sees it: {why}")
        if not Path(os.path.realpath(where)).is_relative_to(root):
            raise TargetRefused(f"--cgroup {group} does not contain training pid {pid} "
                                f"(it is in {where}); move it there first")


def find_freezable_cgroup(pids: Iterable[int], *, uids: Collection[int] | None = None
                          ) -> tuple[Path | None, str]:
    """A cgroup that holds exactly these processes (and their descendants) and that we may
    freeze, or why there is none.

    Parameters
    ----------
    pids : iterable of int
        The training processes.
    uids : collection of int or None
        The uids members may run as (another user's: root only); None: ours.

    Returns
    -------
    tuple[pathlib.Path or None, str]
        ``(directory, "")``, or ``(None, reason)``, the reason naming the group or the path
        (:func:`locate_cgroup`): a shared group, the root group, a group outside our cgroup
        namespace, no write access...
    """
    pids = list(pids)
    if not pids:
        return None, "no training processes"
    groups: set[Path] = set()
    for pid in pids:
        where, why = locate_cgroup(pid)
        if where is None:
            return None, why
        groups.add(where)
    if len(groups) != 1:
        return None, f"the training's processes are in {len(groups)} groups, not one"
    (group,) = groups
    if not os.access(group / "cgroup.freeze", os.W_OK):
        return None, f"{group}/cgroup.freeze is missing or not writable by us"
    members = _cgroup_members(group)
    if not members:
        return None, f"{group} holds no process"
    allowed = set(pids) | set(descendants(pids))
    others = [m for m in members if m not in allowed]
    if others:
        return None, f"{group} holds other processes too (pid {others[0]})"
    try:
        for m in members:
            check_target(m, uids=uids)
    except TargetRefused as exc:
        return None, f"{group}: {exc}"
    return group, ""


def freezable_cgroup_for(pids: Iterable[int], *,
                         uids: Collection[int] | None = None) -> Path | None:
    """A cgroup that holds exactly these processes (and their descendants) and that we may
    freeze.

    Parameters
    ----------
    pids : iterable of int
        The training processes.
    uids : collection of int or None
        The uids members may run as (another user's: root only); None: ours.

    Returns
    -------
    pathlib.Path or None
        The group's directory; None when there is none (shared group, root group, no write
        access...; :func:`find_freezable_cgroup` says why).
    """
    return find_freezable_cgroup(pids, uids=uids)[0]


class CgroupFreezer(DutyCycler):
    """Duty-cycle a cgroup v2 group through ``cgroup.freeze`` (every member, whatever it forks).

    Parameters
    ----------
    cgroup : path
        The group's directory (it must have ``cgroup.freeze`` and ``cgroup.events``).
    uids : collection of int or None
        The uids members may run as (another user's: root only); None: ours.
    verify_mount : bool
        Require the directory to lie on a cgroup2 mount (turn off only to test against a
        directory that mimics the interface files).
    **kwargs : Any
        Passed to :class:`DutyCycler`.

    The members (recursively) are checked with :func:`~.procs.check_target` at construction
    and on every refresh: a group that holds this process, one of its ancestors, PID 1 or
    a process of a uid outside ``uids`` is refused and cycling stops.
    """

    def __init__(self, cgroup: str | os.PathLike[str], *, uids: Collection[int] | None = None,
                 verify_mount: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.path = Path(os.path.realpath(cgroup))
        self.uids = None if uids is None else frozenset(uids)
        if verify_mount:
            mounts = cgroup2_mounts()
            if not any(self.path != m and self.path.is_relative_to(m) for m in mounts):
                raise TargetRefused(f"{self.path} is not a non-root group of a cgroup v2 mount")
        self._freeze = self.path / "cgroup.freeze"
        self._events = self.path / "cgroup.events"
        if not self._freeze.exists() or not self._events.exists():
            raise TargetRefused(f"{self.path} has no cgroup.freeze/cgroup.events (not cgroup v2?)")
        self._check_members()
        self._populated = bool(_cgroup_members(self.path))
        self._fd: int | None = os.open(self._freeze, os.O_WRONLY | os.O_CLOEXEC)

    def _check_members(self) -> None:
        for pid in _cgroup_members(self.path):
            try:
                check_target(pid, uids=self.uids)
            except TargetRefused as exc:
                if read_stat(pid) is None:  # exited meanwhile
                    continue
                raise TargetRefused(f"cgroup {self.path}: {exc}") from None

    def members(self) -> list[int]:
        return _cgroup_members(self.path)

    def identities(self) -> list[dict]:
        return [{"cgroup": str(self.path)}]

    def _refresh(self) -> None:
        self._check_members()
        self._populated = bool(_cgroup_members(self.path))

    def _has_targets(self) -> bool:
        # an empty group is never "paused": its achieved stopped fraction stays an honest 0
        return self._populated

    def _write(self, value: bytes) -> None:
        if self._fd is None:
            return
        os.pwrite(self._fd, value, 0)

    def _do_pause(self) -> None:
        self._write(b"1")

    def _do_resume(self) -> None:
        self._write(b"0")

    def frozen(self) -> bool:
        """The kernel's view (``frozen`` in cgroup.events)."""
        try:
            for line in self._events.read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "frozen":
                    return v.strip() == "1"
        except OSError:
            pass
        return False

    def wait_frozen(self, frozen: bool = True, timeout: float = 1.0) -> bool:
        deadline = time.perf_counter() + timeout
        while self.frozen() != frozen:
            if time.perf_counter() > deadline:
                return False
            time.sleep(0.0002)
        return True

    def close(self) -> None:
        self.stop()
        with self._cond:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.pwrite(fd, b"0", 0)
            os.close(fd)
