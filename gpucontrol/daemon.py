"""``python -m gpucontrol.daemon``: the node agent's entry point, kept at this name for the
command lines and unit files that use it. The daemon lives in :mod:`gpucontrol.node.daemon`."""

from __future__ import annotations

import sys

from gpucontrol.node.daemon import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
