"""systemd's notify protocol (``sd_notify``) with the standard library only.

Under a ``Type=notify`` unit systemd sets ``$NOTIFY_SOCKET`` (a Unix datagram socket; a
leading ``@`` means the abstract namespace) and, with ``WatchdogSec=``, ``$WATCHDOG_USEC`` and
``$WATCHDOG_PID``. The daemon sends ``READY=1`` once it is set up (systemd then counts the
unit as started), ``WATCHDOG=1`` from its control loop (systemd kills and restarts a daemon
that stops sending it), ``STATUS=...`` lines for ``systemctl status``, and ``STOPPING=1`` when
it shuts down. Outside systemd every call is a no-op returning False.

Examples
--------
>>> n = SystemdNotifier(env={})          # not under systemd
>>> n.enabled, n.watchdog_interval_s, n.ready()
(False, None, False)
>>> n = SystemdNotifier(env={"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "20000000"})
>>> n.watchdog_interval_s                # ping at a third of WatchdogSec=20s
6.666666666666667
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

__all__ = ["SystemdNotifier"]


class SystemdNotifier:
    """Sends sd_notify messages to ``$NOTIFY_SOCKET`` (never blocks, never raises).

    Parameters
    ----------
    env : mapping or None
        The environment to read (None: ``os.environ``, from which the three variables are
        then removed, as ``sd_notify(unset_environment=1)`` does, so that a training the
        daemon launches does not inherit them).
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        if env is None:
            env = {k: os.environ.pop(k) for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC",
                                                  "WATCHDOG_PID") if k in os.environ}
        addr = env.get("NOTIFY_SOCKET", "")
        self.address: str | None = None
        if addr.startswith("@"):
            self.address = "\0" + addr[1:]
        elif addr.startswith("/"):
            self.address = addr
        self.watchdog_interval_s: float | None = None
        try:
            usec = int(env.get("WATCHDOG_USEC", ""))
            wpid = env.get("WATCHDOG_PID")
            if usec > 0 and (not wpid or int(wpid) == os.getpid()):
                self.watchdog_interval_s = usec / 3e6
        except ValueError:
            pass
        self.sent = 0

    @property
    def enabled(self) -> bool:
        """True when a notify socket was given."""
        return self.address is not None

    def notify(self, message: str) -> bool:
        """Send one message (``KEY=VALUE`` lines).

        Parameters
        ----------
        message : str
            For example ``"READY=1"`` or ``"WATCHDOG=1"``.

        Returns
        -------
        bool
            True when the datagram was sent.
        """
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX,
                               socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                               | socket.SOCK_NONBLOCK) as s:
                s.sendto(message.encode(), self.address)
        except OSError:
            return False
        self.sent += 1
        return True

    def ready(self, status: str = "") -> bool:
        """``READY=1`` (plus ``STATUS=``): the daemon is set up.

        Parameters
        ----------
        status : str
            Optional one-line status.

        Returns
        -------
        bool
            True when sent.
        """
        return self.notify("READY=1" + (f"\nSTATUS={status}" if status else "")
                           + f"\nMAINPID={os.getpid()}")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the control loop is live (only when systemd asked for it).

        Returns
        -------
        bool
            True when sent.
        """
        if self.watchdog_interval_s is None:
            return False
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        """``STOPPING=1``: the daemon is shutting down.

        Returns
        -------
        bool
            True when sent.
        """
        return self.notify("STOPPING=1")
