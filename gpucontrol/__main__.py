"""``python -m gpucontrol``: the package's version, and the node agent.

``python -m gpucontrol --version`` prints the version (as ``gpucontrol --version`` does);
``python -m gpucontrol daemon ARGS`` runs the per-GPU node agent, the same program as
``python -m gpucontrol.daemon ARGS`` (the name the unit files use) and ``gpucontrol daemon
ARGS``. The experiments, identification, calibration and the cluster simulator are the
``gpucontrol`` console script, which lives in the harness: this package never imports it, so
a node with the library alone has this entry point and the daemon.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gpucontrol import __version__

__all__ = ["main"]

USAGE = f"""usage: python -m gpucontrol [-h] [--version] daemon [DAEMON ARGS ...]

gpucontrol {__version__}: latency-guaranteed co-location of ML inference and training on one GPU.

commands:
  daemon      run the per-GPU node agent (the same as 'python -m gpucontrol.daemon';
              'python -m gpucontrol daemon -h' lists its flags)

options:
  -h, --help  show this help and exit
  --version   show the version and exit

The experiments and tools (demo, identify, calibrate, cluster, ...) are the 'gpucontrol'
command of the full install ('gpucontrol -h')."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m gpucontrol`` with ``argv``.

    Parameters
    ----------
    argv : sequence of str or None
        The arguments (None: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: the daemon's for ``daemon`` (see :func:`gpucontrol.node.cli.main`),
        0 for ``--version`` and ``--help``, 2 (one line on stderr) for anything else.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["daemon"]:
        from gpucontrol.node.cli import main as daemon_main

        return daemon_main(args[1:])
    if args == ["--version"]:
        print(f"gpucontrol {__version__}")
        return 0
    if args in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    what = "no command" if not args else f"unknown command or option {args[0]!r}"
    print(f"python -m gpucontrol: error: {what}; expected 'daemon ...' or --version (see "
          f"'python -m gpucontrol -h')", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
