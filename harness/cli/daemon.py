"""``gpucontrol daemon``: the node agent's own parser (:mod:`gpucontrol.node.cli`, also run
as ``python -m gpucontrol.daemon`` on a node without the harness) mounted as a subcommand."""

from __future__ import annotations

from typing import Any

from gpucontrol.node.cli import DESCRIPTION, add_arguments, run_from_args


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
