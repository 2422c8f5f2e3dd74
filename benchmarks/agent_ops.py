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

import itertools
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
from collections.abc import Iterator

from harness.args import DefaultsHelpFormatter, OneLineParser, integer, run_script

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


def _records(d: subprocess.Popen, timeout: float = 30.0) -> Iterator[dict]:
    """The daemon's JSON lines, until it closes its output (it exited) or ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while d.stdout is not None and time.monotonic() < deadline:
        ready, _, _ = select.select([d.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = d.stdout.readline() if ready else ""
        if not line:
            return
        yield json.loads(line)


def _until_event(d: subprocess.Popen, event: str, timeout: float = 30.0) -> dict | None:
    """The daemon's first ``event`` record; None where it exited or was silent first."""
    return next((r for r in _records(d, timeout) if r.get("event") == event), None)


def _end(p: subprocess.Popen) -> None:
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    p.wait(10)
    if p.stdout:
        p.stdout.close()


def _stall_trial(d: subprocess.Popen, train: int, i: int) -> float | str:
    """Seconds from SIGSTOP of the daemon ``d`` until ``train`` runs again, or why none."""
    if _until_event(d, "started") is None:
        return "the daemon did not start"
    time.sleep(0.5 + 0.1 * (i % 3))
    if not _wait_state(train, {"T"}, 30.0):
        return "the daemon did not stop the loop within 30 s"
    os.kill(d.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    if _wait_state(train, {"R", "S"}, 60.0):
        return time.monotonic() - t0
    return "the loop did not run again within 60 s of the SIGSTOP"


def stall(tmp: str, train: int, period_s: float, timeout_s: float | None, n: int) -> dict:
    """Seconds from SIGSTOP of the daemon until its training runs again. Trials that time
    nothing are counted, with why, in ``not_measured``; the figures are null where none
    was timed."""
    extra = [] if timeout_s is None else ["--stall-timeout-s", str(timeout_s)]
    out: list[float] = []
    why: list[str] = []
    for i in range(n):
        d = _daemon(tmp, f"s{i}", "--training-pid", str(train), "--fixed-sleep", "1.0",
                    "--run-quantum-s", "0.001", "--period-s", str(period_s), *extra)
        try:
            r = _stall_trial(d, train, i)
        finally:
            _end(d)
            os.kill(train, signal.SIGCONT)
        if isinstance(r, str):
            why.append(r)
        else:
            out.append(r)
    res: dict[str, object] = {
        "period_s": period_s, "stall_timeout_s": timeout_s, "n": len(out),
        "p50_s": round(statistics.median(out), 3) if out else None,
        "min_s": round(min(out), 3) if out else None,
        "max_s": round(max(out), 3) if out else None,
        "max_periods": round(max(out) / period_s, 2) if out else None}
    if why:
        res["not_measured"] = f"{len(why)} of {n} stalls not timed: " + "; ".join(
            f"{w} ({why.count(w)}x)" for w in dict.fromkeys(why))
    return res


def idle_connections(tmp: str, train: int, n: int) -> dict:
    """Daemon threads and achieved stopped fraction (commanded 0.5) under n idle connections."""
    d = _daemon(tmp, f"c{n}", "--training-pid", str(train), "--fixed-sleep", "0.05",
                "--run-quantum-s", "0.05", "--period-s", "0.5", "--metrics-port", "0")
    conns: list[socket.socket] = []
    threads: int | None = None
    fractions: list[float] = []
    status: int | None = None
    try:
        metrics = _until_event(d, "metrics")
        if metrics is None:
            return {"connections": 0, "daemon_threads": None, "commanded": 0.5,
                    "achieved_min": None, "achieved_max": None, "achieved_mean": None,
                    "not_measured": "the daemon exited, or gave no metrics address within "
                                    "30 s, before any connection"}
        port = int(metrics["url"].rsplit(":", 1)[1].split("/")[0])
        for _ in range(n):
            try:
                conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                pass
        time.sleep(0.5)
        threads = _threads(d.pid)
        periods = (r["stopped_fraction"] for r in _records(d) if "period" in r)
        fractions = list(itertools.islice(periods, 10))
        if len(fractions) < 10:
            try:            # its output ended: it is exiting (or silent: still running)
                status = d.wait(2)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for c in conns:
            c.close()
        _end(d)
    tail = fractions[2:]        # the first two periods settle
    res: dict[str, object] = {
        "connections": len(conns), "daemon_threads": threads, "commanded": 0.5,
        "achieved_min": min(tail) if tail else None, "achieved_max": max(tail) if tail else None,
        "achieved_mean": round(statistics.fmean(tail), 4) if tail else None}
    if not tail:
        k = len(fractions)
        res["not_measured"] = (f"no stopped fraction: the daemon reported {k} "
                               f"period{'' if k == 1 else 's'}, then " +
                               ("stopped reporting for 30 s" if status is None
                                else f"exited with status {status}"))
    return res


def _threads(pid: int) -> int | None:
    """The process's thread count; None where it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(next(x.split()[1] for x in f if x.startswith("Threads:")))
    except (OSError, StopIteration):
        return None


def main() -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--stalls", type=integer(1, 1000), default=5,
                    help="stall trials per case (periods 2 s, 4 s, and 0.2 s with a 0.6 s "
                         "stall timeout)")
    ap.add_argument("--connections", type=integer(0, 100_000), default=1400,
                    help="idle connections to the metrics port in the second idle case (the "
                         "first has none)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.connections + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    tmp = tempfile.mkdtemp(prefix="gpucontrol-bench-")
    train = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True,
                             stdin=subprocess.DEVNULL)
    results: dict[str, object] = {"load_avg": os.getloadavg()[0], "cpus": os.cpu_count()}
    try:
        stalls = [stall(tmp, train.pid, 2.0, None, args.stalls),
                  stall(tmp, train.pid, 4.0, None, args.stalls),
                  stall(tmp, train.pid, 0.2, 0.6, args.stalls)]
        idle = [idle_connections(tmp, train.pid, 0),
                idle_connections(tmp, train.pid, args.connections)]
    finally:
        _end(train)
        shutil.rmtree(tmp, ignore_errors=True)
    results.update(stall=stalls, idle=idle)
    print(json.dumps(results, indent=1))
    # a case not measured is null in the JSON, the others stand: one line each, status 1
    missing = [f"stall, period {c['period_s']:g} s: {c['not_measured']}" for c in stalls
               if "not_measured" in c]
    missing += [f"idle, {n} connections: {c['not_measured']}"
                for n, c in zip((0, args.connections), idle, strict=True) if "not_measured" in c]
    for text in missing:
        print(f"agent_ops.py: {text}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    run_script(main, "agent_ops.py")
