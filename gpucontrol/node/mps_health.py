"""Periodic MPS health checks with back-off, off the control loop.

A private MPS control daemon can die or wedge after start-up; the daemon then must not try an
MPS restart of the training against it, and should bring it back. :class:`MPSHealthWatch`
asks the control daemon (``get_server_list``) every ``interval_s`` from its own thread (an MPS
command can block for its whole timeout); after a failure it restarts a private control
daemon and waits twice as long before the next try (up to ``max_interval_s``), and goes back to
``interval_s`` once healthy. The daemon reads :attr:`healthy` before every MPS change and logs
the transitions (:meth:`take_events`).
"""

from __future__ import annotations

import threading
from collections import deque

from gpucontrol._validate import positive
from gpucontrol.node.actuators.mps import MPSControl, MPSError

__all__ = ["MPSHealthWatch"]


class MPSHealthWatch:
    """Check an MPS control daemon periodically; restart a private one that died.

    Parameters
    ----------
    ctl : MPSControl
        The control daemon's client.
    interval_s : float
        Time between checks while healthy, > 0.
    max_interval_s : float
        Longest back-off after repeated failures.
    restart : bool
        Restart the control daemon (``-d`` in its directories) when it fails (for a private
        daemon; never for one given with ``--mps-pipe-dir``).
    """

    def __init__(self, ctl: MPSControl, *, interval_s: float = 10.0,
                 max_interval_s: float = 300.0, restart: bool = True) -> None:
        self.ctl = ctl
        self.interval_s = positive("interval_s", interval_s)
        self.max_interval_s = max(positive("max_interval_s", max_interval_s), self.interval_s)
        self.restart = bool(restart)
        self.healthy = True
        self.failures = 0
        self.next_wait_s = self.interval_s
        self._events: deque[dict] = deque(maxlen=100)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MPSHealthWatch:
        """Start the checking thread.

        Returns
        -------
        MPSHealthWatch
            ``self``.
        """
        self._thread = threading.Thread(target=self._loop, name="gpucontrol-mps-health",
                                        daemon=True)
        self._thread.start()
        return self

    def check_once(self) -> bool:
        """One check (and, on failure, one restart attempt); returns the health after it.

        Returns
        -------
        bool
            True when the control daemon answers.
        """
        ok = self.ctl.health()
        if not ok and self.restart:
            try:
                self.ctl.start()
                ok = self.ctl.health()
                if ok:
                    self._events.append({"event": "mps_restarted_daemon"})
            except (MPSError, OSError) as exc:
                self._events.append({"event": "mps_restart_failed", "error": str(exc)})
        if ok:
            if not self.healthy:
                self._events.append({"event": "mps_recovered", "failures": self.failures})
            self.failures, self.next_wait_s = 0, self.interval_s
        else:
            self.failures += 1
            if self.healthy or self.failures == 1:
                self._events.append({"event": "mps_unhealthy", "failures": self.failures})
            self.next_wait_s = min(self.max_interval_s, self.interval_s * 2 ** self.failures)
        self.healthy = ok
        return ok

    def _loop(self) -> None:
        while not self._stop.wait(self.next_wait_s):
            try:
                self.check_once()
            except Exception as exc:  # never let the watch die silently
                self._events.append({"event": "mps_health_error", "error": str(exc)})

    def take_events(self) -> list[dict]:
        """The transitions since the last call (for the daemon's log).

        Returns
        -------
        list of dict
            Event records.
        """
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    def close(self) -> None:
        """Stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
