"""``gpucontrol daemon``: the node agent's own parser (:mod:`gpucontrol.node.cli`, also run
as ``python -m gpucontrol.daemon`` on a node without the harness) mounted as a subcommand.

Both entry points check the settings the same way (:class:`gpucontrol.node.DaemonConfig`):
a bad value, or a ``--training-cmd`` whose program does not exist, is one line naming the
flag, exit status 2."""

from __future__ import annotations

from typing import Any

from gpucontrol.node.cli import DESCRIPTION, add_arguments, run_from_args

__all__ = ["register"]


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
    p.set_defaults(func=run_from_args)
