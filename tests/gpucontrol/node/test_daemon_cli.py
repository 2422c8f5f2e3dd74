"""The daemon's command line as a user meets it: every flag checked before anything runs (one
line naming the flag and its range, exit 2, nothing written), no flag silently ignored,
``--duration-s`` counted in whole periods, and Ctrl-C's exit status."""

import errno
import json
import os
import signal
import socket
import subprocess

import pytest
from actuators._children import (
    BUSY,
    SLEEPER,
    daemon_argv,
    read_events,
    run_daemon,
    stopped_pids,
    wait_for,
)

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.cli import main as daemon_main
from gpucontrol.node.config import DaemonConfig
from gpucontrol.node.health import Heartbeat

POLL_MAX_MS = 2**31 - 1  # the largest timeout select.poll().poll() takes


def _cfg(**kw):
    return DaemonConfig(**{"training_pids": (4242,), "fixed_sleep": 0.0, **kw})


# ------------------------------------------------------------------------------ ranges
@pytest.mark.parametrize("field, bad, message", [
    ("period_s", 1e9, "--period-s must be in [0.01, 3600]"),
    ("period_s", 1e-6, "--period-s must be in [0.01, 3600]"),
    ("max_sleep_s", 1e9, "--max-sleep-s must be in (0, 3600]"),
    ("run_quantum_s", 1e9, "--run-quantum-s must be in [0.001, 3600]"),
    ("run_quantum_s", 1e-6, "--run-quantum-s must be in [0.001, 3600]"),
    ("stall_timeout_s", 1e9, "--stall-timeout-s (0: off) must be in [0.1, 3600]"),
    ("stall_timeout_s", 0.001, "--stall-timeout-s (0: off) must be in [0.1, 3600]"),
    ("ready_timeout_s", 1e9, "--ready-timeout-s must be in (0, 3600]"),
    ("mps_health_s", 1e9, "--mps-health-s must be in [0.1, 300]"),
    ("mps_health_s", 1e-6, "--mps-health-s must be in [0.1, 300]"),
    ("duration_s", 1e12, "--duration-s must be in (0, 604800]"),
])
def test_every_duration_flag_has_a_bounded_range(field, bad, message):
    kw = {field: bad}
    if field == "ready_timeout_s":  # it acts on the restart of a launched training only
        kw.update(training_pids=(), training_cmd="true")
    with pytest.raises(ConfigurationError) as exc:
        _cfg(**kw)
    assert str(exc.value).startswith(message), exc.value


def test_the_range_ends_are_accepted_and_the_guardian_can_poll_them():
    for period in (0.01, 0.2, 3600.0):
        cfg = _cfg(period_s=period)
        timeout_ms = 1e3 * Heartbeat(cfg.period_s, cfg.stall_timeout_s).guardian_timeout_s
        assert timeout_ms < POLL_MAX_MS  # the default: 1.5 periods
    for stall in (0, 0.1, 3600.0):
        assert _cfg(stall_timeout_s=stall).stall_timeout_s == stall
    assert _cfg(max_sleep_s=3600.0, run_quantum_s=0.001, mps_health_s=300.0,
                duration_s=604800.0).duration_s == 604800.0


# ------------------------------------------------------------------------------ no-op flags
@pytest.mark.parametrize("kw, message", [
    ({"prometheus_url": "http://127.0.0.1:1/metrics"},
     "--prometheus-url goes with --latency-source prometheus"),
    ({"prometheus_metric": "other_seconds"},
     "--prometheus-metric goes with --latency-source prometheus"),
    ({"share_cgroup": "mine"}, "--share-cgroup goes with --share-backend cpu"),
    ({"green_shares": "25,100"}, "--green-shares goes with --share-backend green-context"),
    ({"slo_ms": 90.0}, "--slo-ms is for the closed loop, and --fixed-sleep runs open loop"),
    ({"model": "m.json"}, "--model is for the closed loop"),
    ({"detune": 0.3}, "--detune is for the closed loop"),
    ({"outer": "paper"}, "--outer is for the closed loop"),
    ({"fixed_sleep": None, "slo_ms": 90.0, "model": "m.json", "fixed_mps": 50.0,
      "share_backend": "cpu", "outer_every": 5}, "--outer-every has no effect with --fixed-mps"),
    ({"fixed_mps": 50.0, "share_backend": "cpu", "initial_mps": 30.0},
     "initial_mps (--config) has no effect with --fixed-mps"),
    ({"shadow": True}, "--shadow goes with --training-cmd and --share-backend mps"),
    ({"mps_pipe_dir": "/tmp/nvidia-mps"},
     "--mps-pipe-dir goes with --training-cmd and --share-backend mps"),
    ({"sleep_method": "hook", "run_quantum_s": 0.05},
     "--run-quantum-s has no effect with --sleep-method hook"),
    ({"metrics_addr": "0.0.0.0"}, "--metrics-addr goes with --metrics-port"),
    ({"share_backend": "none", "outer": "paper", "fixed_sleep": None, "slo_ms": 90.0,
      "model": "m.json"},
     "--outer has no effect with --share-backend none"),
    ({"share_backend": "none", "fixed_mps": 50.0},
     "--fixed-mps has no effect with --share-backend none"),
    ({"metrics_target": "train"}, "metrics_target (--config) goes with --metrics-port or"),
])
def test_a_flag_that_would_be_ignored_is_refused(kw, message):
    with pytest.raises(ConfigurationError) as exc:
        _cfg(**kw)
    assert str(exc.value).startswith(message), exc.value


