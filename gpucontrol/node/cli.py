"""The node agent's command line: ``python -m gpucontrol.daemon`` and ``gpucontrol daemon``.

:func:`add_arguments` declares the flags (the harness mounts them as the ``gpucontrol daemon``
subcommand); :func:`run_from_args` turns the parsed namespace into a
:class:`~gpucontrol.node.config.DaemonConfig` once and runs the
:class:`~gpucontrol.node.daemon.Daemon`; :func:`main` adds the exit codes (0 after a clean stop
or SIGTERM, 2 for a configuration error, 1 for a failure (the launched training's
included), 130 after SIGINT / Ctrl-C) and the
stderr log format. Every flag is checked before anything runs: a bad value is one line naming
the flag and its allowed range, exit status 2, and nothing is written. The parser lives in the
node so that a node runs the daemon without the harness.

Examples
--------
>>> from gpucontrol.node.cli import build_parser
>>> from gpucontrol.node.config import DaemonConfig
>>> ns = build_parser().parse_args(["--training-pid", "4242", "--fixed-sleep", "0.1",
...                                 "--socket", "/tmp/x/g.sock"])
>>> DaemonConfig.from_args(ns).training_pids
(4242,)
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from typing import NoReturn

from gpucontrol.errors import ControlLoopError
from gpucontrol.node.config import (
    LATENCY_SOURCES,
    OUTER_LOOPS,
    READY_MODES,
    RUN_QUANTUM_S,
    SHARE_BACKENDS,
    SLEEP_METHODS,
    DaemonConfig,
)
from gpucontrol.node.logsink import LogSink

__all__ = ["add_arguments", "build_parser", "main", "run_from_args"]

logger = logging.getLogger(__name__)

DESCRIPTION = "The per-GPU control daemon: monitor -> TwoTierController -> actuators, crash-safe."

#: What begins every line the daemon writes to stderr: its errors (the parser's included) and
#: its operator lines.
PREFIX = "gpucontrol-daemon"


def _quantum(text: str) -> float | str:
    """``auto`` or a number of seconds (its range is checked by :class:`DaemonConfig`)."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be 'auto' or seconds in [{RUN_QUANTUM_S[0]:g}, {RUN_QUANTUM_S[1]:g}], "
            f"got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Declare the daemon's flags on ``p`` (one per :class:`DaemonConfig` field).

    A flag not given is absent from the namespace (``argparse.SUPPRESS``): it leaves the
    value of ``--config`` or the field's default.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The parser (or subcommand parser) to extend.
    """
    p.argument_default = argparse.SUPPRESS  # for every flag below (and its groups)
    c = p.add_argument_group("configuration")
    c.add_argument("--config", metavar="FILE", help="TOML file of settings (one per GPU; "
                   "keys: the flags without '--', '-' as '_'); the flags given override it")
    g = p.add_argument_group("control")
    g.add_argument("--slo-ms", type=float, help="latency set point (ms per batch)")
    g.add_argument("--model", help="model.json: {gain, offset} or a list of MPS-level rows")
    g.add_argument("--period-s", type=float,
                   help="control period, s, in [0.01, 3600] (default 4)")
    g.add_argument("--outer-every", type=int, help="outer loop every N periods")
    g.add_argument("--outer", choices=OUTER_LOOPS,
                   help="outer (share) loop: throughput (default; highest training rate at "
                   "the SLO, counting each change's measured cost) or paper (the GPUColo loop)")
    g.add_argument("--detune", type=float, help="inner-loop gain, fraction of deadbeat on the "
                   "model, in (0, 2) (default 0.5; lower for a noisy plant)")
    g.add_argument("--max-sleep-s", type=float,
                   help="sleep upper bound, s, in (0, 3600] (default 1; at most 60 with "
                        "--sleep-method hook)")
    g.add_argument("--fixed-sleep", type=float, help="open loop: this sleep (s) always, in "
                   "[0, --max-sleep-s]; instead of --slo-ms and --model")
    g.add_argument("--fixed-mps", type=float,
                   help="hold the share at this %% (mps: the launched training's MPS %%), "
                        "with --fixed-sleep or with the closed-loop sleep (no outer loop)")
    g.add_argument("--duration-s", type=float, help="run floor(D / period) periods, then "
                   "stop once D seconds have passed; D in (0, 604800] (default: until "
                   "stopped)")
    t = p.add_argument_group("training")
    t.add_argument("--training-pid", type=int, action="append", help="repeatable")
    t.add_argument("--training-pid-file", help="a file the training writes its PID into "
                   "(waited for; opened without following links; only a process of the "
                   "file's owner is accepted; {pod} as a directory name: a pod UID)")
    t.add_argument("--training-cgroup", help="shell pattern the training's cgroup path must "
                   "match, e.g. '*pod{pod}*' ({pod}: the pod UID of --training-pid-file)")
    t.add_argument("--training-cmd", help="command the daemon launches (and restarts for MPS)")
    t.add_argument("--training-user", help="run the launched training as this user (name or "
                   "uid; the daemon must be root); default: the daemon's user")
    t.add_argument("--sleep-method", choices=SLEEP_METHODS,
                   help="auto: cgroup freezer when possible, else signals")
    t.add_argument("--cgroup", help="cgroup v2 directory holding the training (with "
                   "--training-pid it must hold every training process; with --training-cmd "
                   "it is created if missing and the training started in it)")
    t.add_argument("--run-quantum-s", type=_quantum,
                   help="run time between pauses (about one iteration), s, in [0.001, 3600], "
                        "or 'auto' (default 0.2; not with --sleep-method hook)")
    t.add_argument("--shadow", action="store_true", help="MPS change: pre-start the new one")
    t.add_argument("--ready", choices=READY_MODES)
    t.add_argument("--ready-timeout-s", type=float,
                   help="wait this long for a restarted training, s, in (0, 3600] "
                        "(default 120)")
    t.add_argument("--mps-binary")
    t.add_argument("--mps-pipe-dir", help="join this running MPS control daemon (the node's, "
                   "e.g. the NVIDIA device plugin's) instead of starting a private one")
    t.add_argument("--mps-unchecked", action="store_true",
                   help="with --share-backend green-context: go on (one warning line) when "
                        "the inference cannot be confirmed an MPS client, instead of refusing")
    t.add_argument("--mps-health-s", type=float,
                   help="check the MPS daemon this often, s, in [0.1, 300] (back-off on "
                        "failure; default 10)")
    t.add_argument("--allow-uid", type=int, action="append", metavar="UID",
                   help="root only, repeatable: a user whose training processes may be "
                        "paused and whose PID file may name one")
    f = p.add_argument_group("files")
    f.add_argument("--gpu", type=int, help="GPU index (names the default files)")
    f.add_argument("--socket", help="latency socket (default <runtime dir>/gpuN.sock)")
    f.add_argument("--state", help="state file (default <runtime dir>/gpuN.state.json)")
    f.add_argument("--hook", help="hook file (default <runtime dir>/gpuN.hook)")
    f.add_argument("--log", help="JSON-lines log file (default stdout)")
    f.add_argument("--metrics-port", type=int,
                   help="serve Prometheus metrics on METRICS_ADDR:PORT (off by default)")
    f.add_argument("--metrics-addr",
                   help="IPv4 address or host name of the metrics server, with --metrics-port "
                        "(default 127.0.0.1, loopback only; 0.0.0.0: every interface)")
    f.add_argument("--metrics-textfile",
                   help="also write the metrics to this file every period (node-exporter "
                   "text-file collector)")
    f.add_argument("--socket-group", help="group (name or gid) allowed to report to the "
                   "socket and read the hook file (default: owner only)")
    s = p.add_argument_group("supervision")
    s.add_argument("--resume-only", action="store_true",
                   help="resume whatever the state file (--state, or the default of --gpu) "
                   "lists as stopped, then exit; for systemd ExecStopPost=")
    s.add_argument("--stall-timeout-s", type=float,
                   help="guardian resumes the training and kills a daemon whose loop is "
                   "silent this long, s, in [0.1, 3600] (default 1.5 periods, at least 2 s; "
                   "0: off)")
    _add_source_arguments(p)


def _add_source_arguments(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("latency source and share backend")
    s.add_argument("--latency-source", choices=LATENCY_SOURCES,
                   help="socket: report_latency datagrams (default); prometheus: scrape a "
                        "latency histogram (bucket deltas per period)")
    s.add_argument("--prometheus-url", help="with --latency-source prometheus: the inference "
                   "server's /metrics URL (each scrape waited for at most min(1 s, "
                   "--period-s/2, --stall-timeout-s/4); a late one is a period without samples)")
    s.add_argument("--prometheus-metric",
                   help="with --latency-source prometheus: histogram base name, in seconds "
                        "(default inference_latency_seconds)")
    s.add_argument("--share-backend", choices=SHARE_BACKENDS,
                   help="outer-loop knob: mps (restart the launched training with a new MPS "
                        "percentage, default), cpu (the training's cgroup CPU quota) or "
                        "green-context (the share written into the hook file; the cooperative "
                        "training switches its SM partition at its next iteration), or none "
                        "(no share: the training outside MPS, the sleep alone); cpu and "
                        "green-context change it without a restart, so --outer-every may be "
                        "short, down to 1 (a decision still averages the last 8 periods; see "
                        "docs/daemon.md)")
    s.add_argument("--share-cgroup",
                   help="with --share-backend cpu: the CPU-share group name under the cgroup "
                        "cpu controller (default gpucontrol-training-gpu<N>, N the --gpu); one "
                        "daemon per group")
    s.add_argument("--green-shares",
                   help="with --share-backend green-context: the partitions the training "
                        "created, %% comma-separated (e.g. 25,50,75,100, its --green-shares); "
                        "the daemon reports the partition a command runs on")


def run_from_args(args: argparse.Namespace) -> int:
    """Build the :class:`DaemonConfig` from parsed flags and run the daemon to its end.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by a parser that :func:`add_arguments` extended.

    Returns
    -------
    int
        The daemon's exit status (0; 130 when SIGINT stopped it; 1 when the training it
        launched ended by itself and failed).

    Raises
    ------
    ValueError
        A bad setting (the message names the flag and the allowed range).
    """
    if getattr(args, "resume_only", False):
        return _resume_only(args)
    from gpucontrol.node.daemon import Daemon  # the daemon's imports (numpy) only when it runs

    return Daemon(DaemonConfig.from_args(args)).run()


def _resume_only(args: argparse.Namespace) -> int:
    """``--resume-only``: resume what the state file lists, print one JSON line, exit 0."""
    import json
    import os

    from gpucontrol.node._runtime import default_path
    from gpucontrol.node.guardian import resume_only

    gpu = getattr(args, "gpu", 0) or 0
    if gpu < 0:
        raise ValueError(f"--gpu must be >= 0, got {gpu}")
    flags = {a.dest for a in build_parser()._actions}  # a flag given is in the namespace
    for name in vars(args):  # nothing else would be used: refuse, not ignore
        if name in flags and name not in _RESUME_ONLY_FLAGS:
            raise ValueError(f"--{name.replace('_', '-')} has no effect with --resume-only "
                             "(it reads only the state file: --state or --gpu)")
    path = os.path.abspath(args.state) if getattr(args, "state", None) else str(
        default_path("state", gpu))
    try:
        out = resume_only(path)
    except ValueError as exc:
        raise ValueError(f"--state {path}: {exc}") from None
    print(json.dumps(out), flush=True)
    if out["owner_alive"]:
        logger.warning("the daemon of %s (pid %s) still runs; resumed its targets anyway",
                       path, out.get("daemon_pid"))
    return 0


#: What ``--resume-only`` reads; any other flag given with it is refused.
_RESUME_ONLY_FLAGS = ("resume_only", "state", "gpu", "socket", "hook")  # the last two: harmless


class _OneLineParser(argparse.ArgumentParser):
    """Errors as one line (``gpucontrol-daemon: error: MESSAGE (see 'PROG -h')``), exit
    status 2, with the prefix of every other error :func:`main` prints (:data:`PREFIX`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PREFIX}: error: {message} (see '{self.prog} -h')\n")


