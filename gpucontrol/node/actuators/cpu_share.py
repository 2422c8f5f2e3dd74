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
missing, moves the given processes (and their descendants) in, and :meth:`CpuShare.close`
lifts the cap, moves the processes to the parent group and removes a group it made.

Examples
--------
>>> q, p = quota_for(50.0, ncpus=2, period_us=100_000)
>>> q, p
(100000, 100000)
>>> quota_for(100.0, ncpus=2)[0]
200000
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from gpucontrol._validate import in_range, int_at_least
from gpucontrol.errors import ConfigurationError
from gpucontrol.node.actuators.procs import descendants

__all__ = ["CpuShare", "detect_backend", "quota_for"]

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


class CpuShare:
    """Cap a group of processes at a percentage of the machine's CPUs, without a restart.

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

    Attributes
    ----------
    backend : str
        ``"cpu.max"`` (v2) or ``"cfs_quota_us"`` (v1).
    granularity_pct : float
        The smallest share step the controller can express (1 us of quota per period).
    min_share_pct : float
        The smallest share (the kernel's 1 ms minimum quota).
    """

    def __init__(self, pids: Iterable[int] = (), *, name: str = "gpucontrol-training",
                 share_pct: float = 100.0, period_us: int = 100_000,
                 ncpus: int | None = None, root: Path = CGROUP_ROOT,
                 weight: int | None = None) -> None:
        self.backend, self.base = detect_backend(Path(root))
        self.ncpus = int_at_least("ncpus", int(ncpus or os.cpu_count() or 1), 1)
        self.period_us = int(in_range("period_us", period_us, 1000, 1_000_000))
        self.granularity_pct = 100.0 / (self.ncpus * self.period_us)
        self.min_share_pct = 100.0 * MIN_QUOTA_US / (self.ncpus * self.period_us)
        self.path = self.base / name
        self._made = False
        if not self.path.is_dir():
            self.path.mkdir(parents=False)
            self._made = True
        self.share_pct = 100.0
        self.changes: list[float] = []
        if self.backend == "cfs_quota_us":
            (self.path / "cpu.cfs_period_us").write_text(str(self.period_us))
        if weight is not None:
            w = int(in_range("weight", weight, 1, 10000))
            if self.backend == "cpu.max":
                (self.path / "cpu.weight").write_text(str(w))
            else:
                (self.path / "cpu.shares").write_text(str(max(2, w * 1024 // 100)))
        self.set_share_pct(share_pct)
        self.add(pids)

    # ---------------------------------------------------------------- membership
    def _procs_file(self, group: Path) -> Path:
        return group / "cgroup.procs"

    def add(self, pids: Iterable[int]) -> list[int]:
        """Move processes and their descendants into the group.

        Parameters
        ----------
        pids : iterable of int
            The processes.

        Returns
        -------
        list of int
            The PIDs moved (ones that exited meanwhile are skipped).
        """
        roots = list(pids)
        moved = []
        for pid in roots + descendants(roots):
            try:
                self._procs_file(self.path).write_text(str(pid))
                moved.append(pid)
            except ProcessLookupError:
                continue
            except OSError as exc:
                if exc.errno == 3:  # ESRCH
                    continue
                raise
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
        """What a crash clean-up needs to lift this cap (the state file's ``share`` record,
        :func:`gpucontrol.node.records.release_share`)."""
        return {"path": str(self.path), "backend": self.backend, "made": self._made}

    def close(self) -> None:
        """Lift the cap, move the members to the parent group, remove a group we made."""
        try:
            self._write(None)
        except OSError:
            pass
        for pid in self.members():
            try:
                self._procs_file(self.path.parent).write_text(str(pid))
            except OSError:
                pass
        if self._made:
            for _ in range(50):
                try:
                    self.path.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)
            self._made = False

    def __enter__(self) -> CpuShare:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
