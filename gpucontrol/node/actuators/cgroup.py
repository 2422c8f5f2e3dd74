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
           "freezable_cgroup_for"]


def cgroup2_mounts() -> list[Path]:
    """Mount points of cgroup v2 hierarchies (``/sys/fs/cgroup`` or, on hybrid systems,
    ``/sys/fs/cgroup/unified``), from /proc/self/mountinfo."""
    out: list[Path] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    out.append(Path(left.split()[4]))
    except OSError:
        pass
    return out


def cgroup_of(pid: int) -> Path | None:
    """The cgroup v2 directory of a process, or None (no v2 hierarchy or the root group)."""
    mounts = cgroup2_mounts()
    if not mounts:
        return None
    try:
        with open(f"/proc/{int(pid)}/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    rel = line[3:].strip()
                    if rel in ("", "/"):
                        return None
                    return mounts[0] / rel.lstrip("/")
    except OSError:
        return None
    return None


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
        where = cgroup_of(pid)
        if where is None or not Path(os.path.realpath(where)).is_relative_to(root):
            raise TargetRefused(f"--cgroup {group} does not contain training pid {pid} "
                                f"(it is in {where or 'the root group'}); move it there first")


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
        access...).
    """
    pids = list(pids)
    if not pids:
        return None
    groups = {cgroup_of(p) for p in pids}
    if len(groups) != 1 or None in groups:
        return None
    (group,) = groups
    assert group is not None
    if not os.access(group / "cgroup.freeze", os.W_OK):
        return None
    allowed = set(pids) | set(descendants(pids))
    members = _cgroup_members(group)
    if not members or any(m not in allowed for m in members):
        return None
    try:
        for m in members:
            check_target(m, uids=uids)
    except TargetRefused:
        return None
    return group


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
