"""Chaos: daemons killed, stopped and restarted at random points of start-up, cycling, an MPS
restart (fake nvidia-cuda-mps-control) and shutdown. After every fault: no training process is
left stopped, no launched training, guardian or private MPS directory outlives its daemon.
The restart-free CPU-share backend meets the same faults with the training's share capped:
after each, the cap is lifted and the group the daemon made is gone. The restart-free
green-context backend meets them with a cooperative training on a lowered share: after each,
the training runs on the full device again, never stopped, never restarted.

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
import uuid

import pytest
from actuators._children import (
    BUSY,
    cpu_cgroup_of,
    cpu_controller_writable,
    daemon_argv,
    slow_inference_metrics,
    stopped_pids,
    wait_for,
)
from test_daemon_faults import TRAINING, alive, fake_mps, launched, model_file
from test_daemon_green import TRAINING as GREEN_TRAINING
from test_daemon_green import _shares

from gpucontrol.node.records import release_share

#: A low share meets the SLO of 100 ms by the model (one it says nothing meets is refused);
#: the readings never do, so the share is lowered.
SHARE_MODEL = [{"mps_pct": 10.0, "gain": -50.0, "offset": 50.0},
               {"mps_pct": 100.0, "gain": -50.0, "offset": 150.0}]
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


def _strike(d, fault, rng):
    """Land one of ``FAULTS`` on daemon ``d`` (random pauses from ``rng``)."""
    if fault == "term":
        d.send_signal(signal.SIGTERM)
        return
    if fault in ("stop_kill", "stop_cont_kill"):
        d.send_signal(signal.SIGSTOP)
        time.sleep(rng.uniform(0.02, 0.3))
        if fault == "stop_cont_kill":
            d.send_signal(signal.SIGCONT)
            time.sleep(rng.uniform(0.0, 0.2))
    d.kill()


#: The faults of the restart-free share rounds: the last is a stop while SIGTERM is handled.
SHARE_FAULTS = ("kill", "stop_kill", "stop_cont_kill", "term_stop_kill")


def _share_round(d, fault, rng):
    """After a random pause, land one of ``SHARE_FAULTS`` on daemon ``d`` (same seeded order
    of pauses as before); its exit status, its stdout closed."""
    time.sleep(rng.uniform(0.0, 0.3))
    if fault == "term_stop_kill":    # the fault lands while SIGTERM is handled
        d.send_signal(signal.SIGTERM)
        time.sleep(rng.uniform(0.0, 0.05))
    _strike(d, "stop_kill" if fault == "term_stop_kill" else fault, rng)
    rc = d.wait(20)
    d.stdout.close()
    return rc


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
            _strike(d, fault, rng)
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


def test_chaos_cpu_share_cap_never_outlives_the_daemon(children, tmp_path):
    """The restart-free CPU-share backend under the same faults: a daemon that has capped the
    training's CPU share is killed (or stopped then killed, or stopped during shutdown). After
    each: nothing stopped, the training back in its own group, the group the daemon made gone
    (the guardian lifts the cap and removes it)."""
    if not cpu_controller_writable():
        pytest.skip("no writable cgroup CPU controller here")
    rng = random.Random(SEED)
    busy = children.spawn()
    home = cpu_cgroup_of(busy.pid)
    (tmp_path / "model.json").write_text(json.dumps(SHARE_MODEL))
    log = []
    groups = []
    with slow_inference_metrics(0.2) as url:   # always over the SLO: the share is lowered
        try:
            for i, fault in enumerate(SHARE_FAULTS):
                group = f"gpucontrol-chaos-{uuid.uuid4().hex[:8]}"
                d = children.popen(daemon_argv(
                    tmp_path, "s", "--training-pid", str(busy.pid), "--slo-ms", "100", "--model",
                    str(tmp_path / "model.json"), "--period-s", "0.2", "--outer-every", "2",
                    "--latency-source", "prometheus", "--prometheus-url",
                    url, "--share-backend", "cpu",
                    "--share-cgroup", group, "--sleep-method", "signal", "--run-quantum-s", "0.01",
                    "--max-sleep-s", "0.05"),
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                made: dict = {}
                groups.append(made)

                def capped_now(r, made=made):
                    if r.get("event") == "cpu_share_ready":
                        made.update(r)
                    return r.get("event") == "share_change" and r.get("ok") and r["new_pct"] < 100

                capped = _lines_until(d, capped_now, 20)
                assert capped, (i, fault)
                log.append((i, fault, _share_round(d, fault, rng)))
                assert wait_for(lambda: not stopped_pids([busy.pid]), 0.5), log
                cg = made.get("cgroup")
                assert cg, log
                assert wait_for(lambda c=cg: not os.path.exists(c), 5.0), (log, cg)
                assert cpu_cgroup_of(busy.pid) == home, log
                assert alive(busy.pid)
        finally:
            for g in groups:      # a failed round must not leave a capped group behind
                if g.get("cgroup"):
                    release_share({"path": g["cgroup"], "backend": g.get("backend"), "made": True})


def test_chaos_green_share_never_outlives_the_daemon(children, tmp_path):
    """The restart-free green-context backend under the same faults: a daemon whose outer loop
    has lowered a cooperative training's share (the training reads it from the hook file every
    iteration) is killed, stopped then killed, stopped and continued then killed, or stopped
    during shutdown. After each: the training, never stopped, runs its next iterations on the
    full device (the guardian clears the hook file, or the reader finds it stale)."""
    shares = tmp_path / "shares.txt"
    hook = tmp_path / "g.hook"
    train = children.spawn(GREEN_TRAINING, str(shares),
                           env={**os.environ, "GPUCONTROL_HOOK_FILE": str(hook)},
                           stdout=subprocess.DEVNULL)
    rng = random.Random(SEED)
    (tmp_path / "model.json").write_text(json.dumps(SHARE_MODEL))
    log = []
    with slow_inference_metrics(0.2) as url:   # always over the SLO: the share is lowered
        for i, fault in enumerate(SHARE_FAULTS):
            d = children.popen(daemon_argv(
                tmp_path, "g", "--training-pid", str(train.pid), "--slo-ms", "100", "--model",
                str(tmp_path / "model.json"), "--period-s", "0.2", "--outer-every", "1",
                "--latency-source", "prometheus", "--prometheus-url", url,
                "--share-backend", "green-context", "--sleep-method", "hook",
                "--max-sleep-s", "0.05", "--mps-unchecked"),  # no MPS here: go on
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            lowered = _lines_until(d, lambda r: r.get("event") == "share_change"
                                   and r.get("ok") and r["new_pct"] < 100, 30)
            assert lowered, (i, fault)
            n = len(_shares(shares))      # the training follows it at its next iteration
            assert wait_for(lambda n=n: (s := _shares(shares)) and len(s) > n and s[-1][1] < 100,
                            10), (i, fault, _shares(shares)[-3:])
            log.append((i, fault, _share_round(d, fault, rng)))
            assert wait_for(lambda: not stopped_pids([train.pid]), 0.5), log
            n = len(_shares(shares))
            assert wait_for(lambda n=n: (s := _shares(shares)) and len(s) > n + 2
                            and s[-1][1] == 100, 10), (log, _shares(shares)[-3:])
            assert train.poll() is None, log
    assert {p for p, _ in _shares(shares)} == {train.pid}     # never restarted
