"""Chaos: daemons killed, stopped and restarted at random points of start-up, cycling, an MPS
restart (fake nvidia-cuda-mps-control) and shutdown. After every fault: no training process is
left stopped, no launched training, guardian or private MPS directory outlives its daemon.

Bounded: ``ROUNDS`` rounds of at most a few seconds each (seeded, so a failure replays)."""

import json
import os
import random
import select
import shlex
import signal
import subprocess
import sys
import time

from actuators._children import BUSY, daemon_argv, stopped_pids, wait_for
from test_daemon_faults import TRAINING, alive, fake_mps, launched, model_file

ROUNDS = 12
SEED = int(os.environ.get("GPUCONTROL_CHAOS_SEED", "20261124"))  # replay or vary
PHASES = ("startup", "cycling", "mps_restart", "shutdown")
FAULTS = ("kill", "stop_kill", "stop_cont_kill", "term")


def _lines_until(d, pred, timeout):
    """Read the daemon's JSON lines until ``pred(record)``; False on timeout or EOF."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([d.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            return False
        line = d.stdout.readline()
        if not line:
            return False
        if pred(json.loads(line)):
            return True
    return False


def _procs_naming(text):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        out.append(int(name))
            except OSError:
                pass
    return [p for p in out if alive(p)]


def test_chaos_never_leaves_a_process_stopped_or_orphaned(children, tmp_path):
    rng = random.Random(SEED)
    tmpdir = tmp_path / "tmp"  # where the private MPS directories go (TMPDIR)
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    pidfile = tmp_path / "train.pids"
    cmd = shlex.join([sys.executable, "-c", TRAINING, str(pidfile)])
    static = children.spawn("import subprocess, sys\n"
                            "subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
                            f"{BUSY}\n")
    mps_args = ["--training-cmd", cmd, "--slo-ms", "60", "--model", model_file(tmp_path),
                "--period-s", "0.1", "--run-quantum-s", "0.005", "--max-sleep-s", "0.03",
                "--outer", "paper", "--outer-every", "2", "--mps-binary", fake_mps(tmp_path),
                "--sleep-method", "signal"]
    pid_args = ["--training-pid", str(static.pid), "--fixed-sleep", "0.05",
                "--run-quantum-s", "0.005", "--period-s", "0.1"]
    state_path = str(tmp_path / "c.state.json")
    log = []
    saw_restart = 0
    try:
        for i in range(ROUNDS):
            phase = PHASES[i % len(PHASES)]
            fault = FAULTS[(i + i // len(PHASES)) % len(FAULTS)]  # each phase meets 3 kinds
            shadow = rng.random() < 0.5
            args = pid_args if phase != "mps_restart" and rng.random() < 0.25 else (
                mps_args + (["--shadow"] if shadow else []))
            if phase == "mps_restart":  # a fresh controller (not resumed at a low MPS share)
                args = [*args, "--slo-ms", f"{60 + 0.001 * i:g}"]
            d = children.popen(daemon_argv(tmp_path, "c", *args), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env)
            if phase == "startup":
                time.sleep(rng.uniform(0.0, 1.0))
            elif phase == "cycling":
                _lines_until(d, lambda r: r.get("event") == "started", 20)
                time.sleep(rng.uniform(0.0, 0.4))
            elif phase == "mps_restart":
                saw_restart += _lines_until(d, lambda r: bool(r.get("restarting"))
                                            or r.get("event") == "mps_restart", 20)
                time.sleep(rng.uniform(0.0, 0.15))
            else:  # shutdown: the fault lands while SIGTERM is being handled
                _lines_until(d, lambda r: r.get("event") == "started", 20)
                time.sleep(rng.uniform(0.0, 0.3))
                d.send_signal(signal.SIGTERM)
                time.sleep(rng.uniform(0.0, 0.05))
            if fault in ("stop_kill", "stop_cont_kill"):
                d.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(0.02, 0.3))
                if fault == "stop_cont_kill":
                    d.send_signal(signal.SIGCONT)
                    time.sleep(rng.uniform(0.0, 0.2))
                d.kill()
            elif fault == "term":
                d.send_signal(signal.SIGTERM)
            else:
                d.kill()
            try:
                rc = d.wait(20)
            except subprocess.TimeoutExpired:
                d.kill()
                rc = d.wait()
            d.stdout.close()
            log.append((i, phase, fault, "shadow" if shadow else "cold", rc))
            pids = [static.pid, *launched(pidfile)]
            # nothing stopped within 0.5 s of the daemon's end
            assert wait_for(lambda p=pids: not stopped_pids(p), 0.5), (log, stopped_pids(pids))
            # no launched training, guardian or private MPS directory outlives the daemon
            assert wait_for(lambda: not [p for p in launched(pidfile) if alive(p)], 5.0), log
            assert wait_for(lambda: not _procs_naming(state_path), 5.0), log
            assert wait_for(lambda: not os.listdir(tmpdir), 5.0), (log, os.listdir(tmpdir))
            assert alive(static.pid)
        # the MPS-restart rounds did land during a restart (the new training launched)
        assert saw_restart == ROUNDS // len(PHASES), log
        assert len(launched(pidfile)) >= 2 * saw_restart, log
    finally:
        for p in launched(pidfile):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
        for p in _procs_naming(state_path):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
