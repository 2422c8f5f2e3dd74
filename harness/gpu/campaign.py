"""``python -m harness.gpu.campaign``: the former name of ``python -m harness.hil.campaign``."""

import sys

from harness.hil.campaign import main

if __name__ == "__main__":
    print("note: harness.gpu.campaign is now harness.hil.campaign", file=sys.stderr)
    sys.exit(main())
