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
    run_daemon,
    state,
    stopped_pids,
    wait_for,
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
with open(sys.argv[1], "a") as f:  # first: every launch is on record at once
    f.write(f"{os.getpid()} {os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')}\n")
from gpucontrol.node.client import report_latency
from gpucontrol.node.hooks import notify_ready
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


#: The full share's line, and a low share that meets an SLO of 60 ms: the daemon refuses an
#: SLO its model says no setting meets, and these tests drive the share down from over it.
MODEL_ROWS = [{"mps_pct": 10.0, "gain": -600.0, "offset": 50.0},
              {"mps_pct": 100.0, "gain": -600.0, "offset": 100.0}]


def model_file(tmp_path):
    model = tmp_path / "model.json"
    model.write_text(json.dumps(MODEL_ROWS))
    return str(model)


def mps_daemon_args(tmp_path, pidfile, *extra):
    cmd = shlex.join([sys.executable, "-c", TRAINING, str(pidfile)])
    return ["--training-cmd", cmd, "--slo-ms", "60", "--model", model_file(tmp_path),
            "--period-s", "0.2", "--run-quantum-s", "0.01", "--max-sleep-s", "0.03",
            # the paper's outer loop: it restarts on a fixed rule, which these fault tests need
            "--outer", "paper", "--outer-every", "4", "--mps-binary", fake_mps(tmp_path),
            "--sleep-method", "signal", *extra]


def launched(pidfile):
    try:
        return [int(line.split()[0]) for line in open(pidfile).read().splitlines()]
    except FileNotFoundError:
        return []


def alive(pid):
    return state(pid) not in (None, "Z", "X")


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
        assert wait_for(lambda: not stopped_pids([new]), timeout=5.0)
    finally:
        kill_tree_leftovers(launched(pidfile))


def test_a_restart_that_cannot_start_the_training_again_fails_the_daemon(children, tmp_path):
    """An MPS restart ends the training and can start it again at neither the new share nor
    the old one (here every launch after the first exits during start-up): the training is
    gone by the daemon's hand, so ``training_finished`` says so (``failed``, the restart's
    error) and the daemon exits 1, not 0 with an unknown status."""
    pidfile = tmp_path / "train.pids"
    once = ("import os, sys\n"
            "if os.path.exists(sys.argv[1]):\n"
            "    open(sys.argv[1], 'a').write(f'{os.getpid()} again\\n'); sys.exit(5)\n"
            + TRAINING)
    args = mps_daemon_args(tmp_path, pidfile)
    args[1] = shlex.join([sys.executable, "-c", once, str(pidfile)])
    r = subprocess.run(daemon_argv(tmp_path, "rf", *args), capture_output=True, text=True,
                       timeout=60, check=False)
    try:
        assert r.returncode == 1, r.stderr
        events = [json.loads(line) for line in r.stdout.splitlines()]
        restart = next(e for e in events if e.get("event") == "mps_restart")
        assert not restart["ok"] and restart["new_pid"] is None
        finished = next(e for e in events if e.get("event") == "training_finished")
        assert finished["failed"] is True and finished["exit_code"] is None
        assert "code 5" in finished["restart_error"]
        assert "could not be started again by an MPS restart" in r.stderr
        assert len(launched(pidfile)) == 3      # the first, then the new share and the old
    finally:
        kill_tree_leftovers(launched(pidfile))


