"""benchmarks/cpu_plant.py's parts that run without the plant."""

from typing import ClassVar

import pytest


class _Share:
    """A stand-in CpuShare: each change takes 1 ms and is counted."""

    backend, granularity_pct, min_share_pct, period_us = "stand-in", 1.0, 1.0, 100_000
    made: ClassVar[list["_Share"]] = []

    def __init__(self, pids, name):
        self.set: list[float] = []
        _Share.made.append(self)

    def set_share_pct(self, pct):
        self.set.append(pct)
        return 0.001

    def close(self):
        pass


@pytest.mark.parametrize("n", [1, 3, 10])
def test_share_resizes_makes_the_changes_asked_for(monkeypatch, benchmark_module, n):
    """--resizes 1 to 3 died with an IndexError (no change made, a percentile of none) and
    --resizes 10 made 8: the changes were whole cycles of four."""
    mod = benchmark_module("cpu_plant")
    monkeypatch.setattr(mod, "CpuShare", _Share)
    _Share.made.clear()
    r = mod.share_resizes(n)
    assert r["resizes"] == n == len(_Share.made[0].set)
    assert r["median_us"] == r["p99_us"] == 1000.0


def test_a_failed_identification_is_one_line_and_status_1(monkeypatch, capsys,
                                                          benchmark_module, tmp_path):
    """The pipeline's ExperimentFailed (a plant too disturbed to identify, on a loaded
    machine) ended the script in a traceback; now one line, as ``gpucontrol demo`` says it,
    with where the partial output is, and status 1."""
    import sys

    from harness.experiments.plants import ExperimentFailed

    mod = benchmark_module("cpu_plant")
    monkeypatch.setattr(mod, "share_resizes", lambda n: {"backend": None})

    def failing(out, **kw):
        exc = ExperimentFailed("the identification found no significant gain twice")
        monkeypatch.setattr(mod, "result_note", lambda e: "x not updated" if e is exc else None,
                            raising=False)
        raise exc

    monkeypatch.setattr(mod, "run_pipeline", failing)
    monkeypatch.setattr(sys, "argv", ["cpu_plant.py", "--out", str(tmp_path)])
    assert mod.main() == 1
    err = capsys.readouterr().err
    assert err == ("cpu_plant.py: run 0: the identification found no significant gain twice; "
                   "x not updated\n")


@pytest.mark.parametrize("served", [[], [10.0]])
def test_the_floor_of_too_few_periods_is_null_not_nan(monkeypatch, benchmark_module, served):
    """--floor 1 (one period: no rms) or a floor whose periods served no batch printed NaN,
    which is not JSON, with numpy's warnings; now null."""
    import json
    from types import SimpleNamespace

    mod = benchmark_module("cpu_plant")
    means = iter(served)

    class Plant:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def step(self, act, period_s):
            ms = next(means, None)
            return SimpleNamespace(count=0 if ms is None else 30, mean_ms=ms)

    monkeypatch.setattr(mod, "make_cpu_plant", lambda *a, **k: Plant())
    monkeypatch.setattr(mod.time, "monotonic", iter([0.0] + [1e9] * 9).__next__)  # no warm-up
    fl = mod.fixed_sleep_floor(0.2, 1, 1.0, "numpy")
    json.dumps(fl, allow_nan=False)
    assert fl["rms_pct"] is None and fl["periods"] == len(served)
