"""The daemon's ownership and fault-path bookkeeping (a mixin of
:class:`gpucontrol.node.daemon.Daemon`).

* The state file: written under the cycler's lock, with the owned-resource records of
  :mod:`gpucontrol.node.records` and the controller record of :mod:`gpucontrol.node.persist`.
* Ownership: the owner lock of the state file, the per-target locks and the lock of the
  CPU-share group (:mod:`gpucontrol.node.locks`).
* Leftovers of a previous run: resumed, and what it owned ended.
* The sleep actuator's errors, reported when they change (held or stopped).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpucontrol.errors import ConfigurationError
from gpucontrol.node._runtime import unlink_quietly
from gpucontrol.node.actuators.procs import ProcessHandle, TargetRefused
from gpucontrol.node.actuators.sleep import DutyCycler
from gpucontrol.node.config import DaemonConfig
from gpucontrol.node.guardian import read_state, resume_targets, state_owner_alive, write_state
from gpucontrol.node.locks import (
    FileLock,
    LockHeld,
    TargetLocks,
    cgroup_lock_name,
    share_lock_name,
    target_lock_name,
)
from gpucontrol.node.persist import controller_record
from gpucontrol.node.records import cleanup_owned
from gpucontrol.two_tier import Actuation

__all__ = ["DaemonSafety"]


class DaemonSafety:
    """Mixin: what :class:`~gpucontrol.node.daemon.Daemon` does to own its state file and
    targets exclusively and to leave nothing behind (see docs/daemon.md, "Crash safety")."""

    cfg: DaemonConfig
    cycler: DutyCycler | None
    _state_lock: threading.Lock
    _records: dict[str, Any]
    _owner: FileLock | None
    _locks: TargetLocks | None
    _actuator_error: str

    emit: Callable[..., None]  # the daemon's event log
    say: Callable[[str], None]  # a message for the operator

    def write_state(self, targets: list[dict] | None = None, *, durable: bool = True) -> None:
        """The state file, now: ``targets`` (default: the cycler's). ``durable`` (fsynced
        around the rename) for every write but the controller's record each period, which
        changes no target: that one is taken under the cycler's lock, and an fsync there
        (milliseconds on a disk-backed runtime directory) would delay a pause or a resume
        every period for nothing a power cut leaves to resume."""
        cycler = self.cycler
        if targets is None and cycler is not None:
            # under the cycler's lock (taken before ours, as its own callback does): the set
            # written is the current one and no newer write can be overtaken by this one
            with cycler.lock:
                self._write_state_locked(cycler.identities(), durable)
            return
        self._write_state_locked(targets or [], durable)

    def _write_state_locked(self, targets: list[dict], durable: bool = True) -> None:
        with self._state_lock:
            write_state(self.cfg.state, targets, hook=self.cfg.hook,
                        extra={"socket": self.cfg.socket, **self._records}, durable=durable)

    def _record(self, **recs: Any) -> None:
        """Update the owned-resource records and write them to the state file at once."""
        self._records.update(recs)
        self.write_state()

    def _take_ownership(self) -> None:
        """The owner lock of the state file: a second daemon is refused before it touches
        anything (it neither resumes nor removes the first one's file)."""
        try:
            self._owner = FileLock(self.cfg.state + ".lock").acquire()
        except LockHeld as exc:
            who = f"pid {exc.holder}" if exc.holder else "pid unknown"
            raise ValueError(f"another daemon ({who}) uses {self.cfg.state}") from None
        self._locks = TargetLocks(Path(self.cfg.state).parent)
        self._locks.prune_stale()

    def _remove_state(self) -> None:
        """The state file removed, only one of ours (before the guardian stops: it resumes
        from the file when it is told to exit)."""
        if self._owner is not None:  # never a file another daemon owns
            unlink_quietly(self.cfg.state)

    def _release_ownership(self) -> None:
        """The target locks and the owner lock released: the last step of the undo path."""
        if self._locks is not None:
            self._locks.release_all()
        if self._owner is not None:
            self._owner.release()

    def _claim_targets(self, handles: list[ProcessHandle]) -> None:
        """One daemon per training process, whatever its --gpu (raises TargetRefused)."""
        assert self._locks is not None
        names = set()
        for h in handles:
            name = target_lock_name(h.pid, h.start_ticks)
            try:
                self._locks.claim(name, f"training pid {h.pid}")
            except LockHeld as exc:
                raise TargetRefused(str(exc)) from None
            names.add(name)
        self._locks.keep_only(names | {n for n in self._locks.held if n.startswith("cgroup-")})

    def _claim_cgroup(self, path: str | os.PathLike[str]) -> None:
        """One daemon per cgroup, too (raises TargetRefused)."""
        assert self._locks is not None
        try:
            self._locks.claim(cgroup_lock_name(path), f"cgroup {path}")
        except LockHeld as exc:
            raise TargetRefused(str(exc)) from None

    def _claim_share_group(self, path: str | os.PathLike[str]) -> str:
        """One daemon per CPU-share group, claimed before the group is made or touched (raises
        ConfigurationError naming ``--share-cgroup``); returns the lock file's path, which the
        ``share`` record names. A group left by a dead daemon is free again: its lock died with
        it."""
        assert self._locks is not None
        name = share_lock_name(path)
        try:
            self._locks.claim(name, f"CPU-share group {path}")
        except LockHeld as exc:
            who = f" (pid {exc.holder})" if exc.holder else ""
            raise ConfigurationError(
                f"--share-cgroup {self.cfg.share_cgroup}: the CPU-share group {path} is "
                f"already used by another daemon{who}; give each daemon its own "
                "--share-cgroup") from None
        return str(self._locks.dir / name)

    def _resume_leftovers(self) -> None:
        doc = read_state(self.cfg.state)  # ValueError for a file that is not ours
        if doc is None:
            return
        if state_owner_alive(doc):  # a daemon of an older version, without the lock
            if self._owner is not None:
                self._owner.release()
                self._owner = None
            raise ValueError(f"another daemon (pid {doc['daemon_pid']}) uses {self.cfg.state}")
        out = resume_targets(doc["targets"], doc.get("hook"))
        self.emit(event="leftovers_resumed", previous_pid=doc.get("daemon_pid"), **out)
        # what its guardian did not get to: a launched training, a private MPS daemon
        self.emit(event="leftovers_cleaned", **cleanup_owned(doc))
        unlink_quietly(self.cfg.state)

    def _resume_leftovers_and_fail(self) -> None:
        """A start refused for its model or settings still resumes what a dead daemon left
        paused in this state file (and ends what it owned): the only thing it touches. A
        file another daemon owns, or one that cannot be read, is left alone."""
        if not os.path.exists(self.cfg.state):
            return
        try:
            self._take_ownership()
            self._resume_leftovers()
        except Exception as exc:  # the start's own error is the one to report
            self.emit(event="leftovers_not_resumed", error=str(exc))

    def _persist(self, act: Actuation, closed_loop: bool = True) -> None:
        """The controller's last actuation into the state file (resumed by a restarted
        daemon while fresh, see :mod:`gpucontrol.node.persist`); in open loop the file is
        only rewritten when it has gone (removed under the running daemon)."""
        missing = not os.path.exists(self.cfg.state)
        if closed_loop:
            self._records["controller"] = controller_record(self.cfg, act.sleep_s, act.mps_pct)
        elif not missing:
            return
        try:
            self.write_state(durable=missing)
        except OSError as exc:  # next period again; the write-ahead has its own path
            self.emit(event="state_write_failed", error=str(exc))
            return
        if missing:
            self.say(f"state file {self.cfg.state} was removed while running; written again")
            self.emit(event="state_file_restored", state=self.cfg.state)

    def _check_actuator(self) -> None:
        """Report the sleep actuator's errors when they change: a held cycler (failed
        write-ahead, retried every refresh) or a stopped one (a refused target)."""
        err = (self.cycler.error or "") if self.cycler is not None else ""
        if err == self._actuator_error:
            return
        if err:
            held = self.cycler is not None and self.cycler.held
            self.say(f"sleep actuator {'held' if held else 'stopped'}: {err}")
            self.emit(event="actuator_error", error=err, held=held)
        else:
            self.emit(event="actuator_recovered", previous=self._actuator_error)
        self._actuator_error = err
