"""The daemon's spatial-share wiring: which backend moves the training's share, what a change
costs the controller, and how a share is applied and withdrawn.

``--share-backend`` names one backend of :mod:`gpucontrol.node.actuators.spatial`:

=================  =================  ====================================================
flag               backend            a change
=================  =================  ====================================================
``mps``            ``mps-restart``    restarts the training under a new MPS active-thread
                                      percentage (needs ``--training-cmd`` and MPS); costs
                                      the measured restart, which the controller is told
                                      after each one (``set_restart_duration``)
``cpu``            ``cpu.max``        the training's cgroup CPU quota; no restart
``green-context``  ``green-context``  a command in the hook file; the cooperative training
                                      runs its next iteration on the green-context partition
                                      of that share (:mod:`gpucontrol.node.green_torch`,
                                      ``harness.hil.green_emulator``); no restart
=================  =================  ====================================================

A restart-free backend tells the controller that a change costs nothing (``restart_s=0``):
its outer decision may then come often (``--outer-every`` down to 1; a decision still averages
the last 8 readings at the current share, see docs/daemon.md). The MPS backend leaves the
controller's prior (15 s) until the first restart is measured.

Crash paths: the green-context share lives in the hook file's flags, so whatever withdraws the
sleep withdraws the share too -- :meth:`HookWriter.close` at exit, the guardian's and the next
daemon's :func:`~gpucontrol.node.hooks.clear_hook_file`, and the reader's staleness check when
no daemon beats any more: the training is back on the full device (100 %). The CPU cap is
lifted, and each capped process returned to the cgroup it came from, by
:func:`gpucontrol.node.records.release_share` (one daemon per share group: the daemon locks it
before it is made); an MPS training is ended with its daemon.

Examples
--------
>>> from gpucontrol.node.share import controller_restart_s, is_restart_free
>>> [is_restart_free(f) for f in SHARE_BACKENDS]
[False, True, True]
>>> controller_restart_s("green-context"), controller_restart_s("mps") is None
(0.0, True)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpucontrol.node.actuators.spatial import (
    BackendInfo,
    CPUShareBackend,
    GreenContextBackend,
    MPSRestartBackend,
    SpatialShareBackend,
    change_cost_periods,
    make_backend,
)
from gpucontrol.node.config import SHARE_BACKENDS

__all__ = ["REGISTRY_NAME", "SHARE_BACKENDS", "ShareWiring", "controller_restart_s",
           "is_restart_free"]

#: ``--share-backend`` value -> :data:`gpucontrol.node.actuators.spatial.BACKENDS` name.
REGISTRY_NAME = {"mps": "mps-restart", "cpu": "cpu.max", "green-context": "green-context"}
_CLASSES: dict[str, type[SpatialShareBackend]] = {
    "mps": MPSRestartBackend, "cpu": CPUShareBackend, "green-context": GreenContextBackend}


def is_restart_free(flag: str) -> bool:
    """Whether the ``--share-backend`` value changes the share without a restart."""
    return bool(_CLASSES[flag].restart_free)


def controller_restart_s(flag: str) -> float | None:
    """The ``restart_s`` to build the controller with: 0 for a restart-free backend (a change
    costs nothing, the outer decision may run every period), None for MPS (the controller's
    prior until a restart is measured)."""
    return 0.0 if is_restart_free(flag) else None


class ShareWiring:
    """The daemon's spatial-share backend, from its choice to its release.

    Parameters
    ----------
    flag : str
        The ``--share-backend`` value (one of :data:`SHARE_BACKENDS`).
    infos : iterable of BackendInfo
        What :func:`~gpucontrol.node.actuators.spatial.detect_backends` found here.

    Attributes
    ----------
    backend : SpatialShareBackend or None
        The backend once built (None: no share knob, e.g. MPS unavailable).
    reason : str
        Why this backend, or why none.
    """

    def __init__(self, flag: str, infos: Iterable[BackendInfo]) -> None:
        if flag not in _CLASSES:
            raise ValueError(f"--share-backend must be one of {', '.join(SHARE_BACKENDS)}, "
                             f"got {flag!r}")
        self.flag = flag
        self.name = REGISTRY_NAME[flag]
        self.info = {i.name: i for i in infos}.get(self.name)
        self.backend: SpatialShareBackend | None = None
        self.reason = ""
        self._cpu: Any = None

    @property
    def restart_free(self) -> bool:
        """True when a built backend changes the share without a restart."""
        return self.backend is not None and self.backend.restart_free

    # ------------------------------------------------------------------ building
    def start_green(self, writer: Any, initial_pct: float,
                    shares_pct: Sequence[float] = ()) -> None:
        """``green-context``: publish the first share in the hook file (before the training
        starts: its first iteration reads it).

        Parameters
        ----------
        writer : HookWriter
            The daemon's hook file.
        initial_pct : float
            The share to start at, %.
        shares_pct : sequence of float
            The partitions the training created (``--green-shares``); empty: any share.
        """
        if self.flag != "green-context":
            return
        self.backend = make_backend("green-context", writer=writer,
                                    shares_pct=list(shares_pct) or None)
        self.backend.set_share_pct(initial_pct)
        probe = self.info
        self.reason = ("--share-backend green-context: the share is written into the hook "
                       "file and the training switches its green-context partition at its "
                       "next iteration (no restart)")
        if probe is not None and not probe.available:
            self.reason += (f"; this machine's driver probe says '{probe.reason}': a training "
                            "that cannot create partitions runs on the full device")

    def start_cpu(self, pids: Sequence[int], *, cgroup: str, initial_pct: float,
                  record: Callable[..., None], lock: str | None = None) -> dict[str, Any]:
        """``cpu``: cap the training's CPU share. The ``share`` record goes into the state file
        as soon as the group exists and again, with the group each process comes from, before
        the processes are moved, so a crash lifts the cap and returns them. All or nothing: a
        failure (a process the controller refuses, a state write that fails) undoes what was
        done -- the processes back where they were, a group made here removed, the record
        withdrawn -- and raises. ``lock``: the daemon's lock file of the group, named in the
        record (a crash clean-up leaves a group alone that another daemon has claimed since).
        Returns the ``cpu_share_ready`` event."""
        from gpucontrol.node.actuators.cpu_share import CpuShare

        recorded = False

        def keep(rec: dict[str, object]) -> None:
            nonlocal recorded
            recorded = True
            record(share=rec if lock is None else {**rec, "lock": lock})

        try:
            self._cpu = CpuShare(pids, name=cgroup, share_pct=initial_pct, on_record=keep)
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
        self.backend = make_backend("cpu.max", actuator=self._cpu)
        self.backend.share_pct = initial_pct
        self.reason = ("--share-backend cpu: the training's cgroup CPU quota "
                       f"({self._cpu.backend}), changed without a restart")
        return {"event": "cpu_share_ready", "backend": self._cpu.backend,
                "cgroup": str(self._cpu.path), "share_pct": initial_pct,
                "granularity_pct": self._cpu.granularity_pct}

    def start_mps(self, trainer: Any, *, mps_ok: bool, why_not: str = "") -> None:
        """``mps``: restart the launched training with a new percentage (when MPS runs)."""
        if self.flag != "mps":
            return
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

    # ------------------------------------------------------------------ reporting
    def chosen(self, period_s: float) -> dict[str, Any]:
        """The ``share_backend`` event: what was chosen, why, and what a change costs."""
        b = self.backend
        if b is None:
            return {"event": "share_backend", "flag": self.flag, "backend": None,
                    "reason": self.reason}
        cost = change_cost_periods(b, period_s)
        return {"event": "share_backend", "flag": self.flag, "backend": b.name,
                "restart_free": b.restart_free, "granularity_pct": b.granularity_pct,
                "change_latency_s": _num(b.resize_latency_s),
                "change_cost_periods": _num(cost),
                "controller_restart_s": 0.0 if b.restart_free else None,
                "share_pct": b.share_pct, "reason": self.reason}

    def metrics_label(self) -> str:
        """The ``backend`` label of ``gpucontrol_spatial_share_ratio`` (``mps``, ``cpu.max``,
        ``green-context``, or ``none`` without a share knob)."""
        if self.backend is None:
            return "none"
        return "mps" if self.flag == "mps" else self.backend.name

    # ------------------------------------------------------------------ acting
    def change(self, pct: float) -> dict[str, Any]:
        """Apply a restart-free change; returns the ``share_change`` event (``ok`` False
        with the error when the backend refused)."""
        assert self.backend is not None and self.backend.restart_free
        try:
            dt = self.backend.set_share_pct(pct)
        except (OSError, ValueError) as exc:
            return {"event": "share_change", "ok": False, "new_pct": pct, "error": str(exc),
                    "backend": self.backend.name}
        return {"event": "share_change", "ok": True, "new_pct": pct,
                "applied_pct": self.backend.share_pct, "latency_s": round(dt, 6),
                "backend": self.backend.name}

    def restart(self, pct: float) -> Any:
        """An MPS change (blocking: run it off the control loop); returns the
        :class:`~gpucontrol.node.actuators.mps.RestartResult`."""
        assert isinstance(self.backend, MPSRestartBackend)
        self.backend.set_share_pct(pct)
        return self.backend.results[-1]

    def close(self) -> None:
        """Withdraw the share: the training back on the full device (green-context; call it
        while the hook file is still open) or the CPU cap lifted (cpu). MPS: nothing here (the
        training is stopped with the daemon)."""
        b, self.backend = self.backend, None
        if b is not None and b.restart_free:
            b.close()


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
