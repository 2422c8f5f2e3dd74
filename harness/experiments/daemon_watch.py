"""The CPU pipeline's watch over the daemon process it started: the daemon's JSON log read as
it grows (:class:`LogProgress`), and the wait for the daemon's own end with the load burst
counted in its logged periods (:func:`watch_daemon`). A loaded machine delays the daemon's
start by seconds, so nothing here is timed from its launch."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["START_LIMIT_S", "LogProgress", "watch_daemon"]


class LogProgress:
    """What the daemon's JSON log has said so far, read as it grows: when (this process's
    clock) the ``started`` event and the latest period's record were first seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started: float | None = None
        self.last: float | None = None
        self.periods = 0
        self._pos = 0
        self._tail = b""

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return
        self._pos += len(data)
        *lines, self._tail = (self._tail + data).split(b"\n")
        now = time.time()
        for line in lines:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("event") == "started" and self.started is None:
                self.started = now
            elif "period" in r and "event" not in r:
                self.periods += 1
                self.last = now


#: How long the daemon may take to log ``started`` (imports, the cgroup, the first scrape): a
#: 2-core machine beside two busy processes took 12 s.
START_LIMIT_S = 120.0


def watch_daemon(daemon: subprocess.Popen[bytes], progress: LogProgress, period_s: float,
                 duration_s: float, plant: Any, burst: tuple[float, float],
                 burst_at: list[float], say: Any, stall_s: float | None = None) -> None:
    """Wait for the daemon to end by itself (its ``--duration-s``), with the load burst on
    from ``burst[0]`` to ``burst[1]`` periods logged -- counted from its periods, not timed
    from its launch, which a loaded machine delays by seconds (the burst then fell on its
    first periods, and the loop spent the rest of the run unwinding).

    Returns early, for the caller's SIGTERM, only on a stall: no ``started`` within
    :data:`START_LIMIT_S`, or no period logged for ``stall_s`` (by default
    ``max(10 s, 5 periods)``). A slow daemon that still logs its periods is let finish, so
    its clean stop is never cut short (a SIGTERM once it has restored the default handlers
    ends it with -15)."""
    launched = time.time()
    stall = max(10.0, 5.0 * period_s) if stall_s is None else stall_s
    while daemon.poll() is None:
        progress.poll()
        now = time.time()
        t0 = progress.started
        if t0 is None:
            if now > launched + START_LIMIT_S:
                say(f"the daemon did not start within {START_LIMIT_S:g} s")
                return
        elif now > max(t0 + duration_s, progress.last or t0) + stall:
            say(f"the daemon logged no period for {stall:g} s")
            return
        else:
            _burst_edges(plant, progress.periods, burst, burst_at, say)
        time.sleep(0.05)


def _burst_edges(plant: Any, k: int, burst: tuple[float, float], burst_at: list[float],
                 say: Any) -> None:
    """The load burst's edges, ``k`` periods into the daemon's run (times in ``burst_at``)."""
    if not burst_at and k >= burst[0]:
        plant.set_load(batch=plant.config.burst_batch)
        burst_at.append(time.time())
        say("load burst on")
    elif len(burst_at) == 1 and k >= burst[1]:
        plant.set_load(batch=plant.config.batch)
        burst_at.append(time.time())
        say("load burst off")