# ------------------------------------------------------------------------------ B2, B15
def test_refused_second_daemon_leaves_the_first_protected(children, tmp_path):
    """B2: a second daemon on the same state file is refused before it touches anything:
    the first keeps its state file, and a SIGKILL of the first still resumes the training."""
    t = children.spawn("while True: pass")
    args = ["--training-pid", str(t.pid), "--fixed-sleep", "0.5", "--run-quantum-s", "0.001",
            "--period-s", "0.2"]
    d = children.popen(daemon_argv(tmp_path, "s", *args), stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    read_events(d.stdout, "started")
    argv2 = daemon_argv(tmp_path, "s", *args)
    argv2[argv2.index("--socket") + 1] = str(tmp_path / "other.sock")
    r = subprocess.run(argv2, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2 and f"another daemon (pid {d.pid})" in r.stderr
    assert (tmp_path / "s.state.json").exists()
    assert wait_state(t.pid, {"T"}, timeout=3.0)
    d.kill()
    d.wait()
    assert wait_for(lambda: not stopped_pids([t.pid]), timeout=5.0)


def test_two_daemons_with_different_gpus_cannot_share_a_training(children, tmp_path):
    """B15: the per-target lock refuses a second daemon (another --gpu, other files) on the
    same training process; once the first is gone the process may be taken again."""
    t = children.spawn(SLEEPER)
    d = children.popen(daemon_argv(tmp_path, "g0", "--training-pid", str(t.pid),
                                   "--fixed-sleep", "0", "--gpu", "0"),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    read_events(d.stdout, "started")
    argv2 = daemon_argv(tmp_path, "g1", "--training-pid", str(t.pid), "--fixed-sleep", "0",
                        "--gpu", "1", "--duration-s", "0.5")
    r = subprocess.run(argv2, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2 and "already controlled by another daemon" in r.stderr
    assert (tmp_path / "g0.state.json").exists()
    d.kill()  # its lock dies with it
    d.wait()
    r = subprocess.run(argv2, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------ B3
def test_sigkill_ends_the_launched_training_and_the_private_mps(children, tmp_path):
    """B3: a training the daemon launched does not outlive it unthrottled, the private MPS
    daemon is quit and its directory removed, and a restarted daemon runs one copy."""
    pidfile = tmp_path / "train.pids"
    args = daemon_argv(tmp_path, "b3", *mps_daemon_args(tmp_path, pidfile, "--ready", "spawn"))
    try:
        d = children.popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ev = read_events(d.stdout, "started")
        pipe_dir = next(e for e in ev if e.get("event") == "mps_ready")["pipe_dir"]
        root = os.path.dirname(pipe_dir)
        first = wait_for(lambda: launched(pidfile))[0]
        doc = json.loads((tmp_path / "b3.state.json").read_text())
        assert [o["pid"] for o in doc["owned"]] == [first] and doc["mps"]["root"] == root
        d.kill()
        d.wait()
        assert wait_for(lambda: not alive(first), timeout=5.0)
        assert wait_for(lambda: not os.path.exists(root), timeout=5.0)
        d2 = children.popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
        read_events(d2.stdout, "started")
        running = wait_for(lambda: [p for p in launched(pidfile)[1:] if alive(p)])
        running = [p for p in launched(pidfile) if alive(p)]
        assert len(running) == 1 and running[0] != first
        d2.terminate()
        assert d2.wait(15) == 0
        assert not [p for p in launched(pidfile) if alive(p)]
    finally:
        kill_tree_leftovers(launched(pidfile))


def test_total_crash_with_a_launched_training_is_cleaned_by_the_next_daemon(children,
                                                                            tmp_path):
    """B3: daemon and guardian killed together: the next daemon ends the old training and
    quits the old MPS daemon before it launches its own."""
    pidfile = tmp_path / "train.pids"
    args = daemon_argv(tmp_path, "tc", *mps_daemon_args(tmp_path, pidfile, "--ready", "spawn"))
    try:
        d = children.popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ev = read_events(d.stdout, "started")
        root = os.path.dirname(next(e for e in ev if e.get("event") == "mps_ready")["pipe_dir"])
        first = wait_for(lambda: launched(pidfile))[0]
        from gpucontrol.node.actuators.procs import descendants

        for pid in descendants([d.pid]):
            if pid != first:
                os.kill(pid, signal.SIGKILL)  # the guardian (and helpers) first
        d.kill()
        d.wait()
        time.sleep(0.2)
        assert alive(first) and os.path.exists(root)  # nobody cleaned up...
        d2 = children.popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
        ev = read_events(d2.stdout, "started")
        cleaned = next(e for e in ev if e.get("event") == "leftovers_cleaned")
        assert cleaned["terminated"] == 1 and cleaned["mps_quit"] == 1  # ...until now
        assert not alive(first) and not os.path.exists(root)
        d2.terminate()
        assert d2.wait(15) == 0
    finally:
        kill_tree_leftovers(launched(pidfile))


# A training that forks a worker (a DataLoader-style child), both on record at once.
TREE = r"""
import os, subprocess, sys, time
w = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()} {w.pid}\n")
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_launched_trainings_workers_end_with_it(children, tmp_path, how):
    """The training the daemon launches leads its own process group: a clean stop (the
    daemon) and a SIGKILL of the daemon (its guardian) end the training's workers too, none
    is left orphaned."""
    pidfile = tmp_path / "tree.pids"
    cmd = shlex.join([sys.executable, "-c", TREE, str(pidfile)])
    d = children.popen(daemon_argv(tmp_path, "tree", "--training-cmd", cmd, "--fixed-sleep",
                                   "0.1", "--run-quantum-s", "0.05", "--period-s", "0.2",
                                   "--sleep-method", "signal",
                                   "--mps-binary", "/nonexistent/mps"),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pids: list[int] = []
    try:
        read_events(d.stdout, "started")
        pids = wait_for(lambda: [int(x) for x in pidfile.read_text().split()]
                        if pidfile.exists() and len(pidfile.read_text().split()) == 2
                        else None)
        assert all(alive(p) for p in pids)
        if how == "sigterm":
            d.terminate()
            assert d.wait(20) == 0
        else:
            d.kill()
            d.wait()
        assert wait_for(lambda: not any(alive(p) for p in pids), timeout=15.0), \
            [(p, state(p)) for p in pids]
    finally:
        kill_tree_leftovers(pids)


def test_a_start_refused_for_a_bad_model_still_resumes_the_leftovers(children, tmp_path):
    """Daemon and guardian killed together while the training is paused, then a daemon
    started with a model file that has since gone bad: it exits 2 for the model, but first
    resumes the paused training and removes the dead run's state file."""
    t = children.spawn(SLEEPER)
    argv = daemon_argv(tmp_path, "bm", "--training-pid", str(t.pid), "--fixed-sleep", "1.0",
                       "--run-quantum-s", "0.01", "--period-s", "0.2")
    d = children.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    read_events(d.stdout, "started")
    assert wait_for(lambda: state(t.pid) == "T", timeout=5.0)
    from gpucontrol.node.actuators.procs import descendants

    for pid in descendants([d.pid]):
        os.kill(pid, signal.SIGKILL)  # the guardian first
    d.kill()
    d.wait()
    if state(t.pid) != "T":  # killed during a run slice: pause it as the cycler would have
        os.kill(t.pid, signal.SIGSTOP)
        assert wait_for(lambda: state(t.pid) == "T", timeout=2.0)
    bad = tmp_path / "model.json"
    bad.write_text("{not json")
    r = run_daemon(daemon_argv(tmp_path, "bm", "--training-pid", str(t.pid), "--slo-ms",
                               "60", "--model", str(bad), "--period-s", "0.2"),
                   capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "model" in r.stderr and "Traceback" not in r.stderr
    assert wait_for(lambda: state(t.pid) not in ("T", "t"), timeout=2.0)
    assert '"leftovers_resumed"' in r.stdout
    assert not (tmp_path / "bm.state.json").exists()


def test_a_removed_state_file_is_written_again_and_the_guardian_kept_a_copy(children,
                                                                            tmp_path):
    """The state file removed under a running daemon (a tmpfiles clean-up of its runtime
    directory): the daemon writes it again at its next period, also in open loop, and a
    daemon SIGKILLed before that still has its paused training resumed by the guardian,
    from the copy it keeps in memory."""
    t = children.spawn(SLEEPER)
    path = tmp_path / "rm.state.json"
    d = children.popen(daemon_argv(tmp_path, "rm", "--training-pid", str(t.pid),
                                   "--fixed-sleep", "1.0", "--run-quantum-s", "0.01",
                                   "--period-s", "0.2"),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    read_events(d.stdout, "started")
    path.unlink()
    ev = read_events(d.stdout, "state_file_restored", timeout=5.0)
    assert ev[-1]["event"] == "state_file_restored" and path.exists()
    d.terminate()
    assert d.wait(15) == 0

    d = children.popen(daemon_argv(tmp_path, "rm", "--training-pid", str(t.pid),
                                   "--fixed-sleep", "1.0", "--run-quantum-s", "0.01",
                                   "--period-s", "5"),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    read_events(d.stdout, "started")
    time.sleep(0.7)  # the guardian has read the file
    assert wait_for(lambda: state(t.pid) == "T", timeout=5.0)
    path.unlink()
    d.kill()
    d.wait()
    assert wait_for(lambda: state(t.pid) not in ("T", "t"), timeout=2.0)


# ------------------------------------------------------------------------------ B9
def test_hook_method_refuses_a_max_sleep_above_the_hook_cap(tmp_path):
    """B9: with the hook a sleep above 60 s could never be published: refused up front
    (exit 2, the flag and its range named) instead of killing the daemon mid-run."""
    r = run_daemon(daemon_argv(tmp_path, "h", "--training-cmd", "true", "--sleep-method",
                               "hook", "--slo-ms", "50", "--model", model_file(tmp_path),
                               "--max-sleep-s", "90"),
                   capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2
    assert "--max-sleep-s" in r.stderr and "60" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------ B10
SILENT = TRAINING.replace("notify_ready()\n", "")  # a plain loop: never signals ready


def test_first_launch_does_not_wait_for_a_ready_signal_and_sigterm_ends_a_restart(children,
                                                                                  tmp_path):
    """B10: the first launch starts cycling at once (no 120 s wait for a ready byte a plain
    loop never sends); SIGTERM while a shadow restart waits for the new process to be ready
    ends the daemon within seconds (not the 120 s ready timeout) and leaves no training."""
    pidfile = tmp_path / "train.pids"
    cmd = shlex.join([sys.executable, "-c", SILENT, str(pidfile)])
    args = mps_daemon_args(tmp_path, pidfile, "--shadow", "--ready-timeout-s", "120")
    args[args.index("--training-cmd") + 1] = cmd
    try:
        t0 = time.monotonic()
        d = children.popen(daemon_argv(tmp_path, "b10", *args), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        read_events(d.stdout, "started", timeout=30)
        assert time.monotonic() - t0 < 30  # not the 120 s ready timeout (a loaded CI: slow)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # until the restart waits for the new process
            rec = json.loads(d.stdout.readline())
            if rec.get("restarting"):
                break
        assert len(wait_for(lambda: launched(pidfile)[1:], timeout=5.0)) >= 1
        t1 = time.monotonic()
        d.send_signal(signal.SIGTERM)
        assert d.wait(30) == 0  # not the 120 s ready timeout
        assert time.monotonic() - t1 < 30
        assert wait_for(lambda: not [p for p in launched(pidfile) if alive(p)], timeout=5.0)
    finally:
        kill_tree_leftovers(launched(pidfile))


# ------------------------------------------------------------------------------ B6, B19
def test_cgroup_without_the_training_is_refused(children, tmp_path, cgroup_dir):
    """B6: --cgroup naming a group the training is not in (or one that does not exist) is
    refused with exit 2 -- nothing is created, nothing reports a stopped fraction."""
    t = children.spawn(SLEEPER)
    base = ["--training-pid", str(t.pid), "--fixed-sleep", "0.1", "--duration-s", "1"]
    r = run_daemon(daemon_argv(tmp_path, "c", *base, "--cgroup", str(cgroup_dir)),
                   capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2 and f"does not contain training pid {t.pid}" in r.stderr
    missing = cgroup_dir / "nope"
    r = run_daemon(daemon_argv(tmp_path, "c", *base, "--cgroup", str(missing)),
                   capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2 and "does not exist" in r.stderr and not missing.exists()
    assert not (tmp_path / "c.state.json").exists()


def test_made_cgroup_and_its_training_do_not_outlive_a_killed_daemon(children, tmp_path,
                                                                      cgroup_dir):
    """B19/B3: a cgroup the daemon made for its training is listed in the state file; after a
    SIGKILL the guardian thaws it, ends the training and removes the group."""
    group = cgroup_dir / "train"
    pidfile = tmp_path / "train.pids"
    cmd = shlex.join([sys.executable, "-c", TRAINING, str(pidfile)])
    doc = None
    d = children.popen(daemon_argv(tmp_path, "mc", "--training-cmd", cmd, "--cgroup",
                                   str(group), "--fixed-sleep", "0.2", "--run-quantum-s",
                                   "0.05", "--period-s", "0.2", "--mps-binary",
                                   "/nonexistent/mps"),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ev = read_events(d.stdout, "started")
        assert next(e for e in ev if e.get("event") == "started")["method"] == "cgroup"
        doc = json.loads((tmp_path / "mc.state.json").read_text())
        assert doc["made_cgroup"] == str(group)
        pid = doc["owned"][0]["pid"]
        assert str(pid) in (group / "cgroup.procs").read_text().split()
        assert wait_for(lambda: "frozen 1" in (group / "cgroup.events").read_text(), 5.0)
        d.kill()
        d.wait()
        assert wait_for(lambda: not alive(pid), timeout=5.0)
        assert wait_for(lambda: not group.exists(), timeout=5.0)
    finally:
        kill_tree_leftovers([o["pid"] for o in doc.get("owned", [])] if doc else [])
        if group.exists():
            (group / "cgroup.freeze").write_text("0")
            (group / "cgroup.kill").write_text("1")
            wait_for(lambda: not (group / "cgroup.procs").read_text().split(), 2.0)
            group.rmdir()


# ------------------------------------------------------------------------------ B16, B17
@pytest.mark.parametrize("sleep, binary", [
    ("open", "missing"), ("closed", "missing"), ("closed", "failing")])
def test_fixed_mps_without_mps_is_refused(children, tmp_path, sleep, binary):
    """B17: --fixed-mps where MPS is unavailable exits 2 instead of running at 100 %, as a
    refused start: one line naming the flag and why (never "running sleep-only" before it),
    nothing on standard output, no state file, the training never started. A missing binary
    is refused before anything runs; one whose ``-d`` fails once it has been tried."""
    pidfile = tmp_path / "train.pids"
    cmd = shlex.join([sys.executable, "-c", TRAINING, str(pidfile)])
    mps = "/nonexistent/mps"
    if binary == "failing":
        fake = tmp_path / "failing-mps"
        fake.write_text("#!/bin/sh\necho no device >&2\nexit 1\n")
        fake.chmod(0o755)
        mps = str(fake)
    how = (["--fixed-sleep", "0"] if sleep == "open" else
           ["--slo-ms", "90", "--model", model_file(tmp_path)])
    r = run_daemon(daemon_argv(tmp_path, "f", "--training-cmd", cmd, *how,
                               "--fixed-mps", "50", "--mps-binary", mps),
                   capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2, r.stderr
    why = "/nonexistent/mps not found" if binary == "missing" else f"{mps} -d failed (1)"
    assert r.stderr.splitlines() == [f"gpucontrol-daemon: error: --fixed-mps 50 needs MPS, "
                                     f"which is unavailable here: {why}"
                                     + (" (--mps-binary names it)" if binary == "missing"
                                        else ": no device")], r.stderr
    assert r.stdout == ""
    assert not (tmp_path / "f.state.json").exists()
    assert not launched(pidfile)  # the training was never started


def test_mps_unavailable_without_a_held_share_goes_on_sleep_only(children, tmp_path):
    """Without --fixed-mps a missing MPS is no refusal: the daemon says it runs sleep-only and
    does."""
    pidfile = tmp_path / "train.pids"
    cmd = shlex.join([sys.executable, "-c", TRAINING, str(pidfile)])
    r = run_daemon(daemon_argv(tmp_path, "s", "--training-cmd", cmd, "--slo-ms", "90",
                               "--model", model_file(tmp_path), "--period-s", "0.2",
                               "--duration-s", "0.4", "--mps-binary", "/nonexistent/mps"),
                   capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    assert "MPS unavailable, running sleep-only" in r.stderr
    events = [json.loads(line).get("event") for line in r.stdout.splitlines()]
    assert "mps_unavailable" in events and "started" in events


def test_mps_health_watch_restarts_a_dead_control_daemon_with_back_off(tmp_path):
    """B16: the watch notices a control daemon that went away, restarts it, and backs off
    (doubling, capped) while a restart keeps failing."""
    from gpucontrol.node.actuators.mps import MPSControl
    from gpucontrol.node.mps_health import MPSHealthWatch

    ctl = MPSControl(fake_mps(tmp_path)).start()
    try:
        w = MPSHealthWatch(ctl, interval_s=0.5, max_interval_s=2.0)
        assert w.check_once() and w.take_events() == []
        os.unlink(os.path.join(ctl.pipe_dir, "control.json"))  # the daemon "died"
        assert not ctl.health()
        assert w.check_once() and ctl.health()
        assert [e["event"] for e in w.take_events()] == ["mps_restarted_daemon"]
        os.unlink(os.path.join(ctl.pipe_dir, "control.json"))
        os.chmod(ctl.pipe_dir, 0o500)  # it cannot come back
        if os.geteuid() == 0:  # root ignores the mode: take the directory away instead
            os.rename(ctl.pipe_dir, ctl.pipe_dir + ".gone")
        waits = []
        for _ in range(4):
            assert not w.check_once()
            waits.append(w.next_wait_s)
        assert waits == [1.0, 2.0, 2.0, 2.0] and not w.healthy
        assert "mps_unhealthy" in [e["event"] for e in w.take_events()]
        if os.path.exists(ctl.pipe_dir + ".gone"):
            os.rename(ctl.pipe_dir + ".gone", ctl.pipe_dir)
        os.chmod(ctl.pipe_dir, 0o700)
        assert w.check_once() and w.next_wait_s == 0.5
        assert "mps_recovered" in [e["event"] for e in w.take_events()]
    finally:
        ctl.quit()


def test_daemon_logs_and_repairs_a_dead_mps_daemon(children, tmp_path):
    """B16 in the daemon: periodic checks (--mps-health-s) bring a private MPS control daemon
    back and log it."""
    pidfile = tmp_path / "train.pids"
    cmd = shlex.join([sys.executable, "-c", TRAINING, str(pidfile)])
    d = children.popen(daemon_argv(tmp_path, "mh", "--training-cmd", cmd, "--fixed-sleep", "0",
                                   "--period-s", "0.2", "--mps-binary", fake_mps(tmp_path),
                                   "--mps-health-s", "0.3"),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ev = read_events(d.stdout, "started")
        pipe = next(e for e in ev if e.get("event") == "mps_ready")["pipe_dir"]
        os.unlink(os.path.join(pipe, "control.json"))
        read_events(d.stdout, "mps_restarted_daemon", timeout=10)
        assert os.path.exists(os.path.join(pipe, "control.json"))
        d.terminate()
        assert d.wait(15) == 0
    finally:
        kill_tree_leftovers(launched(pidfile))


# ------------------------------------------------------------------------------ B18
def test_a_restarted_daemon_resumes_a_fresh_controller_state(children, tmp_path):
    """B18: the controller's actuation is in the state file every period; a daemon restarted
    after a SIGKILL starts from it (not from zero sleep), one started long after does not."""
    env = {**os.environ, "GPUCONTROL_SOCKET": str(tmp_path / "r.sock")}
    t = children.spawn(TRAINING.replace("notify_ready()\n", ""), str(tmp_path / "t.pids"),
                       env=env)
    model = tmp_path / "held.json"  # the share is held: a model that meets 60 ms by sleep
    model.write_text(json.dumps({"gain": -600.0, "offset": 70.0}))  # (the readings never do)
    args = daemon_argv(tmp_path, "r", "--training-pid", str(t.pid), "--slo-ms", "60",
                       "--model", str(model), "--period-s", "0.2",
                       "--run-quantum-s", "0.05", "--max-sleep-s", "0.03",
                       "--sleep-method", "signal")
    d = children.popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # until the sleep saturates at its bound
        rec = json.loads(d.stdout.readline())
        if rec.get("sleep_s") == 0.03:
            break
    doc = json.loads((tmp_path / "r.state.json").read_text())
    assert doc["controller"]["sleep_s"] == 0.03
    d.kill()
    d.wait()
    d2 = children.popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    resumed = read_events(d2.stdout, "controller_resumed")[-1]
    assert resumed["sleep_s"] == 0.03 and resumed["age_s"] < 30
    d2.kill()
    d2.wait()
    doc = json.loads((tmp_path / "r.state.json").read_text())
    doc["controller"]["at"] -= 3600  # an hour old: stale
    (tmp_path / "r.state.json").write_text(json.dumps(doc))
    d3 = children.popen([*args, "--duration-s", "0.5"], stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, text=True)
    ev = read_events(d3.stdout, "stopped")
    assert not any(e.get("event") == "controller_resumed" for e in ev)
    assert d3.wait(15) == 0
    assert not stopped_pids([t.pid])


# ------------------------------------------------------------------------------ B7
def test_failed_write_ahead_holds_the_daemon_and_recovers(children, tmp_path):
    """B7: the state file cannot be written (its directory is gone) when a new descendant
    appears: the daemon holds (nothing paused, commanded 0, actuator_error) instead of
    stopping actuation for good, and cycles again once the write succeeds."""
    import shutil

    code = ("import os, subprocess, sys\n"
            "while not os.path.exists(sys.argv[1]): pass\n"  # a new child on demand
            "subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
            "while True: pass\n")
    flag = tmp_path / "fork-now"
    t = children.spawn(code, str(flag))
    st = tmp_path / "st"
    st.mkdir(mode=0o700)
    argv = daemon_argv(tmp_path, "w", "--training-pid", str(t.pid), "--fixed-sleep", "0.05",
                       "--run-quantum-s", "0.01", "--period-s", "0.2")
    argv[argv.index("--state") + 1] = str(st / "w.state.json")
    d = children.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        read_events(d.stdout, "started")
        shutil.rmtree(st)  # every write of the state file fails from now on
        flag.touch()  # a new descendant: it must be written ahead of its first pause
        err = read_events(d.stdout, "actuator_error", timeout=10)[-1]
        assert err["held"] and "write-ahead failed" in err["error"], err
        from gpucontrol.node.actuators.procs import descendants

        pids = [t.pid, *descendants([t.pid])]
        assert len(pids) == 2
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:  # held: nothing is paused
            assert not stopped_pids(pids)
            time.sleep(0.005)
        st.mkdir(mode=0o700)
        recs = read_events(d.stdout, "actuator_recovered", timeout=10)
        assert any(r.get("commanded_fraction") == 0.0 for r in recs if "period" in r)
        doc = json.loads((st / "w.state.json").read_text())
        assert sorted(x["pid"] for x in doc["targets"]) == sorted(pids)
        assert wait_for(lambda: stopped_pids(pids), 3.0)  # cycling again
        d.terminate()
        assert d.wait(10) == 0
    finally:
        kill_tree_leftovers(descendants_of(t.pid))


def descendants_of(pid):
    from gpucontrol.node.actuators.procs import descendants

    return descendants([pid])


def test_a_state_directory_that_cannot_be_made_is_one_line_exit_2(children, tmp_path):
    """B7: a --state whose directory cannot be made ends with one line naming the flag, exit
    2, no traceback (an operating-system error no flag explains, such as a full disk, exits
    1: test_daemon_cli.py)."""
    t = children.spawn(SLEEPER)
    argv = daemon_argv(tmp_path, "o", "--training-pid", str(t.pid), "--fixed-sleep", "0")
    argv[argv.index("--state") + 1] = "/proc/self/no/such/dir/o.state.json"
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("gpucontrol-daemon: error: --state /proc/self/no/such/dir/")
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_a_guardian_stopped_while_its_daemon_lives_ends_nothing(children, tmp_path):
    """The records are ended only when the daemon is dead: a guardian told to stop (a failed
    start, a replacement) leaves the launched training running."""
    from gpucontrol.node.actuators.procs import ProcessHandle
    from gpucontrol.node.guardian import Guardian, write_state

    t = children.spawn(SLEEPER)
    h = ProcessHandle.open(t.pid)
    path = tmp_path / "g.state.json"
    write_state(path, [], extra={"owned": [h.identity()]})  # "we" are the live daemon
    h.close()
    g = Guardian(path).start()
    g.stop()
    time.sleep(0.2)
    assert alive(t.pid)


def test_two_daemons_cannot_freeze_the_same_cgroup(children, tmp_path, cgroup_dir):
    """B15 for the freezer: one daemon per cgroup, even for different training processes."""
    a, b = children.spawn(SLEEPER), children.spawn(SLEEPER)
    for p in (a, b):
        (cgroup_dir / "cgroup.procs").write_text(str(p.pid))
    d = children.popen(daemon_argv(tmp_path, "ca", "--training-pid", str(a.pid), "--cgroup",
                                   str(cgroup_dir), "--fixed-sleep", "0.05"),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ev = read_events(d.stdout, "started")
        assert ev[-1]["method"] == "cgroup"
        r = run_daemon(daemon_argv(tmp_path, "cb", "--training-pid", str(b.pid),
                                   "--cgroup", str(cgroup_dir), "--fixed-sleep", "0.05",
                                   "--gpu", "1"),
                       capture_output=True, text=True, timeout=30, check=False)
        assert r.returncode == 2 and "already controlled by another daemon" in r.stderr
        assert f"cgroup {cgroup_dir}" in r.stderr
    finally:
        d.terminate()
        assert d.wait(10) == 0
    assert "frozen 0" in (cgroup_dir / "cgroup.events").read_text()


def test_missing_training_program_is_one_line_from_the_node_entry_point(tmp_path):
    """`python -m gpucontrol.daemon` refuses a --training-cmd whose program does not exist
    with one line and exit 2 (the same check as `gpucontrol daemon`), before touching
    anything."""
    r = subprocess.run([sys.executable, "-m", "gpucontrol.daemon", "--fixed-sleep", "0.1",
                        "--training-cmd", "no-such-program-xyz --epochs 3",
                        "--state", str(tmp_path / "s.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "gpucontrol-daemon: error: --training-cmd: program 'no-such-program-xyz' not found "
        "or not executable on PATH"]
    assert not (tmp_path / "s.json").exists()


def test_daemon_reports_the_spatial_backends_at_start(children, tmp_path):
    """At start the daemon logs which spatial-share backends this machine offers and why
    not (feature detection, no CUDA initialised)."""
    t = children.spawn("while True: pass")
    d = children.popen(daemon_argv(tmp_path, "b", "--training-pid", str(t.pid), "--fixed-sleep",
                                   "0.1", "--period-s", "0.2", "--mps-binary",
                                   str(tmp_path / "no-such-mps")),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ev = read_events(d.stdout, "spatial_backends")[-1]
        by = {b["name"]: b for b in ev["backends"]}
        assert list(by) == ["mps-restart", "green-context", "cpu.max"]
        assert not by["mps-restart"]["available"] and "no-such-mps" in by["mps-restart"]["reason"]
        assert all(b["available"] or b["reason"] for b in by.values())
    finally:
        d.terminate()
        assert d.wait(10) == 0
