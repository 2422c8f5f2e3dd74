"""``python -m harness.cli``: the ``gpucontrol`` console script without installing it."""

import sys

from harness.cli import main

sys.exit(main())
