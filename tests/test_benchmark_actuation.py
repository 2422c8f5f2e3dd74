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


class _Clock:
    """A stand-in for the ``time`` module: each reading advances 0.1 ms, a sleep its length."""

    def __init__(self):
        self.t = 0.0

    def monotonic(self):
        self.t += 1e-4
        return self.t

    def sleep(self, dt):
        self.t += dt


class _Procs:
    class _P:
        pid = 1

        def terminate(self):
            pass

        def wait(self, timeout=None):
            return 0

    def spawn(self, argv, **kw):
        return self._P()

    def cleanup(self):
        pass


def _duty(monkeypatch, mod, stopped, sleep, window):
    clock = _Clock()
    monkeypatch.setattr(mod, "time", clock)
    monkeypatch.setattr(mod, "wait_started", lambda p: None)
    monkeypatch.setattr(mod, "stop_requested", lambda pid: stopped(clock.t))
    return mod.duty_case(_Procs(), "/nowhere", 0.1, sleep, window)


def test_a_duty_case_measures_at_least_ten_whole_cycles(monkeypatch, benchmark_module):
    """The heading said windows of >= 10 cycles; a window of 10 cycles' length holds 9 whole
    ones (pause end to pause end), which is what was measured: now the window runs on until
    10 are seen."""
    mod = benchmark_module("actuation")
    for sleep in (0.3, 0.9):
        cycle = 0.1 + sleep
        achieved, cycles = _duty(monkeypatch, mod, lambda t, c=cycle, s=sleep: (t + 0.05) % c < s,
                                 sleep, 10 * cycle)
        assert cycles >= 10
        assert abs(achieved - sleep / cycle) < 0.01


def test_a_duty_case_without_a_whole_cycle_is_none(monkeypatch, benchmark_module):
    """No pause end seen (a daemon that never paused, or one pause): an IndexError (or a
    division by zero) was raised; now None, and the run's report says n/a."""
    mod = benchmark_module("actuation")
    assert _duty(monkeypatch, mod, lambda t: False, 0.3, 1.0) is None
    assert _duty(monkeypatch, mod, lambda t: 0.3 < t < 0.6, 0.3, 1.0) is None


def test_a_duty_case_not_measured_is_an_na_row(monkeypatch, capsys, benchmark_module):
    """The other rows and tables stand; the case is n/a in its row, said in one line on
    stderr, and the exit status is 1."""
    mod = benchmark_module("actuation")
    times = {k: [0.001] for k in ("pause", "pause_confirmed", "resume", "resume_confirmed")}
    monkeypatch.setattr(mod, "signal_latency", lambda procs, cycles, tree: times)
    monkeypatch.setattr(mod, "freezer_latency", lambda procs, cycles: times)
    monkeypatch.setattr(mod, "duty_case", lambda procs, tmp, q, sleep, window:
                        None if sleep == 0.3 else (0.5, 10))
    monkeypatch.setattr(mod, "fault_trials", lambda procs, tmp, kind, n: [0.01])
    monkeypatch.setattr(sys, "argv", ["actuation.py", "--cycles", "1", "--kills", "1"])
    assert mod.main() == 1
    out, err = capsys.readouterr()
    assert "| 0.3 | 0.750 | n/a | n/a | 0 (no whole cycle seen) |" in out.splitlines()
    assert "| 0.9 | 0.900 | 0.500 | -0.400 | 10 |" in out.splitlines()
    assert out.count("| sigkill | 1 |") == 1
    assert err == ("actuation.py: no duty cycle measured at sleep 0.3 s: not one whole cycle "
                   "(pause end to pause end) was seen\n")
