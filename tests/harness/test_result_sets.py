"""An experiment's files are one set: a run replaces the previous run's set as a whole, and
a run stopped part-way (an error, Ctrl-C, SIGKILL) leaves the previous complete set as it
was and says where its partial output is (harness.results.result_set)."""

import importlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["sweep", "--duration", "8", "--period", "4", "--slos", "85", "--controllers",
         "oracle", "--warmup", "0", "--no-progress"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if ".partial-" in p.name or ".old-" in p.name or p.name.endswith(".tmp"))


def test_identify_without_a_model_removes_the_previous_runs_model(tmp_path, capsys):
    """The second run finds no significantly negative gain: it writes no model.json, and the
    first run's (which the daemon would read as this run's) is gone, and it says so."""
    assert main(["identify", "--out", str(tmp_path), "--periods", "10", "--mps", "100",
                 "--no-progress"]) == 0
    assert (tmp_path / "identify" / "model.json").exists()
    capsys.readouterr()
    assert main(["identify", "--out", str(tmp_path), "--mps", "20", "--sleep", "0.6,0.7",
                 "--periods", "10", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert not (tmp_path / "identify" / "model.json").exists()
    assert "no model.json written" in err and "previous run's" in err
    assert _leftovers(tmp_path) == []


def test_an_interrupted_sweep_leaves_the_previous_complete_set_and_says_where(
        tmp_path, monkeypatch, capsys):
    """Ctrl-C while the figure is drawn (four files already written): the folder still
    holds the first run's five files, byte for byte; the one line says where the new ones
    are."""
    slo_sweep = importlib.import_module("harness.experiments.slo_sweep")

    assert main([*SWEEP, "--out", str(tmp_path)]) == 0
    before = _snapshot(tmp_path / "slo_sweep")
    assert len(before) == 5
    capsys.readouterr()

    def interrupted(res, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(slo_sweep, "plot_sweep", interrupted)
    assert main([*SWEEP, "--seed", "1", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert _snapshot(tmp_path / "slo_sweep") == before
    [partial] = tmp_path.glob(".slo_sweep.partial-*")
    assert sorted(p.name for p in partial.iterdir()) == [
        "slo_sweep.csv", "slo_sweep_meta.json", "slo_sweep_summary.csv",
        "slo_sweep_summary.md"]
    assert err[-1] == (f"gpucontrol sweep: interrupted; {tmp_path}/slo_sweep not updated "
                       f"({tmp_path}/slo_sweep still holds the previous complete run): the "
                       f"stopped run's partial output is in {partial} (the next run into "
                       f"{tmp_path}/slo_sweep removes it)")


def test_an_interrupt_before_any_file_says_nothing_was_written(tmp_path, monkeypatch,
                                                               capsys):
    results = importlib.import_module("harness.results")

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(results, "write_csv", interrupted)  # the set's first file
    assert main([*SWEEP, "--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"gpucontrol sweep: interrupted; nothing written to {tmp_path}/slo_sweep")
    assert list(tmp_path.iterdir()) == []


KILLED = textwrap.dedent("""
    import os, signal, sys
    from harness.cli import main
    real, n = os.fdopen, [0]

    def fdopen(fd, *a, **kw):  # SIGKILL half-way through the Nth file
        f = real(fd, *a, **kw)
        n[0] += 1
        if n[0] == int(sys.argv[1]):
            f.write(b"half"); f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return f

    os.fdopen = fdopen
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.parametrize("nth", [1, 5], ids=["first-file", "figure"])
def test_a_killed_sweep_leaves_the_previous_set_and_the_next_run_cleans_up(tmp_path, nth):
    """SIGKILL in the middle of writing a file: the previous complete set is untouched (no
    new CSV beside the old figure); the killed run's staging folder and its half-written
    temporary file are removed by the next run, which replaces the set."""
    assert main([*SWEEP, "--out", str(tmp_path)]) == 0
    before = _snapshot(tmp_path / "slo_sweep")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", KILLED, str(nth), *SWEEP, "--seed", "1",
                           "--out", str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _snapshot(tmp_path / "slo_sweep") == before
    left = _leftovers(tmp_path)
    assert any(x.endswith(".tmp") for x in left) and \
        any(x.startswith(".slo_sweep.partial-") for x in left), left
    assert main([*SWEEP, "--seed", "2", "--out", str(tmp_path)]) == 0
    assert _leftovers(tmp_path) == []
    after = _snapshot(tmp_path / "slo_sweep")
    assert sorted(after) == sorted(before) and after != before


def test_a_cluster_run_replaces_the_previous_runs_files_and_keeps_others(tmp_path, capsys):
    """Without --ratios, the first run's ratio.csv and fig13b_ratio.png are gone (they would
    sit beside the second run's summary with nothing to tell them apart); a file that is not
    the cluster's stays."""
    base = ["cluster", "--trace", "synthetic", "--days", "2", "--scale", "20", "--no-burst",
            "--out", str(tmp_path), "--no-progress"]
    (tmp_path / "notes.txt").write_text("mine")
    assert main([*base, "--ratios", "1,2", "--policy", "gslice,gpucolo"]) == 0
    assert (tmp_path / "ratio.csv").exists() and (tmp_path / "fig13b_ratio.png").exists()
    assert main([*base, "--policy", "gpucolo"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "daily.csv", "fig12_gpus.png", "fig13a_violation.png", "notes.txt", "summary.csv"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_python_api_writes_a_set_too(tmp_path):
    """slo_sweep(out_dir=...) outside the command line: a failure while writing leaves the
    previous files; the next run replaces them as a whole."""
    mod = importlib.import_module("harness.experiments.slo_sweep")

    kw = {"slos": [85], "duration_s": 8, "period_s": 4, "warmup_s": 0,
          "controllers": ["Oracle"], "out_dir": tmp_path / "s"}
    mod.slo_sweep(**kw)
    before = _snapshot(tmp_path / "s")
    real = mod.plot_sweep
    mod.plot_sweep = lambda res, path: (_ for _ in ()).throw(RuntimeError("plot failed"))
    try:
        with pytest.raises(RuntimeError, match="plot failed") as info:
            mod.slo_sweep(seed=3, **kw)
    finally:
        mod.plot_sweep = real
    assert _snapshot(tmp_path / "s") == before
    from harness.results import result_note

    assert "partial output is in" in (result_note(info.value) or "")


def test_the_pipeline_uses_only_a_model_this_run_wrote(tmp_path, monkeypatch):
    """A model.json left by an earlier run is never taken for this run's: identification
    that writes none stops the pipeline, and the earlier complete run stays as it was."""
    from types import SimpleNamespace

    pipeline = importlib.import_module("harness.experiments.pipeline")

    old = tmp_path / "cpu_demo"
    (old / "identify").mkdir(parents=True)
    (old / "identify" / "model.json").write_text('{"gain": -10.0, "offset": 50.0}\n')
    (old / "summary.json").write_text("{}\n")
    before = _snapshot(old)

    plant = SimpleNamespace(config=SimpleNamespace(run_quantum_s=0.1), inference_pid=None,
                            training_pid=None, close=lambda: None)
    monkeypatch.setattr(pipeline, "make_plant", lambda *a, **kw: plant)
    monkeypatch.setattr(pipeline, "descendants", lambda pids: [])
    monkeypatch.setattr(pipeline, "identify", lambda **kw: SimpleNamespace(
        summary=[{"gain": 0.5, "r2": 0.1}], files=[]))
    with pytest.raises(RuntimeError, match="no model"):
        pipeline.run_pipeline(tmp_path, closed_periods=1, progress=False)
    assert _snapshot(old) == before


@pytest.mark.parametrize("kwargs, error, text", [
    ({"slos": "85"}, TypeError, "slos must be a sequence of numbers, got '85'"),
    ({"slos": [85, 85]}, ValueError, "slos: 85 given more than once"),
    ({"slos": [85, 20000]}, ValueError, r"slos must be in \(0, 10000\]"),
], ids=["text", "twice", "range"])
def test_slo_sweep_takes_the_slos_the_command_line_takes(kwargs, error, text):
    from harness.experiments.slo_sweep import slo_sweep

    with pytest.raises(error, match=text):
        slo_sweep(duration_s=8, period_s=4, warmup_s=0, progress=False, **kwargs)


@pytest.mark.parametrize("kwargs, text", [
    ({"mps_levels": (80, 80)}, "mps_levels: 80 given more than once"),
    ({"mps_levels": (0.5, 80)}, r"mps_levels must be in \[1, 100\]"),
    ({"train_fraction": 1.0}, r"train_fraction must be a number in \(0, 1\)"),
    ({"train_fraction": 0.9, "periods": 10},
     "train_fraction 0.9 of periods 10 leaves 9 periods to fit and 1 to hold out"),
], ids=["twice", "range", "fraction", "split"])
def test_identify_takes_what_the_command_line_takes_and_names_its_parameter(kwargs, text,
                                                                             tmp_path):
    from harness.experiments.identify import identify

    with pytest.raises(ValueError, match=text):
        identify(out_dir=tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []  # refused before anything runs


def test_the_command_line_split_message_names_the_flags(tmp_path, capsys):
    assert main(["identify", "--train", "0.9", "--periods", "10", "--out", str(tmp_path)]) == 2
    assert ("--train 0.9 of --periods 10 leaves 9 periods to fit and 1 to hold out; each "
            "needs at least 3") in capsys.readouterr().err
