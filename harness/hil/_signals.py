"""Cooperative stop for the GPU harness's long-running loops."""

from __future__ import annotations

import signal
from typing import Any


def stop_on_signals(loop: Any) -> None:
    """Make SIGTERM and SIGINT set ``loop.stop_requested``; the loop finishes its current
    step (iteration or batch) and exits cleanly instead of dying mid-step."""
    def _stop(signum, frame):
        loop.stop_requested = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
