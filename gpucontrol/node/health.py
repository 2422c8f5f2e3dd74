"""The daemon's liveness and readiness: one heartbeat, three listeners.

The control loop calls :meth:`Heartbeat.beat` several times per period (while it waits for
the next period, and after each step). Each beat

* tells the guardian the loop is live (:meth:`gpucontrol.node.guardian.Guardian.beat`; a
  daemon silent for the stall timeout is resumed-and-killed by its guardian),
* sends systemd ``WATCHDOG=1`` when the unit has ``WatchdogSec=``
  (:class:`gpucontrol.node.notify.SystemdNotifier`),
* records the time, which the ``/healthz`` endpoint reports (:meth:`Heartbeat.health`).

Liveness is "the control loop beat within the stall timeout"; readiness adds "set up, the
guardian alive and the sleep actuator working" -- what a Kubernetes probe or a load balancer
needs.

Examples
--------
>>> hb = Heartbeat(period_s=4.0, stall_timeout_s=None)
>>> hb.stall_timeout_s, hb.interval_s
(6.0, 1.0)
>>> hb.health(guardian_alive=True, actuator_up=True)["live"]   # no beat yet
False
>>> hb.beat(None)
>>> h = hb.health(guardian_alive=True, actuator_up=True)
>>> h["live"], h["ready"]                                        # live, not yet set up
(True, False)
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from gpucontrol.node.notify import SystemdNotifier

__all__ = ["Heartbeat", "SilenceWatch", "default_stall_timeout"]


class _Beatable(Protocol):
    def beat(self) -> None: ...
    def disarm(self) -> None: ...


def default_stall_timeout(period_s: float) -> float:
    """The guardian's stall timeout when none is configured: 1.5 periods, at least 2 s.

    Parameters
    ----------
    period_s : float
        The control period, s.

    Returns
    -------
    float
        Seconds without a heartbeat after which the daemon counts as stalled.
    """
    return max(1.5 * float(period_s), 2.0)


class Heartbeat:
    """The control loop's heartbeat and the health answer built on it.

    Parameters
    ----------
    period_s : float
        The control period, s.
    stall_timeout_s : float or None
        Seconds without a beat after which the daemon counts as stalled (None: the default
        of :func:`default_stall_timeout`; 0: no stall detection by the guardian, liveness
        then uses the default).
    notifier : SystemdNotifier or None
        systemd's notify socket (None: read from the environment).
    """

    def __init__(self, period_s: float, stall_timeout_s: float | None,
                 notifier: SystemdNotifier | None = None) -> None:
        self.period_s = float(period_s)
        default = default_stall_timeout(self.period_s)
        self.stall_timeout_s = default if stall_timeout_s is None else float(stall_timeout_s)
        self.guardian_timeout_s = self.stall_timeout_s or None
        window = self.stall_timeout_s or default
        self.notifier = notifier if notifier is not None else SystemdNotifier()
        wd = self.notifier.watchdog_interval_s
        # several beats per stall window (and per systemd watchdog interval)
        self.interval_s = min(self.period_s / 4, window / 4, 1.0, wd if wd else 1.0)
        self.last_beat: float | None = None
        self.beats = 0
        self.set_up = False
        self._next_watchdog = 0.0

    def beat(self, guardian: _Beatable | None) -> None:
        """One beat: guardian, systemd watchdog (at its interval), and the time.

        Parameters
        ----------
        guardian : Guardian or None
            The daemon's guardian (None before it runs).
        """
        now = time.monotonic()
        self.last_beat = now
        self.beats += 1
        if guardian is not None:
            guardian.beat()
        wd = self.notifier.watchdog_interval_s
        if wd is not None and now >= self._next_watchdog:
            self._next_watchdog = now + wd
            self.notifier.watchdog()

    def ready(self, status: str = "") -> None:
        """The daemon is set up: readiness on, systemd ``READY=1``.

        Parameters
        ----------
        status : str
            One line for ``systemctl status``.
        """
        self.set_up = True
        self.notifier.ready(status)

    def stopping(self, guardian: _Beatable | None) -> None:
        """Shutdown begins: not ready any more, the guardian's stall detection off (a
        graceful stop may take longer than the timeout), systemd ``STOPPING=1``.

        Parameters
        ----------
        guardian : Guardian or None
            The daemon's guardian.
        """
        self.set_up = False
        if guardian is not None:
            guardian.disarm()
        self.notifier.stopping()

    def silent_s(self) -> float:
        """Seconds since the last beat (infinite before the first).

        Returns
        -------
        float
            The silence.
        """
        return float("inf") if self.last_beat is None else time.monotonic() - self.last_beat

    def health(self, *, guardian_alive: bool, actuator_up: bool,
               latency_unready: str = "") -> dict[str, Any]:
        """The ``/healthz`` answer.

        Parameters
        ----------
        guardian_alive : bool
            Whether the guardian process runs.
        actuator_up : bool
            Whether the sleep actuator works (it has not stopped on an error).
        latency_unready : str
            Why the latency makes the daemon not ready ("" when it does not): no usable
            latency for the configured number of periods, and the source's reason.

        Returns
        -------
        dict
            ``live`` (the loop beat within the stall window), ``ready`` (live, set up,
            guardian alive, actuator up, usable latency), ``reason`` (why not ready, when
            it is not) and the facts behind them.
        """
        silent = self.silent_s()
        live = silent < (self.stall_timeout_s or default_stall_timeout(self.period_s))
        why = ("starting" if self.last_beat is None
               else "the control loop has not beaten within the stall timeout" if not live
               else "setting up" if not self.set_up
               else "the guardian is not running" if not guardian_alive
               else "the sleep actuator stopped on an error" if not actuator_up
               else latency_unready)
        out: dict[str, Any] = {"live": live, "ready": not why,
               "set_up": self.set_up, "guardian_alive": guardian_alive,
               "actuator_up": actuator_up,
               "heartbeat_age_s": None if self.last_beat is None else round(silent, 3)}
        if why:
            out["reason"] = why
        return out


class SilenceWatch:
    """Counts consecutive control periods without a latency report.

    A silent inference server looks like an idle one: the controller holds, the training
    runs free, and nothing says why. After ``threshold`` silent periods the daemon warns once
    (and the metric ``gpucontrol_inference_silent`` turns 1) until reports come back.

    Parameters
    ----------
    threshold : int
        Silent periods before the warning, >= 1.

    Examples
    --------
    >>> w = SilenceWatch(2)
    >>> [w.observe(n) for n in (5, 0, 0, 0, 3)]
    [(0, False, None), (1, False, None), (2, True, 'silent'), (3, True, None),
     (0, False, 'resumed')]
    """

    def __init__(self, threshold: int) -> None:
        if int(threshold) < 1:
            raise ValueError(f"threshold must be >= 1, got {threshold!r}")
        self.threshold = int(threshold)
        self.periods = 0

    def observe(self, count: int) -> tuple[int, bool, str | None]:
        """Take one period's report count.

        Parameters
        ----------
        count : int
            Latency reports in the period.

        Returns
        -------
        tuple of (int, bool, str or None)
            Consecutive silent periods, whether that reached the threshold, and the change to
            announce: ``'silent'`` when it just did, ``'resumed'`` when reports came back
            after it had, else None.
        """
        was = self.periods >= self.threshold
        self.periods = 0 if count > 0 else self.periods + 1
        now = self.periods >= self.threshold
        change = "silent" if now and not was else "resumed" if was and not now else None
        return self.periods, now, change
