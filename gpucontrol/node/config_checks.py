"""The rules behind :class:`~gpucontrol.node.config.DaemonConfig`: which fields are text,
paths or flags, the settings that act only together (:data:`NEEDS`), and the checks that look
at the machine (:func:`check_environment`: files, the metrics port, the training's program,
user and processes, the MPS binary a held MPS share needs).
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import shutil
import socket
from collections.abc import Callable
from typing import Any

from gpucontrol.errors import ConfigurationError

__all__ = ["BOOL_FIELDS", "FILE_ONLY", "NEEDS", "PATH_FIELDS", "TEXT_FIELDS", "TEXT_REQUIRED",
           "check_environment", "check_metrics_addr", "flag_of"]

#: Fields that are flags (True/False), text, text that must be given, and file paths.
BOOL_FIELDS = ("shadow", "mps_unchecked")
TEXT_FIELDS = ("training_cmd", "training_pid_file", "training_cgroup", "training_user",
                "model", "cgroup",
                "mps_binary", "mps_pipe_dir", "socket", "state", "hook", "log", "metrics_addr",
                "metrics_textfile", "metrics_target",
                "socket_group", "prometheus_url", "prometheus_metric", "share_cgroup",
                "outer", "mode", "sleep_method", "ready", "latency_source", "share_backend")
TEXT_REQUIRED = ("mps_binary", "socket", "state", "hook", "metrics_addr", "prometheus_metric",
                  "share_cgroup", "outer", "mode", "sleep_method", "ready", "latency_source",
                  "share_backend")
PATH_FIELDS = ("training_pid_file", "model", "cgroup", "mps_pipe_dir", "socket", "state",
                "hook", "log", "metrics_textfile")


#: Settings only the configuration file sets (no flag outside the tests used them).
FILE_ONLY = ("mode", "initial_mps", "metrics_target", "silent_periods", "unready_periods")


def flag_of(field: str) -> str:
    """How a message names a :class:`DaemonConfig` field: its command-line flag, or its
    configuration-file key for a setting only the file sets.

    >>> flag_of("slo_ms"), flag_of("silent_periods")
    ('--slo-ms', 'silent_periods (--config)')
    """
    if field in FILE_ONLY:
        return f"{field} (--config)"
    return "--" + field.replace("_", "-")


#: Settings that act only together with another one: (fields, when they act, why not). A
#: field away from its default while the condition is false would be silently ignored, so
#: :class:`DaemonConfig` refuses it, naming the flag.
NEEDS: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (("slo_ms", "model", "detune", "outer", "outer_every", "mode"),
     lambda c: c.fixed_sleep is None,
     "is for the closed loop, and --fixed-sleep runs open loop, which would ignore it: give "
     "--fixed-sleep or --slo-ms and --model, not both"),
    (("outer", "outer_every"), lambda c: c.fixed_mps is None,
     "has no effect with --fixed-mps: the share is held, no outer loop runs"),
    (("initial_mps",), lambda c: c.fixed_mps is None,
     "has no effect with --fixed-mps: the share starts (and stays) at --fixed-mps"),
    (("outer", "outer_every", "initial_mps", "fixed_mps"), lambda c: c.share_backend != "none",
     "has no effect with --share-backend none: there is no share knob, the sleep alone runs"),
    (("prometheus_url", "prometheus_metric"), lambda c: c.latency_source == "prometheus",
     "goes with --latency-source prometheus (the latency comes from the socket otherwise)"),
    (("share_cgroup",), lambda c: c.share_backend == "cpu",
     "goes with --share-backend cpu"),
    (("green_shares",), lambda c: c.share_backend == "green-context",
     "goes with --share-backend green-context"),
    (("mps_pipe_dir",), lambda c: (bool(c.training_cmd) and c.share_backend == "mps")
     or c.share_backend == "green-context",
     "goes with --training-cmd and --share-backend mps (only a training the daemon launches "
     "is restarted at a new MPS share), or with --share-backend green-context"),
    (("mps_unchecked",), lambda c: c.share_backend == "green-context",
     "goes with --share-backend green-context (whose partitions need both processes inside "
     "MPS)"),
    (("shadow", "ready", "ready_timeout_s"),
     lambda c: bool(c.training_cmd) and c.share_backend == "mps",
     "goes with --training-cmd and --share-backend mps (it shapes the restart of a launched "
     "training for a new MPS share)"),
    (("run_quantum_s",), lambda c: c.sleep_method != "hook",
     "has no effect with --sleep-method hook (the training sleeps between its own "
     "iterations)"),
    (("training_user",), lambda c: bool(c.training_cmd),
     "goes with --training-cmd (it is the user the launched training runs as)"),
    (("training_cgroup",), lambda c: not c.training_cmd,
     "checks a training the daemon is given (--training-pid or --training-pid-file); one it "
     "launches with --training-cmd is its own"),
    (("unready_periods",), lambda c: c.metrics_port is not None,
     "goes with --metrics-port (/readyz is served there)"),
    (("metrics_addr",), lambda c: c.metrics_port is not None,
     "goes with --metrics-port (no metrics server runs without it)"),
    (("metrics_target",), lambda c: c.metrics_port is not None or bool(c.metrics_textfile),
     "goes with --metrics-port or --metrics-textfile"),
)


def check_metrics_addr(addr: str) -> None:
    """Refuse an empty ``--metrics-addr`` (the server would listen on every interface) and
    a dotted number that is no IPv4 address (it would be looked up as a host name)."""
    if not isinstance(addr, str) or not addr.strip():
        raise ConfigurationError(f"--metrics-addr must be an IPv4 address or a host name "
                                 f"(0.0.0.0 for every interface), got {addr!r}")
    if addr.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(addr)
        except ValueError:
            raise ConfigurationError(f"--metrics-addr must be an IPv4 address or a host "
                                     f"name, got {addr!r}") from None


def _check_metrics_listen(addr: str, port: int) -> None:
    """Bind (and close) where the metrics server will listen, as it will (IPv4,
    ``SO_REUSEADDR``): an unknown host, an address not of this machine or a port in use is
    one line naming the flag, before anything runs."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
    except socket.gaierror as exc:
        raise ConfigurationError(f"--metrics-addr {addr!r}: no IPv4 address of that name "
                                 f"({exc.strerror})") from None
    except OSError as exc:
        raise ConfigurationError(f"--metrics-addr {addr} --metrics-port {port}: cannot "
                                 f"listen there ({exc.strerror})") from None


