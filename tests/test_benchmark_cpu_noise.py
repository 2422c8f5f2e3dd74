"""benchmarks/cpu_noise.py with a stand-in plant: a period with no samples (a failed or late
scrape on a loaded machine reads NaN) is skipped and counted, and the script never prints
NaN (it printed ``NaN`` for the middle sleep's mean, rms and scatter, which is not JSON, and
exited 0)."""

import json
import math
import sys
from types import SimpleNamespace

import pytest


class _Plant:
    """Latency 10 ms at no sleep, 8 at the middle and 6 at the top, + 0.5 ms a period; the
    periods numbered in ``empty`` (counted over the measured ones at each sleep) have no
    samples."""

    def __init__(self, empty: dict[float, set[int]]):
        self.empty, self.n = empty, {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def step(self, act, period_s):
        s = act.sleep_s
        i = self.n[s] = self.n.get(s, -1) + 1  # the block's first period settles, unread
        if i in self.empty.get(s, ()):
            return SimpleNamespace(mean_ms=math.nan, count=0, training_iterations=3)
        ms = {0.0: 10.0, 0.5: 8.0}.get(s, 6.0) + 0.5 * i
        return SimpleNamespace(mean_ms=ms, count=30, training_iterations=3)


def _run(monkeypatch, capsys, load, empty, periods=4):
    mod = load("cpu_noise")
    monkeypatch.setattr(mod, "make_cpu_plant", lambda *a, **k: _Plant(empty))
    monkeypatch.setattr(sys, "argv", ["cpu_noise.py", "--quantum", "1", "--mid", "0.5",
                                      "--top", "1", "--periods", str(periods), "--block",
                                      str(periods), "--warmup", "0"])
    rc = mod.main()
    out, err = capsys.readouterr()

    def no_nan(c):
        raise AssertionError(f"{c} in the output")

    return rc, json.loads(out, parse_constant=no_nan), err


def test_empty_periods_are_skipped_and_counted(monkeypatch, capsys, benchmark_module):
    rc, d, err = _run(monkeypatch, capsys, benchmark_module, {0.5: {1, 3}})
    assert rc == 0 and err == ""
    assert d["empty_periods"] == [0, 2, 0] and d["periods_per_sleep"] == 4
    assert d["mean_ms"][1] is not None and d["rms_ms"][1] > 0
    assert d["scatter_mid_pct_of_mean"] > 0 and d["not_computed"] == []


@pytest.mark.parametrize("empty", [{0.5: {1, 2, 3, 4}}, {0.5: {1, 2, 3}}])
def test_a_figure_that_cannot_be_computed_is_said_and_fails(monkeypatch, capsys, empty,
                                                           benchmark_module):
    """All middle periods empty (no mean), or one usable (no rms): valid JSON with null, the
    figures named on stderr, exit status 1."""
    rc, d, err = _run(monkeypatch, capsys, benchmark_module, empty)
    assert rc == 1
    assert d["scatter_mid_pct_of_mean"] is None and d["rms_ms"][1] is None
    assert "scatter_mid_pct_of_mean" in d["not_computed"]
    assert "could not compute" in err and "scatter_mid_pct_of_mean" in err
    assert f"[0, {len(empty[0.5])}, 0]" in err


def test_one_period_per_sleep_has_no_rms(monkeypatch, capsys, benchmark_module):
    """--periods 1 --block 1: one reading per sleep, so no rms (was NaN from ddof=1)."""
    rc, d, err = _run(monkeypatch, capsys, benchmark_module, {}, periods=1)
    assert "rms_ms" in err
    assert rc == 1 and d["rms_ms"] == [None, None, None] and d["mean_ms"][1] is not None


@pytest.mark.parametrize("mid, top", [("0", "2.5"), ("1", "1"), ("2", "1")])
def test_a_sleep_given_twice_or_out_of_order_is_refused(monkeypatch, capsys, benchmark_module,
                                                        mid, top):
    """--mid 0 (the no-sleep periods pooled with the middle's), --mid equal to --top, or
    --top below --mid ran and printed figures of the wrong sleeps: now one line, status 2,
    before the plant starts."""
    mod = benchmark_module("cpu_noise")
    monkeypatch.setattr(mod, "make_cpu_plant", lambda *a, **k: pytest.fail("plant started"))
    monkeypatch.setattr(sys, "argv", ["cpu_noise.py", "--mid", mid, "--top", top])
    with pytest.raises(SystemExit) as e:
        mod.main()
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    assert err.count("\n") == 1 and "0 < --mid < --top" in err, err


@pytest.mark.parametrize("periods, block", [(2, 4), (5, 2), (8, 4)])
def test_the_periods_per_sleep_are_those_asked_for(monkeypatch, capsys, benchmark_module,
                                                   periods, block):
    """--periods 2 with the default --block 4 measured 4 periods per sleep, and --periods 5
    --block 2 six: the last block was run whole. Now it holds what is left."""
    mod = benchmark_module("cpu_noise")
    monkeypatch.setattr(mod, "make_cpu_plant", lambda *a, **k: _Plant({}))
    monkeypatch.setattr(sys, "argv", ["cpu_noise.py", "--quantum", "1", "--mid", "0.5",
                                      "--top", "1", "--periods", str(periods), "--block",
                                      str(block), "--warmup", "0"])
    assert mod.main() == 0
    assert json.loads(capsys.readouterr().out)["periods_per_sleep"] == periods
