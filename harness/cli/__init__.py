"""The ``gpucontrol`` console script: one face over demo, experiments, identification,
calibration of the simulated plant, the cluster simulator and the daemon.

Each area registers its own subcommands: a module listed in :data:`COMMAND_MODULES` exposes
``register(subparsers)``, which adds its parsers with ``set_defaults(func=...)``; ``func(args)``
returns the exit code. A command that writes results also sets ``results=`` a function of the
arguments giving its results folder and the files it owns there (None: the whole folder); the
command then runs inside :func:`harness.results.result_set` on that folder, so its files
replace the previous run's as a whole, and a run stopped part-way leaves the folder as it was
and says where its partial output is. The core (``gpucontrol``) never imports this module.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys

#: Modules that contribute subcommands (each defines ``register(subparsers)``).
COMMAND_MODULES: list[str] = [
    "harness.cli.cluster",
    "harness.cli.experiments",
    "harness.cli.daemon",
    "harness.cli.identify",
    "harness.cli.calibrate",
]


def build_parser() -> argparse.ArgumentParser:
    from gpucontrol import __version__
    from harness.args import OneLineParser

    parser = OneLineParser(
        prog="gpucontrol",
        description="Latency-guaranteed co-location of ML inference and training on one GPU.")
    parser.add_argument("--version", action="version", version=f"gpucontrol {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names (default the process's); its exit status. Ctrl-C while
    the commands are imported or the flags parsed (the first second) stops it with one line
    too: nothing has started yet that would need stopping."""
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("gpucontrol: interrupted before the command started", file=sys.stderr)
        return 130


def _run(argv: list[str] | None) -> int:
    from harness.args import Terminated, terminate_cleanly
    from harness.experiments.plants import ExperimentFailed
    from harness.results import result_note, result_set

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    where = getattr(args, "results", None)

    def note(exc: BaseException) -> str:
        text = result_note(exc)
        return f"; {text}" if text else ""

    try:
        # SIGTERM/SIGHUP unwind like Ctrl-C: every finally runs, the result set is kept apart
        with terminate_cleanly(), \
                result_set(*where(args)) if where else contextlib.nullcontext():
            return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        print(f"gpucontrol {args.command}: interrupted{note(exc)}", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"gpucontrol {args.command}: terminated by {exc.signame}; stopped what it had "
              f"started{note(exc)}", file=sys.stderr)
        return exc.exit_status
    except ExperimentFailed as exc:  # the plant ran, the result was out of reach: say why
        print(f"gpucontrol {args.command}: {exc}{note(exc)}", file=sys.stderr)
        return 1
    except ValueError as exc:  # configuration errors: say what is wrong, no traceback
        print(f"gpucontrol {args.command}: error: {exc}{note(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file that is missing or cannot be read or written
        if exc.filename is None:
            raise
        print(f"gpucontrol {args.command}: error: {exc.filename}: {exc.strerror or exc}"
              f"{note(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
