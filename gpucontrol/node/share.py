"""The daemon's spatial-share backends as knobs (``--share-backend``, registry
:data:`gpucontrol.node.registry.SHARE_BACKENDS`), each driving one
:class:`~gpucontrol.node.actuators.spatial.SpatialShareBackend`:

=================  ===================  ==================================================
value              knob                 a change
=================  ===================  ==================================================
``mps``            MPSRestartShare      restarts the training under a new MPS active-thread
                                        percentage (needs ``--training-cmd`` and MPS);
                                        costs the measured restart, which the controller
                                        is told after each one (``set_restart_duration``)
``cpu``            CPUQuotaShare        the training's cgroup CPU quota; no restart
``green-context``  GreenContextShare    a command in the hook file; the cooperative
                                        training runs its next iteration on the
                                        green-context partition of that share; no restart
``none``           NoShare              none: no share knob, the training outside MPS,
                                        the sleep alone (the default loop on one level)
=================  ===================  ==================================================

A restart-free knob tells the controller that a change costs nothing
(``ShareKnob(change_s=0)``): its outer decision may then come often (``--outer-every``
down to 1; a decision still averages the last 8 readings at the current share, see
docs/daemon.md). The MPS knob leaves the controller's prior (15 s) until the first
restart is measured.

Crash paths: the green-context share lives in the hook file's flags, so whatever withdraws
the sleep withdraws the share too -- :meth:`GreenContextShare.close` at exit, the guardian's
and the next daemon's :func:`~gpucontrol.node.hooks.clear_hook_file`, and the reader's
staleness check when no daemon beats any more: the training is back on the full device. The
CPU cap is lifted, and each capped process returned to the cgroup it came from, by
:func:`gpucontrol.node.records.release_share` (one daemon per share group: the daemon locks it
before it is made); an MPS training is ended with its daemon.

Examples
--------
>>> from gpucontrol.node.share import controller_restart_s, is_restart_free
>>> [is_restart_free(f) for f in ("mps", "cpu", "green-context")]
[False, True, True]
>>> controller_restart_s("green-context"), controller_restart_s("mps") is None
(0.0, True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpucontrol.node.actuators.spatial import (
    BackendInfo,
    MPSRestartBackend,
    make_backend,
)
from gpucontrol.node.registry import SHARE_BACKENDS, knob_class
from gpucontrol.node.share_knob import ShareKnob

__all__ = ["CPUQuotaShare", "GreenContextShare", "MPSRestartShare", "NoShare", "ShareKnob",
           "controller_restart_s", "is_restart_free", "make_share"]


def make_share(flag: str, infos: Iterable[BackendInfo], cfg: Any = None) -> ShareKnob:
    """The share knob a ``--share-backend`` value names.

    Parameters
    ----------
    flag : str
        The value (a key of :data:`~gpucontrol.node.registry.SHARE_BACKENDS`).
    infos : iterable of BackendInfo
        What :func:`~gpucontrol.node.actuators.spatial.detect_backends` found here.
    cfg : DaemonConfig or None
        The settings.

    Returns
    -------
    ShareKnob
        The knob, not started.
    """
    cls: type[ShareKnob] = knob_class(SHARE_BACKENDS, flag)
    return cls(infos, cfg)


def is_restart_free(flag: str) -> bool:
    """Whether the ``--share-backend`` value changes the share without a restart."""
    return bool(knob_class(SHARE_BACKENDS, flag).changes_without_restart)


def controller_restart_s(flag: str) -> float | None:
    """The ``restart_s`` to build the controller with: 0 for a restart-free backend (a change
    costs nothing, the outer decision may run every period), None for MPS (the controller's
    prior until a restart is measured)."""
    return 0.0 if is_restart_free(flag) else None


# ---------------------------------------------------------------------------------------------
class GreenContextShare(ShareKnob):
    """``green-context``: the share written into the hook file, the cooperative training on
    that share's green-context partition from its next iteration, both the training and the
    inference clients of one MPS control daemon.

    Without MPS the two processes time-slice the GPU and a partition confines the training
    without lowering the inference's latency (measured on an H100: 40.4 ms at every share), so
    the daemon runs the training as an MPS client -- launched with the private control
    daemon's or the node's (``--mps-pipe-dir``) pipe directory, at an active-thread
    percentage of 100 (the partition is the share) -- and checks at start that the inference
    is a client too (:mod:`gpucontrol.node.mps_clients`). When it is not, or that cannot be
    told, the daemon says so in one line with the measured reason and refuses to start,
    unless ``mps_unchecked`` lets it go on.
    """

    name = "green-context"
    backend_name = "green-context"
    changes_without_restart = True
    before_training = True
    label = "green-context"

    def __init__(self, infos: Iterable[BackendInfo] = (), cfg: Any = None) -> None:
        super().__init__(infos, cfg)
        self.client_check: Any = None  # the ClientCheck, once confirmed

    @staticmethod
    def mps_pipe_dir(cfg: Any) -> str | None:
        """``--mps-pipe-dir``, else the control daemon the daemon's own environment names
        (``CUDA_MPS_PIPE_DIRECTORY``, as every client's does: the one the inference and the
        training would join by themselves); None: start a private one.

        Parameters
        ----------
        cfg : DaemonConfig
            The settings.

        Returns
        -------
        str or None
            The pipe directory to join.
        """
        return cfg.mps_pipe_dir or os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or None

    @classmethod
    def needs_mps(cls, cfg: Any) -> bool:
        """A launched training joins a private control daemon, any training the node's.

        Parameters
        ----------
        cfg : DaemonConfig
            The settings.

        Returns
        -------
        bool
            Whether the daemon starts or joins an MPS control daemon.
        """
        return bool(cfg.training_cmd) or cls.mps_pipe_dir(cfg) is not None

    def launch_pct(self, host: Any) -> float:
        """100: the green-context partition confines the training, not MPS.

        Parameters
        ----------
        host : Daemon
            Unused.

        Returns
        -------
        float
            100.
        """
        return 100.0

    def confirm(self, host: Any) -> None:
        """Is the inference an MPS client beside the training? One line when not (or when it
        cannot be told), and a refusal unless ``mps_unchecked``
        (:func:`gpucontrol.node.mps_clients.confirm_inference_client`)."""
        from gpucontrol.node.mps_clients import confirm_inference_client

        self.client_check, said = confirm_inference_client(
            host, unchecked=self.cfg.mps_unchecked)
        self.reason += said

    def chosen(self, period_s: float) -> dict[str, Any]:
        """The ``share_backend`` event, with the MPS control daemon and the client check.

        Parameters
        ----------
        period_s : float
            The control period, s.

        Returns
        -------
        dict
            The event.
        """
        ev = super().chosen(period_s)
        if self.client_check is not None:
            ev["inference_client"] = self.client_check.verdict
        mps = self.host.mps if self.host is not None else None
        ev["mps"] = (None if mps is None or not mps.ok else
                     "private" if mps.private else "node")
        return ev

    def start(self, host: Any) -> None:
        """Publish the first share in the hook file (before the training starts)."""
        self.host = host
        self.publish(host.hook, host.initial_share(), self.cfg.green_shares)

    def publish(self, writer: Any, initial_pct: float,
                shares_pct: Sequence[float] = ()) -> None:
        """Build the backend on the hook file and publish the first share.

        Parameters
        ----------
        writer : HookWriter
            The daemon's hook file.
        initial_pct : float
            The share to start at, %.
        shares_pct : sequence of float
            The partitions the training created (``--green-shares``); empty: any share.
        """
        self.backend = make_backend("green-context", writer=writer,
                                    shares_pct=list(shares_pct) or None)
        self.backend.set_share_pct(initial_pct)
        self.reason = ("--share-backend green-context: the share is written into the hook "
                       "file and the training switches its green-context partition at its "
                       "next iteration (no restart)")
        probe = self.info
        if probe is not None and not probe.available:
            self.reason += (f"; this machine's driver probe says '{probe.reason}': a training "
                            "that cannot create partitions runs on the full device")


class NoShare(ShareKnob):
    """``none``: no spatial share. The training runs as it is launched or given, outside
    MPS, and the sleep alone holds the SLO (the default controller on the one level it stands
    at). Where MPS pays no more than time-slicing, or a node keeps the inference and the
    training out of one MPS server, this is the knob to measure against the others."""

    name = "none"
    label = "none"

    def start(self, host: Any) -> None:
        """Nothing to claim: say why there is no share knob."""
        self.host = host
        self.reason = ("--share-backend none: no spatial share; the training runs as launched "
                       "(outside MPS) and the sleep alone holds the SLO")


class CPUQuotaShare(ShareKnob):
    """``cpu``: the training's CPU share through the cgroup CPU controller (no restart)."""

    name = "cpu"
    backend_name = "cpu.max"
    changes_without_restart = True
    label = "cpu.max"

    def start(self, host: Any) -> None:
        """Claim the share group (one daemon per group), cap the training in it."""
        from gpucontrol.node.actuators.cpu_share import group_path

        self.host = host
        lock = host._claim_share_group(group_path(self.cfg.share_cgroup))
        host.emit(**self.cap(host.training.pids, cgroup=self.cfg.share_cgroup,
                             initial_pct=host.initial_share(), record=host._record, lock=lock))

    def cap(self, pids: Sequence[int], *, cgroup: str, initial_pct: float,
            record: Callable[..., None], lock: str | None = None) -> dict[str, Any]:
        """Cap the training's CPU share. The ``share`` record goes into the state file as soon
        as the group exists and again, with the group each process comes from, before the
        processes are moved, so a crash lifts the cap and returns them. All or nothing: a
        failure (a process the controller refuses, a state write that fails) undoes what was
        done -- the processes back where they were, a group made here removed, the record
        withdrawn -- and raises. ``lock``: the daemon's lock file of the group, named in the
        record (a crash clean-up leaves a group alone that another daemon has claimed since).

        Parameters
        ----------
        pids : sequence of int
            The training's processes.
        cgroup : str
            The share group, relative to the CPU controller's root.
        initial_pct : float
            The share to start at, %.
        record : callable
            Writes the ``share`` record into the state file.
        lock : str or None
            The group's lock file.

        Returns
        -------
        dict
            The ``cpu_share_ready`` event.
        """
        from gpucontrol.node.actuators.cpu_share import CpuShare

        recorded = False

        def keep(rec: dict[str, object]) -> None:
            nonlocal recorded
            recorded = True
            record(share=rec if lock is None else {**rec, "lock": lock})

        try:
            cpu = CpuShare(pids, name=cgroup, share_pct=initial_pct, on_record=keep)
        except BaseException as exc:
            if recorded:  # withdrawn: the group it names is undone (or not ours)
                with contextlib.suppress(OSError):
                    record(share=None)
            if isinstance(exc, OSError):
                err = OSError(f"--share-backend cpu: {exc}; undone: the training is back in "
                              "its own cgroups and no group is left capped")
                err.errno = exc.errno
                raise err from exc
            raise
        self.backend = make_backend("cpu.max", actuator=cpu)
        self.backend.share_pct = initial_pct
        self.reason = ("--share-backend cpu: the training's cgroup CPU quota "
                       f"({cpu.backend}), changed without a restart")
        return {"event": "cpu_share_ready", "backend": cpu.backend, "cgroup": str(cpu.path),
                "share_pct": initial_pct, "granularity_pct": cpu.granularity_pct}


