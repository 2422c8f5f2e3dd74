"""``python -m gpucontrol.daemon``: the node agent's entry point, kept at this name for the
command lines and unit files that use it. The daemon lives in :mod:`gpucontrol.node.daemon`, its
command line in :mod:`gpucontrol.node.cli`."""

from __future__ import annotations

import sys

from gpucontrol.node.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
