"""The daemon's sleep methods as knobs (``--sleep-method``, registry
:data:`gpucontrol.node.registry.SLEEP_METHODS`).

* ``signal`` -- :class:`SignalSleep`: SIGSTOP/SIGCONT through pidfds
  (:class:`~gpucontrol.node.actuators.sleep.SignalDutyCycler`).
* ``cgroup`` -- :class:`CgroupSleep`: the cgroup v2 freezer
  (:class:`~gpucontrol.node.actuators.cgroup.CgroupFreezer`).
* ``auto`` -- :class:`AutoSleep`: the freezer when the training sits alone in a group the
  daemon may write, else signals.
* ``hook`` -- :class:`HookSleep`: the training sleeps by itself, reading the hook file.

The external methods duty-cycle the training: run for a quantum, stop for the commanded
sleep. Each is started last, once everything it pauses is listed in the state file (the
cycler writes its targets ahead of the first pause), and closed first: every way out resumes
the training before anything else is released.
"""

from __future__ import annotations

from typing import Any

from gpucontrol.node.actuators.cgroup import CgroupFreezer
from gpucontrol.node.actuators.duty import DutyCycler, DutyStats
from gpucontrol.node.actuators.sleep import choose_sleep_actuator
from gpucontrol.node.knobs import Knob

__all__ = ["AutoSleep", "CgroupSleep", "CyclerSleep", "HookSleep", "SignalSleep"]


class CyclerSleep(Knob):
    """Pause the training from outside with a duty cycler (the ``auto``, ``signal`` and
    ``cgroup`` methods).

    Parameters
    ----------
    cfg : DaemonConfig
        The settings (``cgroup``, ``run_quantum_s``, ``max_sleep_s``).
    """

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.cycler: DutyCycler | None = None
        self.hook: Any = None

    @property
    def method(self) -> str:
        """``cgroup`` or ``signal``, as chosen (the flag's value before the start)."""
        if self.cycler is None:
            return self.name
        return "cgroup" if isinstance(self.cycler, CgroupFreezer) else "signal"

    def start(self, host: Any) -> None:
        """Build the cycler on the training's processes and start it (write-ahead first)."""
        cfg = self.cfg
        self.hook = host.hook
        quantum = 0.2 if cfg.run_quantum_s == "auto" else float(cfg.run_quantum_s)
        self.cycler = choose_sleep_actuator(
            pids=host.training.pids, cgroup=cfg.cgroup, method=self.name,
            uids=host.training.uids, run_quantum_s=quantum, max_sleep_s=cfg.max_sleep_s,
            gate=host.guardian.alive, on_targets_changed=host.write_state)
        host.cycler = self.cycler
        if isinstance(self.cycler, CgroupFreezer):
            host._claim_cgroup(self.cycler.path)
        host.write_state()  # write-ahead: listed before the first pause
        self.cycler.start()

    def apply(self, value: Any) -> None:
        """Command the sleep per run quantum, s (the hook commands none).

        Parameters
        ----------
        value : float
            The sleep, s.
        """
        if self.cycler is not None:
            self.cycler.set_sleep(value)
        if self.hook is not None:
            self.hook.set_sleep(0.0)

    def period(self, iter_mean_ms: float, iter_count: int) -> dict[str, Any]:
        """Once per period: follow the iteration time (``--run-quantum-s auto``) and report
        the duty cycle.

        Parameters
        ----------
        iter_mean_ms : float
            The mean iteration time the training reported, ms.
        iter_count : int
            How many iterations it reported.

        Returns
        -------
        dict
            The period record's duty fields.
        """
        if self.cycler is None:
            return {}
        if self.cfg.run_quantum_s == "auto" and iter_count:
            self.cycler.set_run_quantum(min(max(iter_mean_ms / 1e3, 0.01), 10.0))
        duty: DutyStats = self.cycler.stats()
        return {"stopped_fraction": round(duty.achieved_fraction, 5),
                "commanded_fraction": round(duty.commanded_fraction, 5),
                "pause_p99_ms": duty.pause_p99_ms, "resume_p99_ms": duty.resume_p99_ms,
                "targets": duty.targets}

    def suspend(self, on: bool) -> None:
        """Stop pausing (``on``) or pause again, around a restart of the training.

        Parameters
        ----------
        on : bool
            True: resume and hold; False: cycle again.
        """
        if self.cycler is not None:
            self.cycler.suspend(on)

    def set_targets(self, pids: list[int]) -> None:
        """The training's processes after a restart (signals only).

        Parameters
        ----------
        pids : list of int
            The new processes.
        """
        if self.cycler is not None and hasattr(self.cycler, "set_targets"):
            self.cycler.set_targets(pids)

    @property
    def error(self) -> str:
        """The cycler's error ("" while it works)."""
        return (self.cycler.error or "") if self.cycler is not None else ""

    @property
    def held(self) -> bool:
        """Whether a failed write-ahead holds the cycler."""
        return bool(self.cycler is not None and self.cycler.held)

    def close(self) -> None:
        """Stop cycling and resume everything."""
        if self.cycler is not None:
            self.cycler.close()


class AutoSleep(CyclerSleep):
    """The freezer when the training sits alone in a group the daemon may write, else
    signals."""

    name = "auto"


class SignalSleep(CyclerSleep):
    """SIGSTOP/SIGCONT to the training and its descendants."""

    name = "signal"


class CgroupSleep(CyclerSleep):
    """The cgroup v2 freezer of the training's group (``--cgroup`` or its own)."""

    name = "cgroup"


class HookSleep(Knob):
    """The cooperative hook: the training sleeps the commanded time after each iteration.

    Parameters
    ----------
    cfg : DaemonConfig
        The settings.
    """

    name = "hook"
    method = "hook"
    error = ""
    held = False

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.hook: Any = None

    def start(self, host: Any) -> None:
        """The hook file is the channel (made before the training started)."""
        self.hook = host.hook

    def apply(self, value: Any) -> None:
        """Publish the sleep in the hook file (never above its cap, 60 s).

        Parameters
        ----------
        value : float
            The sleep, s.
        """
        if self.hook is not None:
            self.hook.set_sleep(min(value, self.hook.max_sleep_s))

    def period(self, iter_mean_ms: float, iter_count: int) -> dict[str, Any]:
        """Nothing to report (the training times its own sleep).

        Parameters
        ----------
        iter_mean_ms : float
            Unused.
        iter_count : int
            Unused.

        Returns
        -------
        dict
            Empty.
        """
        return {}

    def suspend(self, on: bool) -> None:
        """Nothing to suspend (a restarted training reads the hook itself).

        Parameters
        ----------
        on : bool
            Unused.
        """

    def set_targets(self, pids: list[int]) -> None:
        """Nothing to retarget.

        Parameters
        ----------
        pids : list of int
            Unused.
        """

    def close(self) -> None:
        """Withdraw the sleep at once (the hook file is closed later, with the share)."""
        if self.hook is not None:
            try:
                self.hook.set_sleep(0.0)
            except ValueError:  # the file is closed already
                pass
