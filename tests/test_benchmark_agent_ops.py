"""benchmarks/agent_ops.py's failure paths, with stand-ins for the daemon (a short Python
process printing what the daemon would) and the training's states."""

import json
import os
import subprocess
import sys

STARTED = "import json, time; print(json.dumps({'event': 'started'}), flush=True); time.sleep(30)"
#: A daemon that dies mid-read: its metrics address, one second, two periods, exit 3.
DIES = ("import json, time\n"
        "print(json.dumps({'event': 'metrics', 'url': 'http://127.0.0.1:9/metrics'}), "
        "flush=True)\n"
        "time.sleep(1)\n"
        "for i in range(2): print(json.dumps({'period': i, 'stopped_fraction': 0.5}), "
        "flush=True)\n"
        "raise SystemExit(3)\n")


def _stand_in(monkeypatch, mod, script):
    monkeypatch.setattr(mod, "_daemon", lambda tmp, name, *args: subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL, text=True, start_new_session=True))


def test_no_stall_timed_is_null_and_said(monkeypatch, benchmark_module):
    """The loop never ran again within 60 s of the SIGSTOP at any trial: statistics.median
    of nothing raised; now the figures are null and not_measured says why."""
    mod = benchmark_module("agent_ops")
    _stand_in(monkeypatch, mod, STARTED)
    monkeypatch.setattr(mod, "_state", lambda pid: "T")
    monkeypatch.setattr(mod, "_wait_state", lambda pid, want, timeout: want == {"T"})
    r = mod.stall("/nowhere", os.getpid(), 2.0, None, 1)
    assert r["n"] == 0 and r["p50_s"] is None and r["max_periods"] is None
    assert r["not_measured"] == ("1 of 1 stalls not timed: the loop did not run again within "
                                 "60 s of the SIGSTOP (1x)")


def test_a_daemon_that_dies_mid_read_is_said(monkeypatch, benchmark_module):
    """The daemon exited after two periods: json.loads('') raised; now the achieved fraction
    is null and not_measured says how many periods it reported and its status."""
    mod = benchmark_module("agent_ops")
    _stand_in(monkeypatch, mod, DIES)
    r = mod.idle_connections("/nowhere", os.getpid(), 0)
    assert r["achieved_mean"] is None and r["daemon_threads"] == 1
    assert r["not_measured"] == ("no stopped fraction: the daemon reported 2 periods, then "
                                 "exited with status 3")


def test_a_case_not_measured_is_one_line_and_status_1(monkeypatch, capsys, benchmark_module):
    """The JSON is printed whole (the other cases stand), each case not measured is one line
    on stderr, and the exit status is 1."""
    mod = benchmark_module("agent_ops")
    monkeypatch.setattr(mod, "stall", lambda tmp, train, period, timeout, n: {
        "period_s": period, "n": 1, "p50_s": 0.1})
    monkeypatch.setattr(mod, "idle_connections", lambda tmp, train, n: {
        "connections": n, "achieved_mean": None if n else 0.5,
        **({"not_measured": "the daemon exited"} if n else {})})
    monkeypatch.setattr(sys, "argv", ["agent_ops.py", "--stalls", "1", "--connections", "3"])
    assert mod.main() == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["idle"][1]["achieved_mean"] is None
    assert err == "agent_ops.py: idle, 3 connections: the daemon exited\n"