class MPSRestartShare(ShareKnob):
    """``mps``: restart the launched training under a new MPS active-thread percentage."""

    name = "mps"
    backend_name = "mps-restart"
    label = "mps"

    @staticmethod
    def needs_mps(cfg: Any) -> bool:
        """A launched training runs under MPS (a given one cannot be restarted).

        Parameters
        ----------
        cfg : DaemonConfig
            The settings.

        Returns
        -------
        bool
            Whether the daemon launches the training.
        """
        return bool(cfg.training_cmd)

    def start(self, host: Any) -> None:
        """Wrap the launcher when MPS runs (else say why there is no share knob)."""
        self.host = host
        mps = host.mps
        self.wrap(host.training.trainer, mps_ok=mps is not None and mps.ok,
                  why_not=mps.error if mps is not None else "")

    def wrap(self, trainer: Any, *, mps_ok: bool, why_not: str = "") -> None:
        """Restart ``trainer`` with a new percentage (when MPS runs).

        Parameters
        ----------
        trainer : MPSActuator or None
            The launcher of the training.
        mps_ok : bool
            Whether an MPS control daemon is in use.
        why_not : str
            Why not, when it is not.
        """
        if mps_ok and trainer is not None:
            # the controller's percentage as is (today's commands; no rounding to 1 %)
            self.backend = make_backend("mps-restart", actuator=trainer, round_pct=False)
            self.reason = ("--share-backend mps: the training restarts under the new MPS "
                           "active-thread percentage; a change costs the measured restart")
        elif trainer is None:
            self.reason = ("--share-backend mps needs --training-cmd (MPS fixes the share at "
                           "start): sleep-only")
        else:
            self.reason = f"MPS unavailable ({why_not or 'see mps_unavailable'}): sleep-only"

    def restart(self, pct: float) -> Any:
        """An MPS change (blocking: run it off the control loop).

        Parameters
        ----------
        pct : float
            The new percentage.

        Returns
        -------
        RestartResult
            What the restart measured.
        """
        assert isinstance(self.backend, MPSRestartBackend)
        self.backend.set_share_pct(pct)
        return self.backend.results[-1]

    def apply(self, value: Any) -> None:
        """Start a restart at ``value`` % on a thread of its own (none while one runs or
        while the MPS control daemon is unhealthy).

        Parameters
        ----------
        value : float
            The new percentage.
        """
        host = self.host
        if self.backend is None or host.training.restarting():
            return
        if host.mps is not None and not host.mps.healthy:
            host.emit(event="mps_restart", ok=False, new_pct=value,
                      error="the MPS control daemon is unhealthy: change skipped")
            return
        t = threading.Thread(target=self._restart, args=(value,), name="gpucontrol-mps",
                             daemon=True)
        host.training.restart_thread = t
        t.start()

    def _restart(self, pct: float) -> None:
        host = self.host
        try:
            res = self.restart(pct)  # MPSActuator.apply
            host.training.restarted(host)
        except Exception as exc:
            host.emit(event="mps_restart", ok=False, new_pct=pct, error=str(exc))
            return
        finally:
            host.sleep.suspend(False)
            host.restarted = True
        host.emit(event="mps_restart", **dataclasses.asdict(res))
        if host.controller is not None and res.ok and math.isfinite(res.total_s):
            host.controller.set_restart_duration(res.total_s)  # the hold and its cost

    def words(self, text: str) -> str:
        """The controller's words as they are (its share is the MPS percentage).

        Parameters
        ----------
        text : str
            A reason the controller gave.

        Returns
        -------
        str
            ``text``.
        """
        return text

    def close(self) -> None:
        """Nothing to withdraw (the training stops with the daemon)."""
        self.backend = None
