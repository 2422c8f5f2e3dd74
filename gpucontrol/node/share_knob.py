"""The base of the daemon's share knobs (:mod:`gpucontrol.node.share`): what every spatial-share
backend tells the daemon and the controller -- whether a change needs a restart, when it
starts (before the training, whose first iteration reads it, or after), whether it needs an
MPS control daemon and which, the ``share_backend`` event, the metrics label, a restart-free
change and its withdrawal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, ClassVar

from gpucontrol.node.actuators.spatial import (
    BackendInfo,
    SpatialShareBackend,
    change_cost_periods,
)
from gpucontrol.node.knobs import Knob

__all__ = ["ShareKnob"]


class ShareKnob(Knob):
    """The daemon's spatial-share backend, from its choice to its release.

    Parameters
    ----------
    infos : iterable of BackendInfo
        What :func:`~gpucontrol.node.actuators.spatial.detect_backends` found here.
    cfg : DaemonConfig or None
        The settings.

    Attributes
    ----------
    backend : SpatialShareBackend or None
        The backend once built (None: no share knob, e.g. MPS unavailable).
    reason : str
        Why this backend, or why none.
    """

    #: The backend's name in :data:`gpucontrol.node.actuators.spatial.BACKENDS`.
    backend_name: ClassVar[str] = ""
    #: Whether a change needs no restart (the controller's ``ShareKnob(change_s=0)``).
    changes_without_restart: ClassVar[bool] = False
    #: Started before the training (its first iteration reads the share) or after it.
    before_training: ClassVar[bool] = False
    #: The metrics' ``backend`` label.
    label: ClassVar[str] = ""

    def __init__(self, infos: Iterable[BackendInfo] = (), cfg: Any = None) -> None:
        self.cfg = cfg
        self.info = {i.name: i for i in infos}.get(self.backend_name)
        self.backend: SpatialShareBackend | None = None
        self.reason = ""
        self.host: Any = None

    @staticmethod
    def needs_mps(cfg: Any) -> bool:
        """Whether this backend runs the training (and the inference) under MPS.

        Parameters
        ----------
        cfg : DaemonConfig
            The settings.

        Returns
        -------
        bool
            False here.
        """
        return False

    @classmethod
    def mps_required_by(cls, cfg: Any) -> str | None:
        """The setting that cannot do without MPS here: ``--fixed-mps`` on a backend whose
        share is MPS's own (it needs MPS and changes the share by a restart); without MPS the
        share would silently stay at 100 %, so the start is refused instead of going on
        sleep-only.

        Parameters
        ----------
        cfg : DaemonConfig
            The settings.

        Returns
        -------
        str or None
            The flag and its value as a message names them; None when the daemon may go on
            without MPS.
        """
        if cfg.fixed_mps is not None and cls.needs_mps(cfg) and not cls.changes_without_restart:
            return f"--fixed-mps {cfg.fixed_mps:g}"
        return None

    @staticmethod
    def mps_pipe_dir(cfg: Any) -> str | None:
        """The running MPS control daemon to join (None: start a private one).

        Parameters
        ----------
        cfg : DaemonConfig
            The settings.

        Returns
        -------
        str or None
            ``--mps-pipe-dir``.
        """
        return cfg.mps_pipe_dir

    def launch_pct(self, host: Any) -> float:
        """The MPS active-thread percentage a launched training starts with (its share,
        unless the share is not MPS's).

        Parameters
        ----------
        host : Daemon
            The daemon.

        Returns
        -------
        float
            The percentage.
        """
        return float(host.initial_share())

    def confirm(self, host: Any) -> None:
        """Once the training runs: check what the backend needs of it (default: nothing).

        Parameters
        ----------
        host : Daemon
            The daemon.
        """

    def words(self, text: str) -> str:
        """The controller's words for this backend: its "MPS" is the share unless the
        backend is MPS's (a CPU quota is no MPS percentage).

        Parameters
        ----------
        text : str
            A reason the controller gave (``outer throughput: ..., MPS 100 -> 92``).

        Returns
        -------
        str
            The same, "MPS" said "share".

        Examples
        --------
        >>> from gpucontrol.node.share import CPUQuotaShare
        >>> CPUQuotaShare().words("outer throughput: up, MPS 100 -> 92")
        'outer throughput: up, share 100 -> 92'
        """
        return re.sub(r"\bMPS\b", "share", text)

    @property
    def restart_free(self) -> bool:
        """True when a built backend changes the share without a restart."""
        return self.backend is not None and self.backend.restart_free

    def chosen(self, period_s: float) -> dict[str, Any]:
        """The ``share_backend`` event: what was chosen, why, and what a change costs.

        Parameters
        ----------
        period_s : float
            The control period, s.

        Returns
        -------
        dict
            The event.
        """
        b = self.backend
        if b is None:
            return {"event": "share_backend", "flag": self.name, "backend": None,
                    "reason": self.reason}
        return {"event": "share_backend", "flag": self.name, "backend": b.name,
                "restart_free": b.restart_free, "granularity_pct": b.granularity_pct,
                "change_latency_s": _num(b.resize_latency_s),
                "change_cost_periods": _num(change_cost_periods(b, period_s)),
                "controller_restart_s": 0.0 if b.restart_free else None,
                "share_pct": b.share_pct, "reason": self.reason}

    def metrics_label(self) -> str:
        """The ``backend`` label of ``gpucontrol_spatial_share_ratio`` (``none`` without a
        backend)."""
        return self.label if self.backend is not None else "none"

    def change(self, pct: float) -> dict[str, Any]:
        """Apply a restart-free change; the ``share_change`` event (``ok`` False with the
        error when the backend refused).

        Parameters
        ----------
        pct : float
            The new share, %.

        Returns
        -------
        dict
            The event.
        """
        assert self.backend is not None and self.backend.restart_free
        try:
            dt = self.backend.set_share_pct(pct)
        except (OSError, ValueError) as exc:
            return {"event": "share_change", "ok": False, "new_pct": pct, "error": str(exc),
                    "backend": self.backend.name}
        return {"event": "share_change", "ok": True, "new_pct": pct,
                "applied_pct": self.backend.share_pct, "latency_s": round(dt, 6),
                "backend": self.backend.name}

    def apply(self, value: Any) -> None:
        """A restart-free change, logged (``share_change``).

        Parameters
        ----------
        value : float
            The new share, %.
        """
        if self.restart_free:
            self.host.emit(**self.change(value))

    def close(self) -> None:
        """Withdraw the share (the training back on its full share)."""
        b, self.backend = self.backend, None
        if b is not None and b.restart_free:
            b.close()


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
