"""Actuation figures: pause/resume latency, duty-cycle accuracy, guardian resume time.

* Pause/resume latency of the sleep actuators on busy-loop processes: the time to issue the
  pause (SIGSTOP through pidfds, or a write of cgroup.freeze) and the time until the kernel
  confirms it (/proc state T, or cgroup.events ``frozen 1``); the same for the resume.
  Goal: < 1 ms p99 (the GPUColo paper measured < 5 ms).
* Duty-cycle accuracy: a real daemon (``--fixed-sleep``) pauses a busy loop at commanded
  stopped fractions; the achieved fraction is sampled from outside (state T or SIGSTOP
  pending) over whole cycles.
* Faults: a daemon holding a busy loop paused is SIGKILLed, SIGTERMed, stalled (SIGSTOP) or
  crashed with its guardian (then restarted); time until the loop runs again. Goal: p99 <
  100 ms after SIGKILL, < 2 periods after a stall.

    python benchmarks/actuation.py [--cycles 1000] [--duty-window 4] [--kills 20]

Every process it starts is resumed and killed before it exits.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import platform
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpucontrol.node.actuators import CgroupFreezer, DutyCycler, SignalDutyCycler
from gpucontrol.node.actuators.procs import descendants, read_stat, stop_requested
from gpucontrol.node.actuators.sleep import cgroup2_mounts
from harness.args import DefaultsHelpFormatter, OneLineParser, integer, number, run_script

BUSY = "while True: pass"
TREE = ("import subprocess, sys\n"
        "for _ in range(7): subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
        "while True: pass\n")


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def spawn(self, argv: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def cleanup(self) -> None:
        for p in self.procs:
            if p.returncode is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.killpg(p.pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def state(pid: int) -> str | None:
    st = read_stat(pid)
    return None if st is None else st.state


def q(xs: list[float], p: float) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, math.ceil(p * len(s)) - 1))]


def ms(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{1e3 * x:.3f}"


# ---------------------------------------------------------------------------- latency
def latency_loop(cycler: DutyCycler, cycles: int, paused: Callable[[], bool],
                 running: Callable[[], bool]) -> dict[str, list[float]]:
    """Time ``cycles`` pauses and resumes: issued, and confirmed by the kernel."""
    out: dict[str, list[float]] = {"pause": [], "pause_confirmed": [], "resume": [],
                                   "resume_confirmed": []}
    for _ in range(cycles):
        for kind, act, done in (("pause", cycler.pause_now, paused),
                                ("resume", cycler.resume_now, running)):
            t0 = time.perf_counter()
            act()
            t1 = time.perf_counter()
            deadline = t1 + 1.0
            while not done() and time.perf_counter() < deadline:
                os.sched_yield()
            out[kind].append(t1 - t0)
            out[f"{kind}_confirmed"].append(time.perf_counter() - t0)
            time.sleep(0.002)
    return out


def signal_latency(procs: Procs, cycles: int, tree: bool) -> dict[str, list[float]]:
    root = procs.spawn([sys.executable, "-c", TREE if tree else BUSY])
    time.sleep(0.5 if tree else 0.1)
    cyc = SignalDutyCycler([root.pid])
    pids = cyc.pids()
    try:
        return latency_loop(cyc, cycles,
                            lambda: all(state(p) in ("T", None) for p in pids),
                            lambda: not any(state(p) == "T" for p in pids))
    finally:
        cyc.close()


def freezer_latency(procs: Procs, cycles: int) -> dict[str, list[float]] | None:
    for mount in cgroup2_mounts():
        group = Path(mount) / f"gpucontrol-bench-{os.getpid()}"
        try:
            group.mkdir()
        except OSError:
            continue
        break
    else:
        return None
    fz = None
    try:
        root = procs.spawn([sys.executable, "-c", TREE])
        (group / "cgroup.procs").write_text(str(root.pid))
        time.sleep(0.5)
        fz = CgroupFreezer(group)
        out = latency_loop(fz, cycles, fz.frozen, lambda: not fz.frozen())
    finally:
        if fz is not None:
            fz.close()
        for name, value in (("cgroup.freeze", "0"), ("cgroup.kill", "1")):
            try:
                (group / name).write_text(value)
            except OSError:
                pass
        procs.cleanup()
        for _ in range(200):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.01)
    return out


# ---------------------------------------------------------------------------- duty cycle
def daemon_argv(tmp: str, name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "gpucontrol.daemon", "--socket", f"{tmp}/{name}.sock",
            "--state", f"{tmp}/{name}.state.json", "--hook", f"{tmp}/{name}.hook", *args]


def wait_started(p: subprocess.Popen, timeout: float = 30.0) -> None:
    out = p.stdout
    assert out is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([out], [], [], 1.0)
        if r:
            line = out.readline()
            if not line:
                break
            if json.loads(line).get("event") == "started":
                return
    raise RuntimeError("daemon did not start")


#: The fewest whole cycles a duty-cycle case measures (its window is lengthened until then).
MIN_CYCLES = 10


def sample_stops(pid: int, window: float, cycle: float) -> list[tuple[float, bool]]:
    """(time, stop requested) of ``pid`` every ~0.2 ms, for at least ``window`` s and until
    :data:`MIN_CYCLES` whole cycles (between pause ends) are seen; at most three times the
    longer of the two, where fewer cycles come."""
    samples: list[tuple[float, bool]] = []
    edges = 0
    start = time.monotonic()
    end, cap = start + window, start + 3 * max(window, (MIN_CYCLES + 1) * cycle)
    while True:
        t0 = time.monotonic()
        if t0 >= cap or (t0 >= end and edges > MIN_CYCLES):
            return samples
        x = stop_requested(pid)
        t1 = time.monotonic()
        if t1 - t0 < 0.0003:
            edges += bool(samples and samples[-1][1] and not x)
            samples.append(((t0 + t1) / 2, x))
        time.sleep(0.0002)


def achieved_fraction(samples: list[tuple[float, bool]]) -> tuple[float, int] | None:
    """The stopped fraction over the whole cycles (pause end to pause end) in ``samples``
    and their number; None where not one whole cycle was seen."""
    edges = [i for i in range(1, len(samples)) if samples[i - 1][1] and not samples[i][1]]
    if len(edges) < 2:
        return None
    seg = samples[edges[0]:edges[-1] + 1]
    stopped = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(seg))
    return stopped / (seg[-1][0] - seg[0][0]), len(edges) - 1


def duty_case(procs: Procs, tmp: str, quantum: float, sleep: float,
              window: float) -> tuple[float, int] | None:
    """A daemon cycles a busy loop at ``sleep`` s stopped per ``quantum`` s run: the achieved
    stopped fraction and the whole cycles it is over (:func:`sample_stops`); None where not
    one whole cycle was seen."""
    t = procs.spawn([sys.executable, "-c", BUSY])
    d = procs.spawn(daemon_argv(tmp, f"duty{sleep}", "--training-pid", str(t.pid),
                                "--fixed-sleep", str(sleep), "--run-quantum-s", str(quantum),
                                "--max-sleep-s", "10", "--period-s", "1",
                                "--sleep-method", "signal"),
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        wait_started(d)
        samples = sample_stops(t.pid, window, quantum + sleep)
    finally:
        d.terminate()
        d.wait(10)
        procs.cleanup()
    return achieved_fraction(samples)


# ---------------------------------------------------------------------------- faults
FAULT_KINDS = ("sigkill", "sigterm", "stall", "total_crash")
STALL_CAP_S = 3.0


def _wait_resumed(pid: int, cap: float) -> float:
    """Seconds until ``pid`` leaves state T (``cap`` when it does not)."""
    t0 = time.perf_counter()
    while state(pid) == "T":
        os.sched_yield()
        if time.perf_counter() - t0 > cap:
            return cap
    return time.perf_counter() - t0


def fault_trials(procs: Procs, tmp: str, kind: str, n: int,
                 period_s: float = 1.0) -> list[float]:
    """A daemon holds a busy loop paused (1 s sleep per 1 ms run) and meets a fault; the time
    from the fault until the loop runs again.

    ``sigkill``: the guardian resumes it. ``sigterm``: the graceful exit. ``stall``: the
    daemon is SIGSTOPped (resumed only where a liveness watch exists; capped at 3 s).
    ``total_crash``: guardian and daemon are SIGKILLed together; timed from the start of the
    next daemon, which resumes the leftovers.
    """
    out = []
    t = procs.spawn([sys.executable, "-c", BUSY])
    args = daemon_argv(tmp, f"f{kind}", "--training-pid", str(t.pid), "--fixed-sleep", "1",
                       "--run-quantum-s", "0.001", "--period-s", str(period_s))
    try:
        for _ in range(n):
            d = procs.spawn(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            wait_started(d)
            deadline = time.monotonic() + 5
            while state(t.pid) != "T" and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.05)
            if kind == "total_crash":
                for pid in descendants([d.pid]):
                    os.kill(pid, signal.SIGKILL)
                d.kill()
                d.wait()
                if d.stdout is not None:
                    d.stdout.close()
                d = procs.spawn(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
                out.append(_wait_resumed(t.pid, 30.0))
                time.sleep(0.05)
                d.terminate()
            elif kind == "stall":
                d.send_signal(signal.SIGSTOP)
                out.append(_wait_resumed(t.pid, STALL_CAP_S))
                d.kill()
            else:
                d.send_signal(signal.SIGKILL if kind == "sigkill" else signal.SIGTERM)
                out.append(_wait_resumed(t.pid, 30.0))
            d.wait()
            if d.stdout is not None:
                d.stdout.close()
            time.sleep(0.05)
            if state(t.pid) == "T":  # never leave it stopped (a stall without a watch)
                os.kill(t.pid, signal.SIGCONT)
    finally:
        procs.cleanup()
    return out


def main() -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--cycles", type=integer(1, 1_000_000), default=500,
                    help="pauses and resumes timed per actuator")
    ap.add_argument("--duty-window", type=number(0.0, 3600.0, lo_open=True, unit="s"),
                    default=4.0, help="least sampling time per duty-cycle case, s (each case "
                    "also samples until it has seen 10 whole cycles)")
    ap.add_argument("--kills", type=integer(1, 10_000), default=20,
                    help="SIGKILL trials; each other fault kind gets max(5, KILLS // 4)")
    a = ap.parse_args()
    print(f"# actuation benchmark -- {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, kernel {platform.release()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    rows: list[tuple[str, dict[str, list[float]] | None]] = []
    for label, fn in (("SIGSTOP/SIGCONT, 1 busy process", lambda p: signal_latency(
            p, a.cycles, tree=False)),
                      ("SIGSTOP/SIGCONT, tree of 8 busy processes", lambda p: signal_latency(
                          p, a.cycles, tree=True)),
                      ("cgroup v2 freezer, group of 8 busy processes", lambda p: freezer_latency(
                          p, a.cycles))):
        procs = Procs()
        try:
            r = fn(procs)
        finally:
            procs.cleanup()
        rows.append((label, r))     # None: no writable cgroup v2 group, said in the table
    print("\n## Pause/resume latency (ms), goal p99 < 1 ms\n")
    print("| actuator | pause p50 | pause p99 | confirmed p50 | confirmed p99 | "
          "resume p50 | resume p99 | resumed p50 | resumed p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in rows:
        if r is None:
            print(f"| {label} | no writable cgroup v2 group here |")
            continue
        print(f"| {label} | " + " | ".join(
            f"{ms(q(r[k], 0.5))} | {ms(q(r[k], 0.99))}"
            for k in ("pause", "pause_confirmed", "resume", "resume_confirmed")) + " |")

    print(f"\n## Duty cycle: commanded vs achieved stopped fraction "
          f"(run quantum 0.1 s, windows >= {a.duty_window:g} s and >= {MIN_CYCLES} whole "
          "cycles, a daemon per case)\n")
    missing: list[str] = []
    print("| sleep (s) | commanded | achieved | error | cycles |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for sleep in (0.011, 0.033, 0.1, 0.3, 0.9):
            procs = Procs()
            try:
                duty = duty_case(procs, tmp, 0.1, sleep, a.duty_window)
            finally:
                procs.cleanup()
            cmd = sleep / (0.1 + sleep)
            if duty is None:    # the other rows and tables stand: say it in its row
                print(f"| {sleep:g} | {cmd:.3f} | n/a | n/a | 0 (no whole cycle seen) |")
                missing.append(f"no duty cycle measured at sleep {sleep:g} s: not one "
                               "whole cycle (pause end to pause end) was seen")
                continue
            achieved, cycles = duty
            print(f"| {sleep:g} | {cmd:.3f} | {achieved:.3f} | {achieved - cmd:+.3f} | "
                  f"{cycles} |")
        faults = {}
        for kind in FAULT_KINDS:
            procs = Procs()
            try:
                faults[kind] = fault_trials(procs, tmp, kind, a.kills if kind == "sigkill"
                                            else max(5, a.kills // 4))
            finally:
                procs.cleanup()
    print("\n## Resume after each fault kind (a daemon holding a busy loop paused, period 1 s), "
          "goal p99 < 100 ms after SIGKILL, < 2 periods after a stall\n")
    print("| fault | trials | p50 (ms) | p99 (ms) | max (ms) |")
    print("|---|---:|---:|---:|---:|")
    for kind, g in faults.items():
        capped = kind == "stall" and max(g) >= STALL_CAP_S
        note = f" (capped at {STALL_CAP_S:g} s)" if capped else ""
        print(f"| {kind}{note} | {len(g)} | {ms(q(g, 0.5))} | {ms(q(g, 0.99))} | "
              f"{ms(max(g))} |")
    for text in missing:
        print(f"actuation.py: {text}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    run_script(main, "actuation.py")
