"""The CPU demo's identification on a machine too busy to show the sleep's effect: one more
try with twice the periods, then one line that says what happened and what to try, exit
status 1, nothing half-written (the previous results stay), the plant closed. A scripted
plant stands in for the CPU plant (instant periods, no processes)."""

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest

from harness.cli import main
from harness.experiments import pipeline
from harness.experiments.plants import PLANTS, ExperimentFailed
from harness.sim.protocol import PeriodResult

CLOSED = []


class ScriptedPlant:
    """Latency 10 ms + noise, falling 100 ms per s of sleep from period ``answers_from`` on
    (never, by default: the machine's other load hides the knob)."""

    def __init__(self, preset="default", *, seed=0, answers_from=math.inf, **_):
        self.rng = np.random.default_rng(seed)
        self.answers_from = answers_from
        self.k = 0
        self.config = SimpleNamespace(run_quantum_s=0.03, backend="scripted")
        self.inference_pid = self.training_pid = os.getpid()

    def step(self, actuation, period_s):
        self.k += 1
        gain = -100.0 if self.k >= self.answers_from else 0.0
        y = 10.0 + gain * actuation.sleep_s + self.rng.normal(0.0, 0.5)
        return PeriodResult(mean_ms=y, p99_ms=1.5 * y, count=30, t_end_s=self.k * period_s,
                            period_s=period_s, sleep_s=actuation.sleep_s, mps_pct=100.0)

    def close(self):
        CLOSED.append(self)


def make_scripted(preset, *, seed=0, **kw):
    return ScriptedPlant(preset, seed=seed, **kw)


@pytest.fixture
def scripted_cpu(monkeypatch):
    monkeypatch.setitem(PLANTS, "cpu", f"{__name__}:make_scripted")
    CLOSED.clear()
    return CLOSED


def test_a_second_identification_with_twice_the_periods_is_the_one_used(tmp_path):
    """The first record shows no gain; the second (48 periods) does: it writes the model,
    and the periods it recorded (not the first try's) are the ones returned."""
    plant = ScriptedPlant(answers_from=10 + 24 + 1)  # warm-up 10, first try 24, retry warm-up
    rec = pipeline._Recorder(plant)
    said = []
    ident, first = pipeline._identify_or_fail(
        rec, tmp_path, said.append, periods=24, warmup=10, period_s=1.0,
        sleep_range=(0.0, 0.03), excitation="prbs", seed=0)
    assert len(rec.results) == 10 + 24 + pipeline.RETRY_WARMUP + 48
    assert first == 10 + 24 + pipeline.RETRY_WARMUP
    assert (tmp_path / "identify" / "model.json") in ident.files
    assert ident.summary[0]["gain"] == pytest.approx(-100.0, rel=0.2)
    assert len(said) == 1 and "identifying again with 48 periods" in said[0]


def test_no_gain_twice_is_one_line_exit_1_and_the_previous_results_stay(
        tmp_path, scripted_cpu, capsys):
    out = tmp_path / "out"
    previous = out / "cpu_demo" / "summary.json"
    previous.parent.mkdir(parents=True)
    previous.write_text("{}\n")
    rc = main(["demo", "--plant", "cpu", "--period", "0.1", "--duration", "2", "--out",
               str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert line.startswith("gpucontrol demo: the identification found no significant gain "
                           "twice (gain "), line
    assert "over 24 periods; then gain" in line and "over 48 periods" in line
    assert "load average" in line and "try again when the machine is quieter" in line
    assert "--period 0.2" in line
    assert f"{out / 'cpu_demo'} not updated" in line  # where the partial output is
    assert previous.read_text() == "{}\n"  # nothing half-written over the previous set
    assert sorted(p.name for p in (out / "cpu_demo").iterdir()) == ["summary.json"]
    assert len(scripted_cpu) == 1  # the plant was closed


@pytest.mark.parametrize("warmup_s", [-1.0, 1e9, True, "8"])
def test_a_bad_warmup_is_refused_before_anything_starts(tmp_path, scripted_cpu, warmup_s):
    with pytest.raises(ValueError, match="warmup_s must be in"):
        pipeline.run_pipeline(tmp_path, warmup_s=warmup_s, progress=False)
    assert scripted_cpu == []  # no plant was made


def test_the_failure_is_an_experiment_failure_not_a_bug(tmp_path, scripted_cpu):
    with pytest.raises(ExperimentFailed, match="no significant gain twice"):
        pipeline.run_pipeline(tmp_path, period_s=0.1, identify_periods=12, closed_periods=2,
                              progress=False)
    assert not (tmp_path / "cpu_demo").exists() and len(scripted_cpu) == 1
