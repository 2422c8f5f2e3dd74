"""``gpucontrol daemon``: the node agent's own parser (:mod:`gpucontrol.node.cli`, also run
as ``python -m gpucontrol.daemon`` on a node without the harness) mounted as a subcommand.

Before the daemon starts, :func:`check_training_cmd` makes sure the program of
``--training-cmd`` exists, so a typo is one line (exit status 2) instead of a traceback from
the launcher."""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import shutil
from typing import Any

from gpucontrol.node.cli import DESCRIPTION, add_arguments, run_from_args
from harness.cli.args import UsageError

__all__ = ["check_training_cmd", "register"]


def check_training_cmd(cmd: str | None) -> None:
    """Refuse a ``--training-cmd`` whose program cannot be run.

    Parameters
    ----------
    cmd : str or None
        The command line (split as the daemon splits it, with :func:`shlex.split`).

    Returns
    -------
    None
        It raises :class:`~harness.cli.args.UsageError` or returns.
    """
    if cmd is None:
        return
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise UsageError(f"--training-cmd {cmd!r}: cannot be split into arguments ({exc})") \
            from None
    if not argv:
        raise UsageError("--training-cmd is empty; give the command that starts the training")
    prog = argv[0]
    if os.sep in prog:
        ok = os.path.isfile(prog) and os.access(prog, os.X_OK)
    else:
        ok = shutil.which(prog) is not None
    if not ok:
        raise UsageError(f"--training-cmd: program {prog!r} not found or not executable"
                         + ("" if os.sep in prog else " on PATH"))


@functools.wraps(run_from_args)
def _run(args: argparse.Namespace) -> int:
    """:func:`check_training_cmd`, then the node's ``run_from_args``."""
    check_training_cmd(args.training_cmd)
    return run_from_args(args)


def register(subparsers: Any) -> None:
    """Add the ``daemon`` subcommand to the ``gpucontrol`` console script.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        What ``ArgumentParser.add_subparsers`` returned.
    """
    p = subparsers.add_parser("daemon", help="run the per-GPU control daemon",
                              description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=_run)
