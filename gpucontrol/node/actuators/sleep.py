"""The sleep knob: put training processes into periodic sleep from outside.

The knob of the GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-B.

A duty cycler (:class:`~.duty.DutyCycler`) lets its targets run for a *run quantum* (about one
training iteration) and then holds them paused for the commanded sleep, so the stopped fraction
is ``sleep_s / (run_quantum_s + sleep_s)``. Two ways to pause:

* :class:`SignalDutyCycler` -- SIGSTOP/SIGCONT through pidfds to the given processes and their
  descendants (a recycled PID is never signaled; see :mod:`.procs`).
* :class:`CgroupFreezer` (:mod:`.cgroup`) -- writes ``cgroup.freeze`` of a cgroup v2 group that
  holds the training; the kernel freezes every member, whatever it forks.

:func:`choose_sleep_actuator` picks the freezer when the training sits alone in a cgroup we may
write, else signals. The third way, a cooperative hook that the training loop itself calls,
lives in :mod:`gpucontrol.node.hooks` (no signals at all).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from gpucontrol.node.actuators.cgroup import (
    CgroupFreezer,
    cgroup2_mounts,
    cgroup_of,
    find_freezable_cgroup,
    freezable_cgroup_for,
)
from gpucontrol.node.actuators.duty import DutyCycler, DutyStats
from gpucontrol.node.actuators.procs import (
    ProcessHandle,
    TargetRefused,
    descendant_edges,
    read_stat,
)

__all__ = ["CgroupFreezer", "DutyCycler", "DutyStats", "SignalDutyCycler", "cgroup2_mounts",
           "cgroup_of", "choose_sleep_actuator", "freezable_cgroup_for"]

logger = logging.getLogger(__name__)


class SignalDutyCycler(DutyCycler):
    """Duty-cycle processes (and, by default, their descendants) with SIGSTOP/SIGCONT.

    Parameters
    ----------
    pids : iterable of int
        The training processes. Each is checked with
        :func:`~gpucontrol.node.actuators.procs.check_target` (raises
        :class:`~gpucontrol.node.actuators.procs.TargetRefused`).
    include_descendants : bool
        Also pause their descendants (data-loader workers...), rediscovered every
        ``refresh_s``; a descendant that fails the security check is skipped, not signaled.
    uids : collection of int or None
        The uids the processes may run as (another user's: root only); None: ours.
    on_targets_changed : callable, optional
        Called with :meth:`identities` whenever the set changes, *before* any new member is
        signaled, so a state file can list every process that may be stopped (write-ahead).
    **kwargs : Any
        Passed to :class:`DutyCycler` (``run_quantum_s``, ``sleep_s``, ``gate``...).

    Examples
    --------
    >>> import subprocess, sys
    >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    >>> with SignalDutyCycler([child.pid], run_quantum_s=0.05, sleep_s=0.05) as cyc:
    ...     time.sleep(0.3)
    >>> 0.3 < cyc.stats().achieved_fraction < 0.7
    True
    >>> child.kill(); _ = child.wait()
    """

    def __init__(self, pids: Iterable[int], *, include_descendants: bool = True,
                 uids: Collection[int] | None = None,
                 on_targets_changed: Callable[[list[dict]], None] | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.include_descendants = bool(include_descendants)
        self.uids = None if uids is None else frozenset(uids)
        self.on_targets_changed = on_targets_changed
        self._roots: list[ProcessHandle] = []
        self._desc: dict[int, ProcessHandle] = {}
        self._refused: dict[tuple[int, int], None] = {}  # (pid, start ticks) refused
        self._unwritten = False
        self.set_targets(pids)

    def _open_roots(self, pids: Iterable[int]) -> list[ProcessHandle]:
        handles: list[ProcessHandle] = []
        try:
            for pid in dict.fromkeys(pids):
                handles.append(ProcessHandle.open(pid, uids=self.uids))
        except BaseException:
            for h in handles:
                h.close()
            raise
        return handles

    def set_targets(self, pids: Iterable[int]) -> None:
        """Replace the root processes (e.g. after an MPS restart); the old set is resumed."""
        new = self._open_roots(pids)
        with self._cond:
            if self._paused:
                self.resume_now()
            for h in self._roots + list(self._desc.values()):
                h.close()
            self._roots, self._desc, self._refused = new, {}, {}
            self._next_pause = None
            # write-ahead of the new set, whether or not the scan finds anything new: the
            # new roots themselves must be listed before their first pause (a failed write
            # holds the cycler until a refresh writes it)
            self._unwritten = True
            try:
                self._refresh(force_notify=True)
            except OSError as exc:
                self._set_held(f"write-ahead failed, holding: {type(exc).__name__}: {exc}")
            else:
                if self._held:
                    self._set_held(None)
            self._next_refresh = time.monotonic() + self.refresh_s
            self._cond.notify_all()

    @property
    def handles(self) -> list[ProcessHandle]:
        return self._roots + list(self._desc.values())

    def pids(self) -> list[int]:
        return [h.pid for h in self.handles]

    def identities(self) -> list[dict]:
        return [h.identity() for h in self.handles]

    def _has_targets(self) -> bool:
        return any(not h.closed for h in self._roots)

    def _refresh(self, force_notify: bool = False) -> None:
        changed = force_notify or self._unwritten
        for h in list(self._roots):
            if not h.alive():
                self._roots.remove(h)
                h.close()
                changed = True
        for pid, h in list(self._desc.items()):
            if not h.alive():
                del self._desc[pid]
                h.close()
                changed = True
        if self.include_descendants and self._roots:
            changed |= self._adopt_descendants()
        if changed and self.on_targets_changed is not None:
            self._unwritten = True  # until the callback (the write-ahead) succeeds
            self.on_targets_changed(self.identities())
        self._unwritten = False

    def _adopt_descendants(self) -> bool:
        """Open handles on new descendants; True when one was added.

        A PID seen in the /proc scan may exit and be recycled before ``pidfd_open``; the
        parent is therefore checked again *after* the pidfd pins the process: it must still
        be the child of a target we hold (alive, so its own PID cannot have been recycled).
        Refusals are remembered by (pid, start time) and forgotten once that process is gone.
        """
        held = {h.pid: h for h in self._roots} | self._desc
        added = False
        seen: set[tuple[int, int]] = set()
        for pid, parent in descendant_edges([h.pid for h in self._roots]):
            if pid in held:
                continue
            st = read_stat(pid)
            if st is None:
                continue
            key = (pid, st.start_ticks)
            seen.add(key)
            if key in self._refused:
                continue
            try:
                h = ProcessHandle.open(pid, uids=self.uids)
            except TargetRefused:
                self._refused[key] = None
                continue
            except (ProcessLookupError, OSError):
                continue
            now = h.stat()
            parent_h = held.get(parent)
            if (now is None or now.ppid != parent or parent_h is None
                    or not parent_h.alive()):
                h.close()  # recycled or re-parented since the scan: not ours
                continue
            self._desc[pid] = held[pid] = h
            added = True
        for key in list(self._refused):  # forget refusals of processes that are gone
            if key not in seen:
                del self._refused[key]
        return added

    def _do_pause(self) -> None:
        # roots first, so they cannot fork new children while the rest is being stopped
        for h in self._roots:
            h.signal(signal.SIGSTOP)
        for h in self._desc.values():
            h.signal(signal.SIGSTOP)

    def _do_resume(self) -> None:
        for h in self._roots:
            h.signal(signal.SIGCONT)
        for h in self._desc.values():
            h.signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop cycling, resume, and release the pidfds."""
        self.stop()
        with self._cond:
            for h in self.handles:
                h.close()
            self._roots, self._desc = [], {}


def choose_sleep_actuator(*, pids: Iterable[int] = (), cgroup: str | os.PathLike[str] | None = None,
                          method: str = "auto", uids: Collection[int] | None = None,
                          **kwargs) -> DutyCycler:
    """Build the sleep actuator for a set of training processes.

    Parameters
    ----------
    pids : iterable of int
        The training processes (needed by the signal method).
    cgroup : str, os.PathLike or None
        A cgroup v2 group holding the training; None: look for one.
    method : {'auto', 'signal', 'cgroup'}
        ``"cgroup"`` (the given ``cgroup``, else the processes' own group when they are alone
        in it), ``"signal"``, or ``"auto"`` -- the freezer when a suitable group exists
        (given, or found by :func:`~.cgroup.find_freezable_cgroup`), else signals, with one
        logged line saying why (the reason names the group or path: a shared group, or one
        outside the agent's cgroup namespace, as in a Kubernetes pod).
    uids : collection of int or None
        The uids the processes may run as (another user's: root only); None: ours.
    **kwargs : Any
        Passed to the cycler (:class:`DutyCycler` settings); ``on_targets_changed`` goes to
        the signal cycler only.

    Returns
    -------
    DutyCycler
        A :class:`CgroupFreezer` or a :class:`SignalDutyCycler`, not started.

    Raises
    ------
    ValueError
        An unknown method, ``"cgroup"`` without a usable group (the message says why), or no
        pids for signals.
    """
    if method not in ("auto", "signal", "cgroup"):
        raise ValueError(f"method must be one of 'auto', 'signal', 'cgroup', got {method!r}")
    pids = list(pids)
    on_change = kwargs.pop("on_targets_changed", None)
    if method != "signal":
        group, why = (Path(cgroup), "") if cgroup is not None else find_freezable_cgroup(
            pids, uids=uids)
        if group is not None:
            return CgroupFreezer(group, uids=uids, **kwargs)
        if method == "cgroup":
            raise ValueError(f"method='cgroup' needs a cgroup: none was given and the "
                             f"training's own group cannot be frozen: {why}; otherwise use "
                             f"the signal method")
        logger.info("sleep method auto: signals, not the cgroup freezer: %s", why)
    if not pids:
        raise ValueError("the signal method needs at least one pid")
    return SignalDutyCycler(pids, uids=uids,
                            on_targets_changed=on_change, **kwargs)
