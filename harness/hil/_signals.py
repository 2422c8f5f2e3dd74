"""Cooperative stop for the GPU harness's long-running loops."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any


def stop_on_signals(loop: Any) -> None:
    """Make SIGTERM and SIGINT set ``loop.stop_requested``; the loop finishes its current
    step (iteration or batch) and exits cleanly instead of dying mid-step."""
    def _stop(signum, frame):
        loop.stop_requested = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def sigterm_as_exit(stack: contextlib.ExitStack) -> None:
    """Turn SIGTERM into ``SystemExit`` until ``stack`` closes (main thread, default handler
    only), so that ``finally`` blocks run: a plant then stops its processes and quits MPS."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _exit(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, _exit)

    def _restore() -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, old)

    stack.callback(_restore)
