"""The daemon's spatial share through one backend (gpucontrol.node.share): the wiring in
process, and ``--share-backend green-context`` as a real daemon process against a cooperative
training that reads its commanded share from the hook file every iteration."""

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from actuators._children import daemon_argv, read_events, run_daemon, wait_for

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.actuators.spatial import BackendInfo, detect_backends
from gpucontrol.node.cli import build_parser
from gpucontrol.node.cli import main as daemon_main
from gpucontrol.node.client import report_latency
from gpucontrol.node.config import SHARE_BACKENDS, DaemonConfig
from gpucontrol.node.daemon import Daemon
from gpucontrol.node.hooks import HookReader, HookWriter
from gpucontrol.node.share import (
    GreenContextShare,
    MPSRestartShare,
    controller_restart_s,
    is_restart_free,
)

#: A cooperative training: each iteration it reads the commanded share from the hook file (as
#: GreenPartitions.iteration does) and appends "pid share" to the file it is given.
TRAINING = """
import os, sys, time
from gpucontrol.node.hooks import HookReader, after_iteration
out, reader = sys.argv[1], HookReader()
while True:
    share = reader.share_pct()
    with open(out, "a") as f:
        f.write(f"{os.getpid()} {share or 100}\\n")
    after_iteration()
    time.sleep(0.01)
"""

NO_DRIVER = [BackendInfo("mps-restart", False, "x not found", False, 1.0, 10.0),
             BackendInfo("green-context", False, "no CUDA driver library", True, float("nan"),
                         float("nan")),
             BackendInfo("cpu.max", True, "", True, 1.0, 1e-3)]


def _shares(path: Path) -> list[tuple[int, int]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(int(a), int(b)) for a, b in (x.split() for x in lines if x.count(" ") == 1)]


def _drain(stream, timeout: float = 10.0) -> list[dict]:
    """The complete JSON lines left on a killed daemon's stdout (its guardian may hold the
    pipe a moment longer: bounded by ``timeout``)."""
    out = []
    deadline = time.monotonic() + timeout
    while select.select([stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
        line = stream.readline()
        if not line.endswith("\n"):
            break
        out.append(json.loads(line))
    return out


# ------------------------------------------------------------------------------ the wiring
def test_restart_free_backends_cost_the_controller_nothing():
    assert SHARE_BACKENDS == ("mps", "cpu", "green-context", "none")
    assert [is_restart_free(f) for f in SHARE_BACKENDS] == [False, True, True, False]
    assert [controller_restart_s(f) for f in SHARE_BACKENDS] == [None, 0.0, 0.0, None]


def test_green_wiring_publishes_changes_and_withdraws_them(tmp_path):
    w = HookWriter(tmp_path / "h")
    r = HookReader(w.path)
    s = GreenContextShare(NO_DRIVER)
    assert s.backend is None and not s.restart_free and s.metrics_label() == "none"
    s.publish(w, 60.0)  # before the training starts
    assert r.share_pct() == 60 and s.restart_free and s.metrics_label() == "green-context"
    ev = s.chosen(period_s=4.0)
    assert ev["event"] == "share_backend" and ev["backend"] == "green-context"
    assert ev["restart_free"] and ev["controller_restart_s"] == 0.0
    assert ev["change_cost_periods"] < 1.0  # one mmap write: the outer loop may run each period
    assert "no CUDA driver library" in ev["reason"]  # the probe's verdict is passed on
    ch = s.change(37.4)
    assert (ch["ok"], ch["new_pct"], ch["applied_pct"]) == (True, 37.4, 37.0)
    assert r.share_pct() == 37
    ch = s.change(100.0)
    assert ch["ok"] and r.share_pct() is None  # 100 %: no command, the full device
    s.change(50.0)
    bad = s.change(0.0)  # refused, the share in force unchanged
    assert not bad["ok"] and "share_pct" in bad["error"] and r.share_pct() == 50
    s.close()
    assert r.share_pct() is None and s.backend is None
    w.close()


class FakeMPSActuator:
    def __init__(self):
        self.calls = []

    def apply(self, pct):
        from gpucontrol.node.actuators.mps import RestartResult

        self.calls.append(pct)
        return RestartResult(100.0, pct, 1, 2, False, 1.5, 0.0, 2.5, True)


def test_mps_wiring_restarts_with_the_controllers_percentage_as_is():
    act = FakeMPSActuator()
    s = MPSRestartShare(NO_DRIVER)
    s.wrap(act, mps_ok=True)
    assert not s.restart_free and s.metrics_label() == "mps"
    res = s.restart(37.5)
    assert act.calls == [37.5] and res.total_s == 2.5  # unrounded, as before the backend
    ev = s.chosen(period_s=1.0)
    assert not ev["restart_free"] and ev["controller_restart_s"] is None
    assert ev["change_latency_s"] == 2.5 and ev["change_cost_periods"] == 2.5
    s.close()  # MPS: the training stops with the daemon; nothing to withdraw here
    assert act.calls == [37.5]


@pytest.mark.parametrize("trainer, ok, why", [
    (None, False, "needs --training-cmd"),
    (FakeMPSActuator(), False, "MPS unavailable (no daemon)"),
])
def test_mps_wiring_without_mps_says_why(trainer, ok, why):
    s = MPSRestartShare(NO_DRIVER)
    s.wrap(trainer, mps_ok=ok, why_not="no daemon")
    ev = s.chosen(period_s=1.0)
    assert ev["backend"] is None and why in ev["reason"] and s.metrics_label() == "none"


def test_daemon_builds_its_controller_with_the_backends_change_cost(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"gain": -50.0, "offset": 150.0}))
    costs = {}
    for flag in SHARE_BACKENDS:
        d = Daemon(DaemonConfig(training_cmd=sys.executable, slo_ms=100.0,
                                model=str(tmp_path / "m.json"), share_backend=flag,
                                socket=str(tmp_path / "s"), state=str(tmp_path / "st"),
                                hook=str(tmp_path / "h")))
        ctl = d._make_controller(True)
        assert ctl is not None
        costs[flag] = ctl.share.cost_s
    # MPS: until measured; none: the share held, no change to cost
    assert costs == {"mps": 15.0, "cpu": 0.0, "green-context": 0.0, "none": 0.0}


