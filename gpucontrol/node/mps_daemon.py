"""The MPS control daemon the training (and the inference) are clients of: a private one the
agent starts (``nvidia-cuda-mps-control -d`` with its own pipe and log directories) or the
node's, joined with ``--mps-pipe-dir`` (a systemd ``nvidia-mps`` unit, the NVIDIA device
plugin's MPS daemon on Kubernetes).

A private daemon is listed in the state file before ``-d`` runs, watched off the control loop
(:class:`~gpucontrol.node.mps_health.MPSHealthWatch`, restarted when it dies) and quit on every
way out: :meth:`MPSDaemon.close` on a clean stop, the guardian or the next daemon from the
state file after a crash. A joined one is only watched, never restarted or quit.
"""

from __future__ import annotations

import contextlib
from typing import Any

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.actuators.mps import MPSControl, MPSError
from gpucontrol.node.knobs import Knob
from gpucontrol.node.mps_health import MPSHealthWatch

__all__ = ["MPSDaemon"]


class MPSDaemon(Knob):
    """Start or join an MPS control daemon; watch it; quit it if it is ours.

    Parameters
    ----------
    cfg : DaemonConfig
        The settings (``mps_binary``, ``mps_pipe_dir``, ``mps_health_s``).
    pipe_dir : str or None
        A running control daemon to join (``--mps-pipe-dir``); None: start a private one.
    say : bool
        Say in one operator line when MPS is unavailable (False: the share backend says it).
    required_by : str or None
        The setting that cannot do without MPS (``--fixed-mps P`` on the ``mps`` backend,
        :meth:`~gpucontrol.node.share_knob.ShareKnob.mps_required_by`): MPS unavailable then
        refuses the start (:class:`~gpucontrol.errors.ConfigurationError`, one line naming
        it) instead of going on sleep-only. None: go on without MPS.

    Attributes
    ----------
    ctl : MPSControl or None
        The control daemon's client while it is in use.
    ok : bool
        Whether one is in use.
    error : str
        Why not, when it is not.
    """

    name = "mps"

    def __init__(self, cfg: Any, *, pipe_dir: str | None = None, say: bool = True,
                 required_by: str | None = None) -> None:
        self.cfg = cfg
        self.pipe_dir = pipe_dir  # the running control daemon to join; None: a private one
        self._say = say  # an operator line when MPS is unavailable (else the share says it)
        self.required_by = required_by  # MPS unavailable refuses the start
        self.ctl: MPSControl | None = None
        self.ok = False
        self.error = ""
        self.watch: MPSHealthWatch | None = None
        self.private = pipe_dir is None

    def start(self, host: Any) -> None:
        """Start the private daemon (listed first) or check the node's; a failure is said
        and logged (``mps_unavailable``) and leaves the daemon without MPS, or refuses the
        start when a setting requires MPS (``required_by``), before saying or logging it."""
        cfg = self.cfg
        ctl = MPSControl(cfg.mps_binary, pipe_dir=self.pipe_dir)
        if not ctl.available():
            self._unavailable(host, f"{cfg.mps_binary} not found",
                              f"{cfg.mps_binary} not found: MPS unavailable, running "
                              "sleep-only")
            return
        try:
            if self.private:
                # recorded before `-d`: if we die from here on, it is quit and removed
                ctl.make_private_dirs()
                host._record(mps=ctl.record())
                self.ctl = ctl
                ctl.start()
            elif not ctl.health():
                raise MPSError(f"no MPS control daemon answers in {self.pipe_dir}")
            self.ctl, self.ok = ctl, True
            self.watch = MPSHealthWatch(ctl, interval_s=cfg.mps_health_s,
                                        restart=self.private).start()
            host.emit(event="mps_ready", pipe_dir=ctl.pipe_dir)
        except MPSError as exc:
            if self.private:  # our private directories: gone, unlisted
                with contextlib.suppress(MPSError, OSError):
                    ctl.quit()
                host._records.pop("mps", None)
            self.ctl = None
            self._unavailable(host, str(exc), f"MPS unavailable ({exc}); running sleep-only",
                              error=str(exc))

    def _unavailable(self, host: Any, why: str, line: str, **event: Any) -> None:
        """No MPS: refuse the start if a setting requires it, else say ``line`` (unless the
        share backend says it) and log ``mps_unavailable``."""
        self.error = why
        if self.required_by is not None:
            raise ConfigurationError(f"{self.required_by} needs MPS, which is unavailable "
                                     f"here: {why}")
        if self._say:
            host.say(line)
        host.emit(event="mps_unavailable", **event)

    @property
    def healthy(self) -> bool:
        """Whether the last health check passed (True without a watch)."""
        return self.watch is None or self.watch.healthy

    def take_events(self) -> list[dict]:
        """The health watch's transitions since the last call.

        Returns
        -------
        list of dict
            Event records for the log.
        """
        return self.watch.take_events() if self.watch is not None else []

    def close(self) -> None:
        """Stop the watch; quit a private daemon (a joined one is left running)."""
        try:
            if self.watch is not None:
                self.watch.close()
        finally:
            if self.private and self.ctl is not None:
                self.ctl.quit()
