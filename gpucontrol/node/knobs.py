"""What every part of the daemon looks like: a :class:`Knob` with ``start``, ``apply`` and
``close``, started by :meth:`gpucontrol.node.daemon.Daemon.setup` in order and closed in the
reverse order on every way out (one undo path), and the :class:`Host` it is started in.

``start(host)`` acquires what the knob needs (a socket, a process, a cgroup, a thread) and
records in the state file, before it is used, whatever a crash would have to undo;
``apply(value)`` acts once per control period (a sleep, a share, or for a latency source the
period's reading); ``close()`` withdraws what the knob did (resumes, lifts, quits) and may run
after a failed or partial ``start``.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

__all__ = ["Host", "Knob"]


class Host(Protocol):
    """The daemon as its knobs see it: the settings, the log, the state file."""

    cfg: Any  # DaemonConfig

    def emit(self, **rec: Any) -> None:
        """One JSON line of the event log (and the metrics)."""

    def say(self, msg: str) -> None:
        """One line for the operator."""

    def _record(self, **recs: Any) -> None:
        """Update the owned-resource records of the state file and write it."""


class Knob(abc.ABC):
    """A part of the daemon with ``start``, ``apply`` and ``close``."""

    #: The setting's value that names this knob in its registry.
    name: str = ""

    @abc.abstractmethod
    def start(self, host: Any) -> None:
        """Acquire and record what the knob needs.

        Parameters
        ----------
        host : Daemon
            The daemon (settings, log, state file, the other knobs).
        """

    def apply(self, value: Any) -> Any:
        """Act once per control period (the default: nothing).

        Parameters
        ----------
        value : Any
            What to apply (a sleep, a share, ...).

        Returns
        -------
        Any
            What came of it (knob-specific).
        """
        return None

    def close(self) -> None:  # noqa: B027 -- optional hook
        """Withdraw what the knob did and release it; safe after a partial start."""