def test_green_shares_reach_the_wiring_and_the_controller(tmp_path):
    """--green-shares: the daemon reports the partition a command runs on, and its outer
    loop moves between the partitions only."""
    w = HookWriter(tmp_path / "h")
    s = GreenContextShare(NO_DRIVER)
    s.publish(w, 100.0, (25.0, 50.0, 75.0))
    ch = s.change(60.0)   # published as is; the training runs it on the 50 % partition
    assert (ch["ok"], ch["new_pct"], ch["applied_pct"]) == (True, 60.0, 50.0)
    assert s.chosen(4.0)["granularity_pct"] == 25.0
    s.close()
    w.close()
    (tmp_path / "m.json").write_text(json.dumps({"gain": -50.0, "offset": 150.0}))
    cfg = DaemonConfig.from_args(build_parser().parse_args([
        "--training-cmd", sys.executable, "--slo-ms", "100", "--model", str(tmp_path / "m.json"),
        "--share-backend", "green-context", "--green-shares", "25,50,75",
        "--socket", str(tmp_path / "s"), "--state", str(tmp_path / "st"),
        "--hook", str(tmp_path / "h2")]))
    assert cfg.green_shares == (25.0, 50.0, 75.0)
    ctl = Daemon(cfg)._make_controller(True)   # no command is the whole device: 100 too
    assert ctl is not None and ctl.share.levels_pct == (25.0, 50.0, 75.0, 100.0)


@pytest.mark.parametrize("kw, message", [
    ({"green_shares": "25,abc"}, "--green-shares must be comma-separated"),
    ({"green_shares": (0.5, 50.0)}, "--green-shares"),
    ({"green_shares": "25,50", "share_backend": "mps"}, "--share-backend green-context"),
])
def test_bad_green_shares_name_the_flag(kw, message):
    with pytest.raises(ConfigurationError, match=message):
        DaemonConfig(training_pids=(4242,), fixed_sleep=0,
                     **{"share_backend": "green-context", **kw})


def test_bad_share_backend_is_one_line_naming_the_flag_and_the_values(tmp_path, capsys):
    with pytest.raises(ConfigurationError, match=r"--share-backend must be one of 'mps', "
                                                 r"'cpu', 'green-context', 'none', got 'mig'"):
        DaemonConfig(training_pids=(4242,), fixed_sleep=0, share_backend="mig")
    argv = daemon_argv(tmp_path, "x", "--training-pid", "4242", "--fixed-sleep", "0",
                       "--share-backend", "mig")[3:]
    with pytest.raises(SystemExit) as exc:
        daemon_main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--share-backend" in err[0] and "green-context" in err[0]
    assert not (tmp_path / "x.state.json").exists()


def test_detection_lists_green_context_for_the_choice():
    by = {b.name: b for b in detect_backends(mps_binary="/nonexistent/mps")}
    assert by["green-context"].restart_free and not by["mps-restart"].available


