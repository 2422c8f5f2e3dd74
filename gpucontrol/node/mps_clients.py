"""Is the inference an MPS client? The question the green-context share depends on.

Measured on an H100 (ResNet-50 inference beside a matmul training): without MPS the two
processes time-slice the GPU, and a green-context partition confines the training without
lowering the inference's latency at all (40.4 ms at every share); inside MPS the same
partitions match or beat MPS restarts at every share. So the share backend ``green-context``
runs with both processes as clients of one MPS control daemon, and the daemon checks it at
start with the control daemon's own commands: ``get_server_list`` (the MPS servers, one per
user unless the daemon runs in multi-user mode) and ``get_client_list <server>`` (the
processes connected to it). A client that is neither the training nor one of its descendants
is taken as the inference. The verdict is one of:

* ``yes`` -- some server has a client besides the training;
* ``no`` -- the servers' clients are the training's only (the inference runs outside MPS, or
  as another user than the server's, or against another control daemon);
* ``unknown`` -- no control daemon (the binary is missing, it does not answer), or no server
  yet (no client has connected: e.g. a control daemon this agent has just started).

Examples
--------
>>> check = judge({4242: [501, 777]}, training=[501])
>>> check.verdict, check.others
('yes', [777])
>>> judge({4242: [501]}, training=[501]).verdict
'no'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucontrol.node.actuators.mps import MPSControl, MPSError
from gpucontrol.node.actuators.procs import descendants

__all__ = ["ClientCheck", "check_inference_client", "confirm_inference_client", "judge"]


@dataclass(frozen=True)
class ClientCheck:
    """What the MPS control daemon said about its clients.

    Parameters
    ----------
    verdict : {'yes', 'no', 'unknown'}
        Whether a client besides the training was found.
    reason : str
        The measured reason, one line.
    servers : dict
        Server PID -> its client PIDs.
    others : list of int
        The clients that are not the training's.
    """

    verdict: str
    reason: str
    servers: dict[int, list[int]] = field(default_factory=dict)
    others: list[int] = field(default_factory=list)

    def as_event(self) -> dict[str, Any]:
        """The ``mps_clients`` event."""
        return {"event": "mps_clients", "inference_client": self.verdict,
                "reason": self.reason, "servers": {str(k): v for k, v in self.servers.items()},
                "others": self.others}


def judge(servers: Mapping[int, Iterable[int]], training: Iterable[int]) -> ClientCheck:
    """The verdict from the servers' client lists and the training's processes.

    Parameters
    ----------
    servers : mapping
        Server PID -> client PIDs.
    training : iterable of int
        The training's processes (with their descendants).

    Returns
    -------
    ClientCheck
        ``yes`` when a client is not the training's, else ``no``; ``unknown`` without a
        server.
    """
    got = {int(s): sorted(int(c) for c in cs) for s, cs in servers.items()}
    if not got:
        return ClientCheck("unknown", "no MPS server runs yet: no client has connected to the "
                           "control daemon", got)
    mine = set(training)
    others = sorted({c for cs in got.values() for c in cs} - mine)
    shown = "; ".join(f"server {s}: clients {cs or 'none'}" for s, cs in sorted(got.items()))
    if others:
        return ClientCheck("yes", f"{len(others)} MPS client(s) besides the training ({shown})",
                           got, others)
    return ClientCheck("no", f"the training is the only MPS client ({shown}): the inference "
                       "is not a client of this control daemon", got, [])


def check_inference_client(ctl: MPSControl | None, training: Iterable[int], *,
                           why_none: str = "") -> ClientCheck:
    """Ask the control daemon for its servers and clients; judge.

    Parameters
    ----------
    ctl : MPSControl or None
        The control daemon in use (None: none).
    training : iterable of int
        The training's root processes (their descendants are the training's too).
    why_none : str
        Why there is no control daemon, when ``ctl`` is None.

    Returns
    -------
    ClientCheck
        The verdict and the measured reason.
    """
    if ctl is None:
        return ClientCheck("unknown", f"no MPS control daemon ({why_none or 'none in use'})")
    roots = list(training)
    try:
        servers = {s: ctl.client_list(s) for s in ctl.server_list()}
    except (MPSError, ValueError, OSError) as exc:
        return ClientCheck("unknown", f"the MPS control daemon in {ctl.pipe_dir} did not list "
                           f"its clients ({exc})")
    check = judge(servers, [*roots, *descendants(roots)])
    if check.verdict == "unknown":
        return ClientCheck("unknown", f"{check.reason} ({ctl.pipe_dir})", check.servers)
    return check


def confirm_inference_client(host: Any, *, unchecked: bool) -> tuple[ClientCheck, str]:
    """The daemon's check at start (``--share-backend green-context``): ask its MPS control
    daemon, log ``mps_clients``; when the inference is not a client or that cannot be told,
    refuse in one line with the measured reason, or with ``unchecked`` say that line and go on.

    Parameters
    ----------
    host : Daemon
        The daemon (its ``mps``, ``training``, ``emit`` and ``say``).
    unchecked : bool
        Go on when the inference is not confirmed a client.

    Returns
    -------
    tuple of (ClientCheck, str)
        The verdict, and what to add to the ``share_backend`` event's reason.

    Raises
    ------
    ConfigurationError
        Not confirmed, and not ``unchecked``.
    """
    from gpucontrol.errors import ConfigurationError

    mps = host.mps
    if mps is None:
        why = ("a training the agent does not launch joins only the node's control daemon: "
               "give --mps-pipe-dir (or run the agent with its CUDA_MPS_PIPE_DIRECTORY)")
    else:
        why = mps.error
    check = check_inference_client(mps.ctl if mps is not None else None, host.training.pids,
                                   why_none=why)
    host.emit(**check.as_event())
    if mps is not None and mps.ok and mps.ctl is not None:
        kind = "private" if mps.private else "node's"
        said = f"; inside the {kind} MPS control daemon in {mps.ctl.pipe_dir}"
    else:
        said = "; without MPS"
    if check.verdict == "yes":
        return check, f"{said} ({check.reason})"
    line = ("the inference is not an MPS client" if check.verdict == "no" else
            "cannot tell whether the inference is an MPS client") + f": {check.reason}"
    if not unchecked:
        raise ConfigurationError(
            f"--share-backend green-context: {line}; without MPS a partition confines the "
            "training but does not lower the inference's latency (docs/daemon.md); run both "
            "as clients of one MPS control daemon, or give --mps-unchecked")
    host.say(f"--share-backend green-context: {line} (--mps-unchecked: going on)")
    return check, f"{said}; {line}"
