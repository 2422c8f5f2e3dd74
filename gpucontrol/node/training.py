"""The training the daemon controls: named (``--training-pid``), named by a file the training
writes (``--training-pid-file``, checked by :mod:`gpucontrol.node.pidfile`), or launched
(``--training-cmd``, through :class:`~gpucontrol.node.actuators.mps.MPSActuator`, which also
restarts it for an MPS share change).

Crash safety: a launched training is listed in the state file the moment it is spawned, and
waits at a gate until that write is done; a group made for it (``--cgroup``) is listed before
it is used. :meth:`Training.close` stops a launched training (SIGCONT, SIGTERM, SIGKILL after
30 s) and removes the group it made.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
from collections.abc import Callable
from typing import Any

from gpucontrol.errors import TargetRefused
from gpucontrol.node.actuators.cgroup import check_cgroup_holds
from gpucontrol.node.actuators.mps import MPSActuator
from gpucontrol.node.actuators.procs import ProcessHandle
from gpucontrol.node.knobs import Knob
from gpucontrol.node.pidfile import PidClaim, check_claim, resolve_pid_file
from gpucontrol.node.records import exit_status

__all__ = ["Training"]


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class Training(Knob):
    """The training's processes: resolved, launched, held by pidfd and locked.

    Parameters
    ----------
    cfg : DaemonConfig
        The settings (``training_*``, ``cgroup``, ``shadow``, ``ready``...).

    Attributes
    ----------
    pids : list of int
        The training's root processes once started.
    uids : frozenset of int
        The uids its processes may run as (a PID file narrows them to its owner).
    roots : list of ProcessHandle
        Handles on the root processes.
    trainer : MPSActuator or None
        The launcher of a training the daemon starts.
    """

    name = "training"

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.uids: frozenset[int] = cfg.target_uids()
        self.claim: PidClaim | None = None
        self.pids: list[int] = []
        self.roots: list[ProcessHandle] = []
        self.trainer: MPSActuator | None = None
        self.made_cgroup: str | None = None
        self.restart_thread: threading.Thread | None = None
        self._host: Any = None

    # ------------------------------------------------------------------ before anything
    def resolve(self, host: Any, on_wait: Callable[[str], object] | None = None) -> None:
        """``training_pid_file``: wait for it (until the daemon stops) and check what it
        names; the training may then run only as the file's owner. Touches nothing.

        Parameters
        ----------
        host : Daemon
            For its operator line and its stop-aware wait.
        on_wait : callable or None
            Called once, with the operator line, when the file is not there at once (the
            daemon answers the probes while it waits).
        """
        cfg = self.cfg
        if cfg.training_pid_file is None:
            return
        said = False
        while True:
            claim = resolve_pid_file(cfg.training_pid_file, cfg.pid_file_owners(),
                                     cfg.training_cgroup)
            if claim is not None:
                self.claim, self.uids = claim, frozenset({claim.owner})
                return
            if not said:
                why = f"waiting for the training's PID file {cfg.training_pid_file}"
                host.say(why)
                said = True
                if on_wait is not None:
                    on_wait(why)
            host._wait(0.5)
            if host._stopping:
                raise RuntimeError(f"stopped while waiting for {cfg.training_pid_file}")

    # ------------------------------------------------------------------ start
    def start(self, host: Any) -> None:
        """Make its group, launch it (or take the named processes), hold and lock them."""
        cfg = self.cfg
        self._host = host
        if cfg.cgroup and cfg.training_cmd and not os.path.isdir(cfg.cgroup):
            os.mkdir(cfg.cgroup)  # a group of our own for the training we launch
            self.made_cgroup = os.path.realpath(cfg.cgroup)
            host._record(made_cgroup=self.made_cgroup)
        if cfg.training_cmd:
            self.pids = [self._launch(host)]
        elif self.claim is not None:
            self.pids = [self.claim.pid]
        else:
            self.pids = list(cfg.training_pids)
        self.roots = [ProcessHandle.open(p, uids=self.uids) for p in self.pids]
        if self.claim is not None:  # the process held is the one the file named, in its cgroup
            check_claim(self.claim, cfg.training_cgroup)
            if not self.roots[0].alive():
                raise TargetRefused(f"pid {self.claim.pid} of {self.claim.path} exited")
        host._claim_targets(self.roots)
        if cfg.cgroup and cfg.sleep_method != "hook":
            check_cgroup_holds(cfg.cgroup, self.pids)  # never freeze a group without it

    def _launch(self, host: Any) -> int:
        cfg = self.cfg
        env = {"GPUCONTROL_HOOK_FILE": cfg.hook, "GPUCONTROL_SOCKET": cfg.socket}
        mps = host.mps.ctl if host.mps is not None else None
        self.trainer = MPSActuator(
            shlex.split(cfg.training_cmd), env=env, mps=mps, shadow=cfg.shadow,
            ready=cfg.ready, ready_timeout_s=cfg.ready_timeout_s, on_spawn=self._on_spawn,
            before_terminate=lambda _pid: host.sleep.suspend(True), cancel_fd=host._stop_r,
            user=cfg.training_user)
        pct = host.share.launch_pct(host)
        # no old process to hand over from: the first launch does not wait to be ready
        pid = self.trainer.start(pct, wait_ready=False)
        host.emit(event="training_started", pid=pid, mps_pct=pct)
        return pid

    def _on_spawn(self, pid: int) -> None:
        # listed at once: if we die, the guardian (or the next daemon) ends it
        host = self._host
        owned = list(host._records.get("owned", []))
        with contextlib.suppress(ProcessLookupError, OSError):
            h = ProcessHandle.open(pid, check=False)
            owned.append(h.identity() | {"group": True})  # it leads its process group
            h.close()
        host._record(owned=owned)
        if self.cfg.cgroup:  # an error here stops the new process (MPSActuator._spawn)
            with open(os.path.join(self.cfg.cgroup, "cgroup.procs"), "w") as f:
                f.write(str(pid))

    # ------------------------------------------------------------------ the loop
    def alive(self) -> bool:
        """Whether the training still runs (a restart in progress counts)."""
        if self.restart_thread is not None and self.restart_thread.is_alive():
            return True
        return any(h.alive() for h in self.roots)

    def end_status(self) -> dict[str, Any]:
        """How the training ended, for the ``training_finished`` event.

        Returns
        -------
        dict
            ``exit_code`` (its exit status) and ``signal`` (the name of the signal that
            killed it), one of them set for a training the daemon launched, both None for
            one it was given (not its child: its status is its parent's to read) or still
            running; ``failed``: whether it exited non-zero or was killed (None: unknown);
            ``restart_error``: why an MPS restart could start it again at neither share
            (the daemon ended the old process for it: a failure), else None.
        """
        proc = self.trainer.proc if self.trainer is not None else None
        code = exit_status(proc) if proc is not None else None  # unreaped: close() reaps it
        out: dict[str, Any] = {"exit_code": None, "signal": None, "failed": None,
                               "restart_error": None}
        history = self.trainer.history if self.trainer is not None else []
        if proc is None and history and not history[-1].ok and history[-1].new_pid is None:
            return out | {"failed": True, "restart_error": history[-1].error or "unknown"}
        if code is None:
            return out
        if code < 0:
            return out | {"signal": _signal_name(-code), "failed": True}
        return out | {"exit_code": code, "failed": code != 0}

    def restarting(self) -> bool:
        """Whether an MPS restart is in progress."""
        return self.restart_thread is not None and self.restart_thread.is_alive()

    def restarted(self, host: Any) -> None:
        """Hold the new process a restart started (and only it) instead of the old one.

        Parameters
        ----------
        host : Daemon
            For the target locks and the owned record.
        """
        assert self.trainer is not None
        if self.trainer.pid is None:
            return
        new = ProcessHandle.open(self.trainer.pid, uids=self.uids)
        for h in self.roots:
            h.close()
        self.roots, self.pids = [new], [new.pid]
        host._records["owned"] = [new.identity() | {"group": True}]
        host._claim_targets(self.roots)
        host.sleep.set_targets([new.pid])

    # ------------------------------------------------------------------ stop
    def close(self) -> None:
        """Wait for a restart in progress, stop a launched training, remove a group made for
        it, release the handles."""
        if self.restart_thread is not None:
            self.restart_thread.join(60)
        try:
            if self.trainer is not None:
                self.trainer.stop()
        finally:
            if self.made_cgroup:
                with contextlib.suppress(OSError):
                    os.rmdir(self.made_cgroup)
            for h in self.roots:
                h.close()