def _check_file_path(flag: str, path: str) -> None:
    """Refuse a ``--socket``/``--state``/``--hook`` that is a directory, and a ``--socket``
    no Unix socket address can hold (before its directory is made)."""
    if os.path.isdir(path):
        raise ConfigurationError(f"{flag} {path} is a directory; give the path of a file")
    if flag == "--socket":
        from gpucontrol.node.monitor import MAX_NAME_VIA_FD, MAX_SOCKET_PATH, socket_path_fits

        if not socket_path_fits(path):
            raise ConfigurationError(
                f"--socket {path}: too long for a Unix socket (its name at most "
                f"{MAX_NAME_VIA_FD} bytes, or the whole path at most {MAX_SOCKET_PATH})")


def _check_textfile(path: str) -> None:
    """Refuse a ``--metrics-textfile`` that is a directory or whose directory cannot take it
    (missing, or not one the daemon may write into safely), before the start: it would
    otherwise fail every period."""
    from gpucontrol.node._runtime import open_private_dir

    p = os.path.abspath(path)
    if os.path.isdir(p):
        raise ConfigurationError(f"--metrics-textfile {path} is a directory; give the path of "
                                 "a file")
    try:
        os.close(open_private_dir(os.path.dirname(p)))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(f"--metrics-textfile {path}: cannot write into its directory "
                                 f"({why})") from None


def _check_program(cmd: str) -> None:
    """Refuse a ``--training-cmd`` whose program cannot be run (split as the daemon splits
    it), so a typo is one line instead of a traceback from the launcher."""
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise ConfigurationError(f"--training-cmd {cmd!r}: cannot be split into arguments "
                                 f"({exc})") from None
    if not argv:
        raise ConfigurationError("--training-cmd is empty; give the command that starts the "
                                 "training")
    prog = argv[0]
    if os.sep in prog:
        ok = os.path.isfile(prog) and os.access(prog, os.X_OK)
    else:
        ok = shutil.which(prog) is not None
    if not ok:
        raise ConfigurationError(f"--training-cmd: program {prog!r} not found or not "
                                 "executable" + ("" if os.sep in prog else " on PATH"))


def _check_mps(cfg: Any) -> None:
    """Refuse a setting that needs MPS (:meth:`ShareKnob.mps_required_by`) where the MPS
    control binary is not there, before anything runs (it would otherwise be found out only
    once the daemon had started)."""
    from gpucontrol.node.actuators.mps import MPSControl
    from gpucontrol.node.registry import SHARE_BACKENDS, knob_class

    need = knob_class(SHARE_BACKENDS, cfg.share_backend).mps_required_by(cfg)
    if need is not None and not MPSControl(cfg.mps_binary).available():
        raise ConfigurationError(f"{need} needs MPS, which is unavailable here: "
                                 f"{cfg.mps_binary} not found (--mps-binary names it)")


def check_environment(cfg: Any) -> None:
    """The checks of :meth:`DaemonConfig.check_environment` (see there)."""
    from gpucontrol.node.actuators.procs import TargetRefused, check_target

    if cfg.allowed_uids and os.geteuid() != 0:
        raise ConfigurationError("--allow-uid is for root only (only root may pause "
                                 "another user's processes)")
    for name, path in (("--socket", cfg.socket), ("--state", cfg.state),
                       ("--hook", cfg.hook)):
        _check_file_path(name, path)
    if cfg.metrics_port is not None:
        _check_metrics_listen(cfg.metrics_addr, cfg.metrics_port)
    if cfg.metrics_textfile:
        _check_textfile(cfg.metrics_textfile)
    if cfg.training_cmd is not None:
        _check_program(cfg.training_cmd)
    _check_mps(cfg)
    if cfg.training_user is not None:
        uid = cfg.training_uid()
        if os.geteuid() not in (0, uid):
            raise ConfigurationError(f"--training-user {cfg.training_user}: only root may "
                                     "start the training as another user")
    for pid in cfg.training_pids:
        check_target(pid, uids=cfg.target_uids())
    if cfg.training_cgroup is not None and cfg.training_pids:
        from gpucontrol.node.pidfile import cgroup_matches, proc_cgroups

        for pid in cfg.training_pids:
            if not cgroup_matches(proc_cgroups(pid), cfg.training_cgroup, None):
                raise TargetRefused(f"--training-pid {pid}: its cgroup "
                                    f"({', '.join(proc_cgroups(pid)) or 'the root cgroup'})"
                                    f" does not match --training-cgroup "
                                    f"{cfg.training_cgroup}")
