"""Fault paths of the daemon as a real process (issue "node agent safety"): every test uses
real processes, is bounded in seconds and leaves nothing stopped (the ``children`` fixture)."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from actuators._children import (
    SLEEPER,
    daemon_argv,
    read_events,
    state,
    stopped_pids,
    wait_state,
)

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "actuators"))
from test_mps_actuator import FAKE  # noqa: E402

# A training that drives the closed loop to an MPS change by itself: it reports a latency far
# above the SLO (it inherits GPUCONTROL_SOCKET), so the sleep saturates and the outer loop
# lowers the MPS share, which the daemon applies by restarting it.
TRAINING = r"""
import os, sys, time
from gpucontrol.node.client import report_latency
from gpucontrol.node.hooks import notify_ready
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()} {os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')}\n")
notify_ready()
while True:
    report_latency(200.0)
    time.sleep(0.005)
"""


def fake_mps(tmp_path):
    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text(f"#!{sys.executable}\n{FAKE}")
    fake.chmod(0o755)
    return str(fake)


def model_file(tmp_path):
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"gain": -600.0, "offset": 100.0}))
    return str(model)


def mps_daemon_args(tmp_path, pidfile, *extra):
    cmd = shlex.join([sys.executable, "-c", TRAINING, str(pidfile)])
    return ["--training-cmd", cmd, "--slo-ms", "60", "--model", model_file(tmp_path),
            "--period-s", "0.2", "--run-quantum-s", "0.01", "--max-sleep-s", "0.03",
            "--outer-every", "4", "--mps-binary", fake_mps(tmp_path), "--sleep-method",
            "signal", *extra]


def launched(pidfile):
    try:
        return [int(line.split()[0]) for line in open(pidfile).read().splitlines()]
    except FileNotFoundError:
        return []


def alive(pid):
    return state(pid) not in (None, "Z", "X")


def wait_for(pred, timeout=10.0, step=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def kill_tree_leftovers(pids):
    for p in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass


# ------------------------------------------------------------------------------ B1
def test_new_training_after_an_mps_restart_is_written_ahead(children, tmp_path):
    """B1: after an MPS restart the new training is in the state file before its first
    pause, so a SIGKILL of the daemon leaves it running."""
    pidfile = tmp_path / "train.pids"
    d = children.popen(daemon_argv(tmp_path, "b1", *mps_daemon_args(tmp_path, pidfile)),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ev = read_events(d.stdout, "mps_restart", timeout=30)
        assert ev[-1]["ok"], ev[-1]
        new = ev[-1]["new_pid"]
        doc = json.loads((tmp_path / "b1.state.json").read_text())
        assert new in [t.get("pid") for t in doc["targets"]]
        assert wait_state(new, {"T"}, timeout=5.0)  # it is being cycled...
        d.kill()
        d.wait()
        # ...and the guardian resumes it
        assert wait_for(lambda: not stopped_pids([new]), timeout=1.0)
    finally:
        kill_tree_leftovers(launched(pidfile))