def test_the_same_flags_are_accepted_where_they_act():
    assert _cfg(latency_source="prometheus", prometheus_url="http://x/metrics",
                prometheus_metric="other_seconds").prometheus_metric == "other_seconds"
    assert _cfg(share_backend="cpu", share_cgroup="mine").share_cgroup == "mine"
    assert _cfg(share_backend="none").share_backend == "none"
    assert _cfg(metrics_port=0, metrics_addr="0.0.0.0", metrics_target="t").metrics_target
    assert _cfg(metrics_textfile="/tmp/x.prom", metrics_target="t").metrics_target == "t"
    closed = DaemonConfig(training_cmd="true", slo_ms=90.0, model="m.json", detune=0.3,
                          outer="paper", outer_every=5, shadow=True, ready="spawn",
                          mps_pipe_dir="/tmp/nvidia-mps")
    assert closed.closed_loop and closed.shadow
    # a fixed share under the closed-loop sleep, as docs/daemon.md shows
    held = DaemonConfig(training_cmd="true", slo_ms=90.0, model="m.json", fixed_mps=50.0)
    assert held.closed_loop and held.initial_mps_pct == 50.0


def test_a_fixed_share_alone_says_what_the_sleep_needs():
    with pytest.raises(ConfigurationError) as exc:
        DaemonConfig(training_cmd="true", fixed_mps=50.0)
    assert str(exc.value) == ("--fixed-mps holds the share only: the sleep needs --fixed-sleep "
                              "(open loop) or --slo-ms and --model (closed loop)")


