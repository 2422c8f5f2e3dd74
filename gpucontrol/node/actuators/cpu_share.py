"""The training's CPU share through the cgroup CPU controller: a restart-free spatial knob.

The CPU analogue of the training's MPS / SM share: the processes sit in a cgroup of their own
whose CPU bandwidth is capped at ``share_pct`` % of the machine (all CPUs):
``quota = share_pct / 100 * ncpus * period``. A change is one write to the controller file --
no restart, unlike MPS -- so it takes effect within one CFS period (100 ms by default).

Backends, chosen by :func:`detect_backend`:

- ``"cpu.max"``: cgroup v2 (``<group>/cpu.max`` = ``"<quota> <period>"``), where the v2
  hierarchy has the ``cpu`` controller;
- ``"cfs_quota_us"``: cgroup v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` under the ``cpu``
  hierarchy), the case on hybrid hosts whose v2 hierarchy has no controllers.

:class:`CpuShare` has the face a spatial-share actuator needs: ``set_share_pct(pct)`` returns
the measured change latency (s), ``granularity_pct`` and ``backend``. It creates its group when
missing, records the group each process comes from and moves the given processes (and their
descendants) in; :meth:`CpuShare.close` lifts the cap, returns every process to the group it
came from and removes a group it made. A set-up that fails part-way is undone the same way.

Examples
--------
>>> q, p = quota_for(50.0, ncpus=2, period_us=100_000)
>>> q, p
(100000, 100000)
>>> quota_for(100.0, ncpus=2)[0]
200000
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from gpucontrol._validate import in_range, int_at_least
from gpucontrol.errors import ConfigurationError
from gpucontrol.node.actuators.procs import descendants, read_stat
from gpucontrol.node.records import release_share

__all__ = ["CpuShare", "cgroup_of", "detect_backend", "group_path", "quota_for"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The kernel's smallest quota, microseconds.
MIN_QUOTA_US = 1000


def quota_for(share_pct: float, *, ncpus: int | None = None,
              period_us: int = 100_000) -> tuple[int, int]:
    """The ``(quota_us, period_us)`` that caps a group at ``share_pct`` % of ``ncpus`` CPUs.

    Parameters
    ----------
    share_pct : float
        Share of the whole machine, in (0, 100].
    ncpus : int or None
        CPUs of the machine (None: ``os.cpu_count()``).
    period_us : int
        CFS period, microseconds, in [1000, 1000000].

    Returns
    -------
    tuple of int
        Quota and period in microseconds (the quota at least the kernel's 1000 us).
    """
    in_range("share_pct", share_pct, 1e-9, 100.0)
    in_range("period_us", period_us, 1000, 1_000_000)
    n = int(ncpus or os.cpu_count() or 1)
    return max(MIN_QUOTA_US, round(share_pct / 100.0 * n * period_us)), int(period_us)


def _v2_has_cpu(root: Path) -> bool:
    try:
        return "cpu" in (root / "cgroup.controllers").read_text().split()
    except OSError:
        return False


def detect_backend(root: Path = CGROUP_ROOT) -> tuple[str, Path]:
    """Which CPU controller this host offers, and the directory groups are made under.

    Parameters
    ----------
    root : pathlib.Path
        The cgroup mount point (``/sys/fs/cgroup``).

    Returns
    -------
    tuple of (str, pathlib.Path)
        ``("cpu.max", root)`` on a v2 host with the cpu controller, ``("cpu.max",
        root/"unified")`` on a hybrid host whose v2 part has it, else ``("cfs_quota_us",
        <the v1 cpu hierarchy>)``.

    Raises
    ------
    ConfigurationError
        No writable CPU controller (the message says what was looked for).
    """
    for base in (root, root / "unified"):
        if _v2_has_cpu(base) and os.access(base, os.W_OK):
            return "cpu.max", base
    for name in ("cpu", "cpu,cpuacct"):
        v1 = root / name
        if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
            return "cfs_quota_us", v1
    raise ConfigurationError(f"no writable cgroup CPU controller under {root} (looked for "
                             "cgroup v2 'cpu' in cgroup.controllers and a v1 'cpu' hierarchy "
                             "with cpu.cfs_quota_us); --share-backend cpu needs one (root)")


def cgroup_of(pid: int, backend: str, base: Path) -> Path | None:
    """The group of ``pid`` in the CPU controller's hierarchy, as a directory under ``base``.

    Parameters
    ----------
    pid : int
        The process.
    backend : str
        ``"cpu.max"`` (the v2 hierarchy) or ``"cfs_quota_us"`` (the v1 ``cpu`` hierarchy).
    base : pathlib.Path
        That hierarchy's mount point (:func:`detect_backend`).

    Returns
    -------
    pathlib.Path or None
        The directory; None when the process is gone or its group is not visible from here.
    """
    try:
        text = Path(f"/proc/{int(pid)}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        hier, ctrls, rel = [*line.split(":", 2), "", ""][:3]
        v2 = hier == "0" and not ctrls
        if (v2 if backend == "cpu.max" else "cpu" in ctrls.split(",")):
            if not rel.startswith("/") or ".." in rel.split("/"):
                return None  # outside our cgroup namespace
            return base / rel.lstrip("/")
    return None


def _refusal(exc: OSError, pid: int, group: Path) -> OSError:
    """The error of a process the controller would not move, saying which and why."""
    why = exc.strerror or str(exc)
    try:
        rt = os.sched_getscheduler(pid) in (os.SCHED_FIFO, os.SCHED_RR)
    except OSError:
        rt = False
    if rt:
        why += (" (it runs under a real-time policy, SCHED_FIFO/SCHED_RR, which a cgroup v1 "
                "cpu group without a real-time budget, cpu.rt_runtime_us, refuses)")
    err = OSError(f"cannot move pid {pid} into {group}: {why}")
    err.errno = exc.errno
    return err


def group_path(name: str, root: Path = CGROUP_ROOT) -> Path:
    """Where :class:`CpuShare` puts the group ``name`` on this host (nothing is made).

    Parameters
    ----------
    name : str
        Group name, relative to the CPU controller's root.
    root : pathlib.Path
        The cgroup mount point.

    Returns
    -------
    pathlib.Path
        The group directory.

    Raises
    ------
    ConfigurationError
        No writable CPU controller (:func:`detect_backend`).
    """
    return detect_backend(Path(root))[1] / name


class CpuShare:
    """Cap a group of processes at a percentage of the machine's CPUs, without a restart.

    Set-up is all or nothing: if the group cannot be made, capped or every process moved in,
    whatever was done is undone (:meth:`close`: the processes back where they were, the group
    removed when it was made here) before the error is raised.

    Parameters
    ----------
    pids : iterable of int
        Processes to move into the group (their descendants follow).
    name : str
        Group name under the controller's root (a path relative to it); made when missing.
    share_pct : float
        Initial share in (0, 100].
    period_us : int
        CFS period in microseconds, in [1000, 1000000].
    ncpus : int or None
        CPUs the percentage is of (None: ``os.cpu_count()``).
    root : pathlib.Path
        The cgroup mount point.
    weight : int or None
        CPU weight of the group against its siblings, in [1, 10000] (cgroup v2 units, 100 the
        default; v1 ``cpu.shares`` = weight * 1024 / 100); None leaves it.
    on_record : callable or None
        Called with :meth:`record` whenever it changes: once the group exists, and with the
        groups the processes come from *before* they are moved (a write-ahead for a crash
        clean-up). An exception from it undoes the set-up like any other.

    Attributes
    ----------
    backend : str
        ``"cpu.max"`` (v2) or ``"cfs_quota_us"`` (v1).
    granularity_pct : float
        The smallest share step the controller can express (1 us of quota per period).
    min_share_pct : float
        The smallest share (the kernel's 1 ms minimum quota).
    origins : list of dict
        ``{"pid", "start", "cgroup"}`` for every process moved in: its start time (clock
        ticks) and the group it came from, where :meth:`close` returns it.
    """

    def __init__(self, pids: Iterable[int] = (), *, name: str = "gpucontrol-training",
                 share_pct: float = 100.0, period_us: int = 100_000,
                 ncpus: int | None = None, root: Path = CGROUP_ROOT,
                 weight: int | None = None,
                 on_record: Callable[[dict[str, object]], None] | None = None) -> None:
        self.backend, self.base = detect_backend(Path(root))
        self.ncpus = int_at_least("ncpus", int(ncpus or os.cpu_count() or 1), 1)
        self.period_us = int(in_range("period_us", period_us, 1000, 1_000_000))
        self.granularity_pct = 100.0 / (self.ncpus * self.period_us)
        self.min_share_pct = 100.0 * MIN_QUOTA_US / (self.ncpus * self.period_us)
        w = None if weight is None else int(in_range("weight", weight, 1, 10000))
        self.path = self.base / name
        self._made = False
        self._on_record = on_record
        self.origins: list[dict[str, object]] = []
        self.share_pct = 100.0
        self.changes: list[float] = []
        try:
            if not self.path.is_dir():
                self.path.mkdir(parents=False)
                self._made = True
            self._publish()  # from here a crash clean-up lifts the cap and removes the group
            if self.backend == "cfs_quota_us":
                (self.path / "cpu.cfs_period_us").write_text(str(self.period_us))
            if w is not None:
                if self.backend == "cpu.max":
                    (self.path / "cpu.weight").write_text(str(w))
                else:
                    (self.path / "cpu.shares").write_text(str(max(2, w * 1024 // 100)))
            self.set_share_pct(share_pct)
            self.add(pids)
        except BaseException:
            self.close()  # nothing half-done: the processes back home, our group removed
            raise

    def _publish(self) -> None:
        if self._on_record is not None:
            self._on_record(self.record())

    # ---------------------------------------------------------------- membership
    def _procs_file(self, group: Path) -> Path:
        return group / "cgroup.procs"

    def _inside(self, pid: int) -> bool:
        home = cgroup_of(pid, self.backend, self.base)
        return home is not None and (home == self.path or self.path in home.parents)

    def _origin(self, pid: int) -> dict[str, object] | None:
        st = read_stat(pid)
        home = cgroup_of(pid, self.backend, self.base)
        if st is None or home is None:
            return None  # gone
        if home == self.path or self.path in home.parents:
            home = self.path.parent  # already inside: the record knows no other home
        return {"pid": pid, "start": st.start_ticks, "cgroup": str(home)}

    def add(self, pids: Iterable[int]) -> list[int]:
        """Move processes and their descendants into the group.

        The group each one comes from is recorded first (:attr:`origins`, passed to
        ``on_record``), where :meth:`close` returns it. A descendant forked while the moves
        run is picked up by a second scan.

        Parameters
        ----------
        pids : iterable of int
            The processes.

        Returns
        -------
        list of int
            The PIDs moved (ones that exited meanwhile are skipped).

        Raises
        ------
        OSError
            The controller refused a process (the message says which, and why); the ones
            moved before it stay in the group (the constructor undoes them).
        """
        roots = list(pids)
        known = {(o["pid"], o["start"]) for o in self.origins}
        moved: list[int] = []
        seen: set[int] = set()
        for scan in range(3):
            todo = [p for p in dict.fromkeys(roots + descendants(roots)) if p not in seen]
            seen.update(todo)
            if scan:  # forked in the group by a process already moved: it needs no move
                todo = [p for p in todo if not self._inside(p)]
            if not todo:
                break
            new = [o for o in map(self._origin, todo)
                   if o is not None and (o["pid"], o["start"]) not in known]
            if new:
                self.origins += new
                known |= {(o["pid"], o["start"]) for o in new}
                self._publish()  # written before the moves
            for pid in todo:
                try:
                    self._procs_file(self.path).write_text(str(pid))
                except OSError as exc:
                    if exc.errno == errno.ESRCH:
                        continue
                    raise _refusal(exc, pid, self.path) from None
                moved.append(pid)
        return moved

    def members(self) -> list[int]:
        """PIDs in the group now.

        Returns
        -------
        list of int
            The group's ``cgroup.procs``.
        """
        try:
            return [int(x) for x in self._procs_file(self.path).read_text().split()]
        except OSError:
            return []

    # ---------------------------------------------------------------- the knob
    def _write(self, quota_us: int | None) -> None:
        if self.backend == "cpu.max":
            q = "max" if quota_us is None else str(quota_us)
            (self.path / "cpu.max").write_text(f"{q} {self.period_us}")
        else:
            (self.path / "cpu.cfs_quota_us").write_text("-1" if quota_us is None
                                                        else str(quota_us))

    def read_quota_us(self) -> int | None:
        """The quota in force (None: no cap).

        Returns
        -------
        int or None
            Microseconds per period.
        """
        if self.backend == "cpu.max":
            q = (self.path / "cpu.max").read_text().split()[0]
            return None if q == "max" else int(q)
        v = int((self.path / "cpu.cfs_quota_us").read_text())
        return None if v < 0 else v

    def set_share_pct(self, pct: float) -> float:
        """Cap the group at ``pct`` % of the machine; 100 lifts the cap.

        Parameters
        ----------
        pct : float
            Share in (0, 100] (below :attr:`min_share_pct` it is raised to it).

        Returns
        -------
        float
            The measured change latency in seconds: the write and its read-back; the kernel
            enforces the new quota from its next period (``period_us``).
        """
        in_range("share_pct", pct, 1e-9, 100.0)
        t0 = time.perf_counter()
        quota = None if pct >= 100.0 else quota_for(pct, ncpus=self.ncpus,
                                                    period_us=self.period_us)[0]
        self._write(quota)
        got = self.read_quota_us()
        dt = time.perf_counter() - t0
        if got != quota:
            raise OSError(f"{self.path}: wrote quota {quota}, read back {got}")
        self.share_pct = float(pct)
        self.changes.append(dt)
        return dt

    def throttled_s(self) -> float:
        """Total time the group was throttled so far (``cpu.stat``), seconds.

        Returns
        -------
        float
            Throttled time.
        """
        try:
            text = (self.path / "cpu.stat").read_text()
        except OSError:
            return float("nan")
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == "throttled_usec":
                return int(v) / 1e6
            if k == "throttled_time":  # v1, nanoseconds
                return int(v) / 1e9
        return float("nan")

    def record(self) -> dict[str, object]:
        """What a crash clean-up needs to lift this cap and return the processes (the state
        file's ``share`` record, :func:`gpucontrol.node.records.release_share`)."""
        return {"path": str(self.path), "backend": self.backend, "made": self._made,
                "root": str(self.base), "origins": [dict(o) for o in self.origins]}

    def close(self) -> None:
        """Lift the cap, return each member to the group it came from (a worker forked in the
        group: its parent's; a group that is gone: the parent group) and remove a group we
        made (:func:`gpucontrol.node.records.release_share`)."""
        release_share(self.record())
        self._made = False

    def __enter__(self) -> CpuShare:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