# ------------------------------------------------------------------------------ real process
def test_green_context_share_follows_the_outer_loop_without_restart_and_is_withdrawn_on_sigkill(
        children, tmp_path):
    """Latency far above the SLO: the sleep saturates and the outer loop lowers the share; the
    training (never restarted, never stopped) reads each new share at its next iteration.
    SIGKILL of the daemon: its guardian clears the hook file and the training is back at 100 %;
    the next daemon on the same files clears the leftovers again."""
    shares = tmp_path / "shares.txt"
    env = {**os.environ, "GPUCONTROL_HOOK_FILE": str(tmp_path / "g.hook")}
    train = children.spawn(TRAINING, str(shares), env=env, stdout=subprocess.DEVNULL)
    # a low share meets the SLO by the model (one it says nothing meets is refused)
    (tmp_path / "m.json").write_text(json.dumps([
        {"mps_pct": 10.0, "gain": -50.0, "offset": 50.0},
        {"mps_pct": 100.0, "gain": -50.0, "offset": 150.0}]))
    sock = str(tmp_path / "g.sock")
    stop = threading.Event()

    def feed() -> None:  # 200 ms per batch whatever happens: always over the SLO of 100
        while not stop.wait(0.02):
            report_latency(200.0, sock)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    d = children.popen(daemon_argv(
        tmp_path, "g", "--training-pid", str(train.pid), "--slo-ms", "100", "--model",
        str(tmp_path / "m.json"), "--period-s", "0.2", "--outer-every", "1",
        "--sleep-method", "hook", "--max-sleep-s", "0.05", "--share-backend", "green-context",
        "--mps-unchecked"),  # no MPS on this machine: go on (one warning line)
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        recs = read_events(d.stdout, "share_backend", timeout=30)
        chosen = recs[-1]
        assert chosen["backend"] == "green-context" and chosen["restart_free"]
        started = next(r for r in recs if r.get("event") == "started")
        assert started["mps"] is False and started["share_backend"] == "green-context"
        assert chosen["controller_restart_s"] == 0.0
        # the training follows the outer loop down, at least two moves
        assert wait_for(lambda: len({s for _, s in _shares(shares) if s < 100}) >= 2, 30), \
            _shares(shares)[-5:]
        recs += read_events(d.stdout, "share_change", timeout=10)
        d.send_signal(signal.SIGKILL)
        assert d.wait(10) == -signal.SIGKILL
        recs += _drain(d.stdout)
        # the guardian withdrew the share: the training's next iteration is on the full device
        n = len(_shares(shares))
        assert wait_for(lambda: (s := _shares(shares)) and len(s) > n and s[-1][1] == 100, 10)
    finally:
        stop.set()
        d.stdout.close()
    seen = _shares(shares)
    assert {p for p, _ in seen} == {train.pid} and train.poll() is None  # one process, alive
    changes = [r for r in recs if r.get("event") == "share_change"]
    assert changes and all(c["ok"] and c["backend"] == "green-context" for c in changes)
    # every share the training ran at was commanded (or the full device)
    assert {s for _, s in seen} <= {100} | {round(c["new_pct"]) for c in changes}
    assert not [r for r in recs if r.get("event") in ("mps_restart", "training_started")]
    assert not [r for r in recs if r.get("restarting")]

    # the next start: leftovers resumed (the hook file cleared), open loop at the full share
    again = run_daemon(daemon_argv(
        tmp_path, "g", "--training-pid", str(train.pid), "--fixed-sleep", "0", "--period-s",
        "0.2", "--duration-s", "0.5", "--sleep-method", "hook", "--share-backend",
        "green-context", "--mps-unchecked"), capture_output=True, text=True, timeout=60,
        check=False)
    assert again.returncode == 0, again.stderr
    evs = {r.get("event"): r for r in map(json.loads, again.stdout.splitlines())}
    assert evs["leftovers_resumed"]["hook"] == 1
    assert evs["share_backend"]["share_pct"] == 100.0
    n = len(_shares(shares))
    assert wait_for(lambda: len(_shares(shares)) > n + 2, 10)
    assert _shares(shares)[-1] == (train.pid, 100)


def test_a_fixed_share_needs_a_launched_training_only_for_mps():
    with pytest.raises(ConfigurationError, match="--fixed-mps needs --training-cmd"):
        DaemonConfig(training_pids=(4242,), fixed_sleep=0, fixed_mps=50)
    for flag in ("cpu", "green-context"):  # no restart: a running training takes it too
        cfg = DaemonConfig(training_pids=(4242,), fixed_sleep=0, fixed_mps=50,
                           share_backend=flag)
        assert cfg.initial_mps_pct == 50


def test_metrics_label_the_share_with_the_chosen_backend():
    from gpucontrol.node.metrics import DaemonMetrics

    cfg = DaemonConfig(training_pids=(4242,), fixed_sleep=0, share_backend="green-context")
    m = DaemonMetrics.from_config(cfg, pids=[4242], mps_ok=True, method="hook",
                                  backend="green-context")
    try:
        m.observe({"period": 1, "mps_pct": 40.0, "sleep_s": 0.0})
        text = m.render().decode()
    finally:
        m.close()
    share = [x for x in text.splitlines() if x.startswith("gpucontrol_spatial_share_ratio{")]
    assert len(share) == 1 and 'backend="green-context"' in share[0]
    assert share[0].endswith(" 0.4")
    mps_up = [x for x in text.splitlines() if x.startswith("gpucontrol_mps_up{")]
    assert len(mps_up) == 1 and mps_up[0].endswith(" 0.0")  # no MPS daemon in use