# ------------------------------------------------------------------------------ end to end
def _refusals(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"gain": -12.0, "offset": 95.0}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gain": 1.0, "offset": 2.0}))
    closed = ["--slo-ms", "90", "--model", str(good)]
    return {
        "period-huge": (["--fixed-sleep", "0", "--period-s", "1e9"],
                        "--period-s must be in [0.01, 3600], got 1000000000.0"),
        "period-tiny": (["--fixed-sleep", "0", "--period-s", "1e-6"], "--period-s must be in"),
        "stall-huge": (["--fixed-sleep", "0", "--stall-timeout-s", "1e9"],
                       "--stall-timeout-s (0: off) must be in [0.1, 3600]"),
        "prometheus-url": (["--fixed-sleep", "0", "--prometheus-url", "http://127.0.0.1:1/m"],
                           "--prometheus-url goes with --latency-source prometheus"),
        "share-cgroup": (["--fixed-sleep", "0", "--share-cgroup", "mine"],
                         "--share-cgroup goes with --share-backend cpu"),
        "fixed-and-slo": (["--fixed-sleep", "0", *closed], "--slo-ms is for the closed loop"),
        "fixed-mps-alone": (["--fixed-mps", "50", "--share-backend", "cpu"],
                            "--fixed-mps holds the share only"),
        "addr-empty": (["--fixed-sleep", "0", "--metrics-port", "0", "--metrics-addr", ""],
                       "--metrics-addr must be an IPv4 address or a host name"),
        "addr-bad": (["--fixed-sleep", "0", "--metrics-port", "0", "--metrics-addr",
                      "999.1.1.1"], "--metrics-addr must be an IPv4 address or a host name"),
        "addr-foreign": (["--fixed-sleep", "0", "--metrics-port", "0", "--metrics-addr",
                          "192.0.2.1"], "--metrics-addr 192.0.2.1 --metrics-port 0: cannot"),
        "state-dir-missing": (["--fixed-sleep", "0", "--state", "/proc/x/s.json"],
                              "--state /proc/x/s.json: cannot use its directory /proc/x"),
        "socket-dir-missing": (["--fixed-sleep", "0", "--socket", "/proc/x/s.sock"],
                               "--socket /proc/x/s.sock: cannot use its directory /proc/x"),
        # a name no socket address holds: refused naming the flag, before its directory is
        # made (it was a bare "AF_UNIX path too long", exit 1, after the start had begun)
        "socket-too-long": (["--fixed-sleep", "0", "--socket",
                             str(tmp_path / "new" / ("a" * 150 + ".sock"))],
                            f"--socket {tmp_path / 'new' / ('a' * 150 + '.sock')}: too long "
                            "for a Unix socket (its name at most 80 bytes"),
        "state-is-dir": (["--fixed-sleep", "0", "--state", str(tmp_path)],
                         f"--state {tmp_path} is a directory"),
        "max-sleep": ([*closed, "--max-sleep-s", "1e9"], "--max-sleep-s must be in (0, 3600]"),
        "run-quantum": ([*closed, "--run-quantum-s", "1e9"],
                        "--run-quantum-s must be in [0.001, 3600]"),
        "model": (["--slo-ms", "90", "--model", str(bad)],
                  f"--model {bad}: gain must be < 0"),
        # an SLO under the least latency the model predicts (held share: 100 %, the sleep
        # at most 1 s, the duty cycler's 0.2 s quantum), as `gpucontrol burst` refuses one
        "slo-unmeetable": (["--slo-ms", "1", "--model", str(good)],
                           f"--slo-ms 1: no setting of the knobs can meet it: the least "
                           f"latency --model {good} predicts is 83.0 ms, at the longest sleep "
                           f"(1 s) and share 100 % (of 100 %); give an SLO of at least 83.0 ms"),
        # the parser's own refusal has the prefix of every other error line
        "not-a-number": (["--slo-ms", "x", "--model", str(good)],
                         "argument --slo-ms: invalid float value: 'x' (see 'python -m "
                         "gpucontrol.daemon -h')"),
    }


CASES = ["period-huge", "period-tiny", "stall-huge", "prometheus-url", "share-cgroup",
         "fixed-and-slo", "fixed-mps-alone", "addr-empty", "addr-bad", "addr-foreign",
         "state-dir-missing", "socket-dir-missing", "socket-too-long", "state-is-dir",
         "max-sleep", "run-quantum", "model", "slo-unmeetable", "not-a-number"]


@pytest.mark.parametrize("case", CASES)
def test_a_refused_command_line_is_one_line_exit_2_and_writes_nothing(children, tmp_path,
                                                                      case):
    """Each command line (a bad range, a flag that would be ignored, a path or address that
    cannot be used, a bad model) exits 2 with exactly one line naming the flag, no
    traceback, nothing on standard output, no --log file and no state file."""
    args, message = _refusals(tmp_path)[case]
    t = children.spawn(SLEEPER)
    log = tmp_path / "d.log"
    argv = daemon_argv(tmp_path, "r", "--training-pid", str(t.pid), "--log", str(log),
                       "--duration-s", "0.5", *args)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpucontrol-daemon: error: "), r.stderr
    assert message in lines[0], r.stderr
    assert r.stdout == ""
    assert not log.exists()
    assert not (tmp_path / "r.state.json").exists()
    assert stopped_pids([t.pid]) == []
    assert not (tmp_path / "new").exists()


def test_the_least_slo_the_model_meets_is_accepted_and_any_under_it_refused(tmp_path):
    """The floor is the controller's own prediction over the knobs it gets: the whole share
    range where a share knob runs (lower than at the one held level), the sleep range and the
    duty cycler's quantum; an SLO at it is accepted, one just under it refused."""
    from gpucontrol.node.controller import check_slo, make_controller

    model = tmp_path / "m.json"
    model.write_text(json.dumps({"gain": -12.0, "offset": 95.0}))

    def check(slo, share_ok, **kw):
        cfg = DaemonConfig(training_pids=(4242,), slo_ms=slo, model=str(model), **kw)
        check_slo(make_controller(cfg, share_ok=share_ok), cfg)

    def floor(share_ok, **kw):
        with pytest.raises(ConfigurationError) as exc:
            check(1.0, share_ok, **kw)
        least = float(str(exc.value).split("predicts is ")[1].split(" ms")[0])
        check(least, share_ok, **kw)  # the SLO the message names is accepted
        with pytest.raises(ConfigurationError, match=r"^--slo-ms "):
            check(least - 0.2, share_ok, **kw)
        return least

    held, free = floor(False), floor(True, share_backend="cpu")
    assert held == 83.0 and free < held
    assert floor(False, max_sleep_s=3.0) < held  # a longer sleep reaches lower


