"""Node-agent operability figures (issues "Node agent safety" B4/B13 and "An operable node agent").

* Stall: a daemon holding a busy loop mostly stopped (1 s sleeps, 1 ms runs) is SIGSTOPped at
  a moment the loop is stopped; time until the loop runs again (the guardian's stall
  detection resumes it, then SIGKILLs the daemon). Goal: < 2 control periods.
* Idle connections: N idle TCP connections to the metrics port of a daemon cycling a busy loop
  at a commanded stopped fraction of 0.5; the daemon's thread count and the achieved stopped
  fraction per period (the issue measured 605 threads and 0.38-0.59 with 1,399 connections
  before the connection cap).

    python benchmarks/agent_ops.py [--stalls 5] [--connections 1400]

Every process it starts is resumed and killed before it exits.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from harness.args import OneLineParser, integer, run_script

BUSY = "while True: pass"


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2:].split()[0].decode()


def _wait_state(pid: int, want: set[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _state(pid) in want:
            return True
        time.sleep(0.001)
    return False


def _daemon(tmp: str, name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpucontrol.daemon", "--socket", f"{tmp}/{name}.sock",
         "--state", f"{tmp}/{name}.state.json", "--hook", f"{tmp}/{name}.hook", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True)


def _until_event(d: subprocess.Popen, event: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([d.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = d.stdout.readline() if d.stdout else ""
        if not line:
            break
        rec = json.loads(line)
        if rec.get("event") == event:
            return rec
    raise RuntimeError(f"no {event} event")


def _end(p: subprocess.Popen) -> None:
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    p.wait(10)
    if p.stdout:
        p.stdout.close()


def stall(tmp: str, train: int, period_s: float, timeout_s: float | None, n: int) -> dict:
    """Seconds from SIGSTOP of the daemon until its training runs again."""
    extra = [] if timeout_s is None else ["--stall-timeout-s", str(timeout_s)]
    out = []
    for i in range(n):
        d = _daemon(tmp, f"s{i}", "--training-pid", str(train), "--fixed-sleep", "1.0",
                    "--run-quantum-s", "0.001", "--period-s", str(period_s), *extra)
        try:
            _until_event(d, "started")
            time.sleep(0.5 + 0.1 * (i % 3))
            while _state(train) != "T":
                time.sleep(0.001)
            os.kill(d.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            if _wait_state(train, {"R", "S"}, 60.0):
                out.append(time.monotonic() - t0)
        finally:
            _end(d)
            os.kill(train, signal.SIGCONT)
    return {"period_s": period_s, "stall_timeout_s": timeout_s, "n": len(out),
            "p50_s": round(statistics.median(out), 3), "min_s": round(min(out), 3),
            "max_s": round(max(out), 3), "max_periods": round(max(out) / period_s, 2)}


def idle_connections(tmp: str, train: int, n: int) -> dict:
    """Daemon threads and achieved stopped fraction (commanded 0.5) under n idle connections."""
    d = _daemon(tmp, f"c{n}", "--training-pid", str(train), "--fixed-sleep", "0.05",
                "--run-quantum-s", "0.05", "--period-s", "0.5", "--metrics-port", "0")
    conns: list[socket.socket] = []
    try:
        url = _until_event(d, "metrics")["url"]
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        for _ in range(n):
            try:
                conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                pass
        time.sleep(0.5)
        with open(f"/proc/{d.pid}/status") as f:
            threads = int(next(x.split()[1] for x in f if x.startswith("Threads:")))
        fractions: list[float] = []
        while len(fractions) < 10 and d.stdout is not None:
            rec = json.loads(d.stdout.readline())
            if "period" in rec:
                fractions.append(rec["stopped_fraction"])
        tail = fractions[2:]
    finally:
        for c in conns:
            c.close()
        _end(d)
    return {"connections": len(conns), "daemon_threads": threads, "commanded": 0.5,
            "achieved_min": min(tail), "achieved_max": max(tail),
            "achieved_mean": round(statistics.fmean(tail), 4)}


def main() -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stalls", type=integer(1, 1000), default=5)
    ap.add_argument("--connections", type=integer(0, 100_000), default=1400)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.connections + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    tmp = tempfile.mkdtemp(prefix="gpucontrol-bench-")
    train = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True,
                             stdin=subprocess.DEVNULL)
    results: dict[str, object] = {"load_avg": os.getloadavg()[0], "cpus": os.cpu_count()}
    try:
        results["stall"] = [stall(tmp, train.pid, 2.0, None, args.stalls),
                            stall(tmp, train.pid, 4.0, None, args.stalls),
                            stall(tmp, train.pid, 0.2, 0.6, args.stalls)]
        results["idle"] = [idle_connections(tmp, train.pid, 0),
                           idle_connections(tmp, train.pid, args.connections)]
    finally:
        _end(train)
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    run_script(main, "agent_ops.py")