def build_parser() -> argparse.ArgumentParser:
    """The stand-alone parser of ``python -m gpucontrol.daemon`` (errors in one line).

    Returns
    -------
    argparse.ArgumentParser
        A parser with the flags of :func:`add_arguments`.
    """
    p = _OneLineParser(prog="python -m gpucontrol.daemon", description=DESCRIPTION)
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the daemon from a command line; human messages go to stderr.

    Parameters
    ----------
    argv : list of str or None
        The arguments (None: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 after a clean stop (SIGTERM, the duration, the training's end), 2 for a
        configuration error (one line naming the flag; nothing written), 1 for an
        operating-system error at set-up (one line, no traceback), a failure of the control
        loop after set-up (one line and the traceback; everything was resumed first) or a
        launched training that ended by itself and failed (its exit status not 0, or killed
        by a signal: one line), 130 after SIGINT (Ctrl-C).
    """
    args = build_parser().parse_args(argv)
    _configure_logging()
    try:
        return run_from_args(args)
    except ControlLoopError as exc:  # after set-up: a bug, reported with its traceback
        print(f"{PREFIX}: error: {exc}", file=sys.stderr)
        if exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"{PREFIX}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the machine refused (no space, no permission...): one line
        print(f"{PREFIX}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if _sink is not None:
            _sink.flush(timeout=1.0)  # bounded: a stalled stderr cannot hold the exit


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (so a replaced stream is followed)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            if sys.stderr is sys.__stderr__ and sys.stderr is not None:
                _stderr_sink().write_line(line)  # never blocks on a stalled stderr reader
                return
            sys.stderr.write(line)
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


_sink: LogSink | None = None


def _stderr_sink() -> LogSink:
    global _sink
    if _sink is None:
        _sink = LogSink(sys.stderr)
    return _sink


_handler: _StderrHandler | None = None


def _configure_logging() -> None:
    """Node log records to stderr as ``gpucontrol-daemon: message`` (once per process)."""
    global _handler
    if _handler is not None:
        return
    _handler = _StderrHandler()
    _handler.setFormatter(logging.Formatter(f"{PREFIX}: %(message)s"))
    root = logging.getLogger("gpucontrol")
    root.addHandler(_handler)
    if root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