def test_without_reports_every_period_holds_the_sleep_it_started_at(tmp_path):
    """What docs/daemon.md says the operator sees with no inference reporting: the controller
    starts at the sleep its model predicts for the SLO (not 0) and a period without a report
    holds it, however many there are: the training stays throttled."""
    import math
    import time

    from gpucontrol.node.controller import make_controller
    from gpucontrol.node.monitor import PeriodStats

    model = tmp_path / "m.json"
    model.write_text(json.dumps({"gain": -12.0, "offset": 95.0}))
    ctl = make_controller(DaemonConfig(training_pids=(4242,), slo_ms=90.0, model=str(model)),
                          share_ok=False)
    start = ctl.initial_actuation().sleep_s
    assert start > 0.1
    for _ in range(8):
        now = time.time()
        act = ctl.update(PeriodStats(now, now, 0, math.nan, math.nan, math.nan, 0)
                         .to_measurement(False))
        assert act.sleep_s == start and act.reason == "hold: no requests this period"


def test_a_metrics_port_in_use_is_refused_before_the_start(children, tmp_path):
    """Tried before anything runs (it used to fail at the end of the set-up, exit 1, after
    pausing had begun)."""
    t = children.spawn(SLEEPER)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_daemon(daemon_argv(tmp_path, "p", "--training-pid", str(t.pid),
                                   "--fixed-sleep", "0", "--metrics-port", str(port)),
                       capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"gpucontrol-daemon: error: --metrics-addr 127.0.0.1 --metrics-port "
                        f"{port}: cannot listen there (Address already in use)\n")
    assert r.stdout == ""


def test_a_refused_start_on_stdout_writes_no_stopped_line(children, tmp_path):
    """Without --log a refused start prints nothing either (it used to print a "stopped"
    event with 0 periods)."""
    t = children.spawn(SLEEPER)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = run_daemon(daemon_argv(tmp_path, "s", "--training-pid", str(t.pid),
                               "--slo-ms", "90", "--model", str(bad)),
                   capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                   check=False)
    assert r.returncode == 2 and "--model: cannot read model" in r.stderr
    assert r.stdout == ""


def test_a_refused_start_leaves_an_existing_log_file_as_it_was(children, tmp_path):
    t = children.spawn(SLEEPER)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for before in ("", '{"event": "stopped", "periods": 3}\n'):
        log = tmp_path / "d.log"
        log.write_text(before)
        log.chmod(0o600)
        r = run_daemon(daemon_argv(tmp_path, "e", "--training-pid", str(t.pid), "--slo-ms",
                                   "90", "--model", str(bad), "--log", str(log)),
                       capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, check=False)
        assert r.returncode == 2 and f"--model: cannot read model {bad}" in r.stderr
        assert log.read_text() == before  # ours from before: kept, nothing appended


def test_an_os_error_no_flag_explains_is_one_line_exit_1(tmp_path, capfd, monkeypatch):
    """A full disk while the state directory is made is the machine's fault, not --state's:
    exit 1, one line, nothing on standard output."""
    import gpucontrol.node.daemon as daemon_mod

    def full(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(daemon_mod, "ensure_private_dir", full)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        rc = daemon_main(daemon_argv(tmp_path, "n", "--training-pid", str(sleeper.pid),
                                     "--fixed-sleep", "0")[3:])
    finally:
        sleeper.kill()
        sleeper.wait()
    out, err = capfd.readouterr()
    assert rc == 1
    assert err.splitlines() == [f"gpucontrol-daemon: error: [Errno {errno.ENOSPC}] "
                                f"{os.strerror(errno.ENOSPC)}: '{tmp_path}'"]
    assert out == ""


# ------------------------------------------------------------------------------ duration
@pytest.mark.parametrize("duration, period, periods", [("0.6", "0.2", 3), ("0.5", "0.2", 2),
                                                       ("0.1", "0.2", 0)])
def test_duration_runs_every_whole_period_it_holds(children, tmp_path, duration, period,
                                                   periods):
    """--duration-s D runs floor(D / T) periods, the last one included (0.6 s of 0.2 s
    periods used to log 2)."""
    t = children.spawn(SLEEPER)
    r = run_daemon(daemon_argv(tmp_path, "d", "--training-pid", str(t.pid),
                               "--fixed-sleep", "0", "--period-s", period,
                               "--duration-s", duration),
                   capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                   check=False)
    assert r.returncode == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["period"] for x in recs if "period" in x] == list(range(1, periods + 1))
    assert recs[-1] == {**recs[-1], "event": "stopped", "periods": periods}


