"""benchmarks/actuation.py's report, with stand-ins for the measurements."""

import sys


def test_a_missing_cgroup_is_said_in_the_latency_table(monkeypatch, capsys, benchmark_module):
    """Where no cgroup v2 group is writable, the freezer's row was printed above the report's
    headings, before the latency table it belongs to."""
    mod = benchmark_module("actuation")
    times = {k: [0.001] for k in ("pause", "pause_confirmed", "resume", "resume_confirmed")}
    monkeypatch.setattr(mod, "signal_latency", lambda procs, cycles, tree: times)
    monkeypatch.setattr(mod, "freezer_latency", lambda procs, cycles: None)
    monkeypatch.setattr(mod, "duty_case", lambda procs, tmp, q, sleep, window: (0.5, 10))
    monkeypatch.setattr(mod, "fault_trials", lambda procs, tmp, kind, n: [0.01])
    monkeypatch.setattr(sys, "argv", ["actuation.py", "--cycles", "1", "--kills", "1"])
    mod.main()
    lines = capsys.readouterr().out.splitlines()
    heading = lines.index("## Pause/resume latency (ms), goal p99 < 1 ms")
    row = next(i for i, ln in enumerate(lines) if "no writable cgroup v2 group here" in ln)
    assert lines[row].startswith("| cgroup v2 freezer, group of 8 busy processes |")
    assert heading < row < next(i for i, ln in enumerate(lines) if ln.startswith("## Duty"))