# ------------------------------------------------------------------------------ signals
def test_sigint_stops_cleanly_with_status_130(children, tmp_path):
    """Ctrl-C (SIGINT): the same clean stop as SIGTERM -- the training resumed, "stopped"
    logged -- and the exit status a shell reports for it, 130 (SIGTERM stays 0)."""
    t = children.spawn(BUSY)
    d = children.popen(daemon_argv(tmp_path, "i", "--training-pid", str(t.pid),
                                   "--fixed-sleep", "1.0", "--run-quantum-s", "0.001",
                                   "--period-s", "0.2"),
                       stdout=subprocess.PIPE, text=True)
    read_events(d.stdout, "started")
    assert wait_for(lambda: stopped_pids([t.pid]) == [t.pid], timeout=5.0)
    d.send_signal(signal.SIGINT)
    assert d.wait(15) == 130
    assert json.loads(d.stdout.read().splitlines()[-1])["event"] == "stopped"
    assert wait_for(lambda: stopped_pids([t.pid]) == [], timeout=2.0)


# ------------------------------------------------------------------------------ types
@pytest.mark.parametrize("kw, message", [
    ({"training_pids": 4242}, "--training-pid"),
    ({"allowed_uids": "1000"}, "--allow-uid"),
    ({"allowed_uids": (-1,)}, "--allow-uid"),
    ({"shadow": "no"}, "--shadow must be True or False"),
    ({"green_shares": 50}, "--green-shares"),
    ({"socket": 123}, "--socket must be text"),
    ({"state": b"x"}, "--state must be text"),
    ({"mps_binary": None}, "--mps-binary must be text"),
    ({"prometheus_url": 123}, "--prometheus-url must be text"),
    ({"training_pids": (), "training_cmd": ["python", "t.py"]}, "--training-cmd must be text"),
    ({"fixed_sleep": None, "slo_ms": 90.0, "model": 123}, "--model must be text"),
])
def test_a_config_built_in_code_gets_the_flag_named_errors_too(kw, message):
    """Node software that builds a DaemonConfig directly gets one ConfigurationError naming
    the flag -- a string 'false' never means True (it used to let a root daemon pause
    another user's process)."""
    with pytest.raises(ConfigurationError) as exc:
        _cfg(**kw)
    assert str(exc.value).startswith(message), exc.value


def test_a_metrics_textfile_that_cannot_be_written_is_refused_before_the_start(tmp_path):
    for bad, why in ((tmp_path, "is a directory"),
                     (tmp_path / "missing" / "x.prom", "cannot write into its directory")):
        with pytest.raises(ConfigurationError, match=f"--metrics-textfile .*{why}"):
            _cfg(socket=str(tmp_path / "s.sock"), state=str(tmp_path / "s.json"),
                 hook=str(tmp_path / "s.hook"),
                 metrics_textfile=str(bad)).check_environment()


@pytest.mark.parametrize("extra, rc, text", [
    (["--metrics-port", "9999"], 2, "--metrics-port has no effect with --resume-only"),
    (["--period-s", "-5"], 2, "--period-s has no effect with --resume-only"),
    (["--training-cmd", "nosuchprog"], 2, "--training-cmd has no effect"),
    ([], 0, '"resumed": 0'),
])
def test_resume_only_refuses_flags_it_would_ignore(tmp_path, capsys, extra, rc, text):
    assert daemon_main(["--resume-only", "--state", str(tmp_path / "s.json"), *extra]) == rc
    out = capsys.readouterr()
    assert text in (out.err if rc else out.out)


def test_resume_only_names_the_state_flag_for_a_bad_file(tmp_path, capsys):
    assert daemon_main(["--resume-only", "--state", str(tmp_path)]) == 2
    assert f"--state {tmp_path}" in capsys.readouterr().err
