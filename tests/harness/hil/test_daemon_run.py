"""The node agent through a burst on the GPU (harness.hil.daemon_run) and the H100 campaign
steps: the plan, the daemon's command per mode, and a short sleep-only run on the CPU with the
real daemon, the NumPy emulator and the synthetic inference."""

import json
import math
import shlex
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from harness.hil.campaign import H100_SLO_MS, STEPS
from harness.hil.daemon_run import MODES, _Run, main, plan, summarize

HERE = Path(__file__).resolve().parent


def _fits(names, deadline=570.0, grace=30.0):
    """The campaign runner's rule: a step starts when its time + 45 s fits in what is left."""
    used = 0.0
    for n in names:
        if deadline - used - (grace + 15.0) < STEPS[n].expected_s:
            return False
        used += STEPS[n].expected_s
    return used <= 8.5 * 60


def test_h100_steps_fit_one_call_each_and_share_one_slo():
    for name in ("identify-green", "burst-daemon", "sweep-h100", "tests-fast", "tests-slow"):
        s = STEPS[name]
        assert s.expected_s <= 480 and s.timeout_s <= 570, (name, s)  # <= 8 minutes each
    # the three calls of docs/gpu.md, each one command
    for call in (["info", "burst-daemon"], ["info", "identify-green", "tests-fast"],
                 ["info", "sweep-h100", "tests-slow"]):
        assert _fits(call), call
    argv = STEPS["burst-daemon"].commands[0].argv
    assert argv[argv.index("--slo-ms") + 1] == f"{H100_SLO_MS:g}"
    assert f"{H100_SLO_MS:g}" in STEPS["sweep-h100"].commands[0].argv[
        STEPS["sweep-h100"].commands[0].argv.index("--slos") + 1]
    ident = STEPS["identify-green"].commands[0].argv
    assert ident[ident.index("--plant") + 1] == "gpu-green"
    assert ident[ident.index("--mps") + 1] == "25,50,75,100"
    runs = plan(["sleep", "mps-restart", "green-mps"], 100, 4)
    assert runs["expected_s"] <= STEPS["burst-daemon"].expected_s
    with pytest.raises(ValueError, match="modes"):
        plan(["mig"], 100, 4)


def test_daemon_command_per_mode(tmp_path):
    args = Namespace(slo_ms=35.0, period=4.0, duration=100.0, training="emulator",
                     training_backend=None, training_extra="", outer_every={})
    cmds = {m: _Run(m, args, tmp_path / "model.json", tmp_path).daemon_argv("/p")
            for m in ("sleep", "sleep-plain", "mps-restart", "green-mps")}
    assert cmds["sleep"][-2:] == ["--outer", "none"]
    assert cmds["sleep-plain"][-2:] == ["--share-backend", "none"]   # no MPS for the training
    from gpucontrol.node.cli import build_parser
    from gpucontrol.node.config import DaemonConfig

    for m, argv in cmds.items():     # each a command line the daemon accepts, all settings
        cfg = DaemonConfig.from_args(build_parser().parse_args(argv[3:]))   # checked
        assert cfg.closed_loop and cfg.slo_ms == 35.0, m
    assert cfg.share_backend == "green-context"
    assert plan(["sleep-plain"], 100, 4)["runs"][0]["outer_every"] == 0
    assert "sleep-plain" not in MODES            # run only when named: not in the default trio
    mps = cmds["mps-restart"]
    assert mps[mps.index("--outer-every") + 1] == "12" and "--shadow" in mps
    assert mps[mps.index("--mps-pipe-dir") + 1] == "/p"
    green = cmds["green-mps"]
    assert green[green.index("--outer-every") + 1] == "1"
    assert green[green.index("--share-backend") + 1] == "green-context"
    train = shlex.split(green[green.index("--training-cmd") + 1])
    assert train[train.index("--backend") + 1] == "cupy-green" and "--green-shares" in train


def test_summary_counts_periods_over_and_compares_with_sleep():
    rows = [{"mode": m, "latency_ms": lat, "training_iterations": it}
            for m, lat, it in [("sleep", 30, 4)] * 5 + [("green-mps", 37, 8)] * 2
            + [("green-mps", 30, 8)] * 3]
    s = {r["mode"]: r for r in summarize(rows, 35.0, 4.0, warmup=0)}
    assert s["sleep"]["over_105_pct"] == 0 and s["green-mps"]["over_105_pct"] == 40
    assert s["green-mps"]["training_vs_sleep"] == pytest.approx(2.0)
    assert s["sleep"]["training_it_s"] == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.parametrize("mode", ["sleep", "sleep-plain"])
def test_sleep_only_run_with_the_real_daemon_on_the_cpu(mode, tmp_path):
    out = tmp_path / "out"
    # a model of the fake plant (20 + 40 x the training's duty, ms): the fig8 preset's
    # predicts at least 59 ms, and the daemon refuses an SLO its model says nothing meets
    model = tmp_path / "fake_plant.json"
    model.write_text(json.dumps({"gain": -40.0, "offset": 60.0}))
    rc = main(["--out", str(out), "--modes", mode, "--duration", "6", "--period", "0.5",
               "--burst", "2,4", "--slo-ms", "25", "--preset", "fig8", "--model", str(model),
               "--training-backend", "numpy", "--no-mps",
               "--training-extra", "--matrix-n 256 --copy-mb 0.25",
               "--inference-cmd", f"{sys.executable} {HERE / 'fake_inference.py'}"])
    err = (out / "runs" / mode / "daemon.stderr").read_text()
    assert rc == 0, err[-3000:]
    log = [json.loads(x) for x in (out / "runs" / mode / "daemon.jsonl").read_text()
           .splitlines() if x.startswith("{")]
    rows = [r for r in log if "period" in r and "event" not in r]
    assert len(rows) >= 8
    summary = (out / "summary.md").read_text()
    assert f"| {mode} |" in summary
    chosen = next(r for r in log if r.get("event") == "share_backend")
    if mode == "sleep-plain":     # no share knob, no MPS: said so, and the loop still runs
        assert chosen["backend"] is None and "--share-backend none" in chosen["reason"]
        assert not any(r.get("event") == "mps_ready" for r in log)
        assert all(r["share_pct"] == 100.0 for r in rows)
    from harness.results import read_csv

    periods = read_csv(out / "periods.csv")
    assert sum(r["training_iterations"] for r in periods) > 1  # the training ran, and slept:
    # the sleep applied during each period: unknown in the first, the previous record's after
    assert math.isnan(periods[0]["sleep_s"])
    assert [r["sleep_s"] for r in periods[1:]] == pytest.approx([r["sleep_s"] for r in rows[:-1]])
    assert max(r["sleep_s"] for r in periods[1:]) > 0  # the SLO is below its unslept latency
    assert any(r["burst"] for r in periods) and not periods[0]["burst"]


@pytest.mark.parametrize("backend", ["sleep", "mps-restart", "green-context+mps"])
def test_the_presets_model_has_both_curves(backend, tmp_path):
    """The model a run writes by default: per level the line and the iteration time, which
    the daemon's controller takes as identified (an H200 run with the lines alone read them
    at an assumed 0.5 s while the training ran at 0.2 s)."""
    from gpucontrol.node.model_file import load_model
    from harness.hil.daemon_run import model_from_preset

    doc = model_from_preset("h100", [25, 50, 75, 100], (0.0, 0.4), backend)
    assert [p["mps_pct"] for p in doc["points"]] == [25.0, 50.0, 75.0, 100.0]
    assert all(p["gain"] < 0 and p["iteration_s"] > 0 for p in doc["points"])
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    fam = load_model(str(path))
    assert fam.timed_pct() == (25.0, 50.0, 75.0, 100.0)
    times = [p["iteration_s"] for p in doc["points"]]
    assert times == sorted(times, reverse=True)       # never slower on more of the GPU


def test_runs_made_one_mode_at_a_time_compare_side_by_side(tmp_path, capsys):
    """``--from LABEL=RUNDIR`` re-reads runs made before (here the H200's, one mode per run)
    into one table: each label's row is what its own run's summary said; nothing is run."""
    from harness.results import read_csv

    root = HERE.parents[2] / "docs" / "results" / "h200" / "after_fixes"
    runs = {"sleep": root / "daemon_slo22_sleep", "green": root / "daemon_slo22_green-mps"}
    out = tmp_path / "cmp"
    argv = ["--out", str(out), "--slo-ms", "22"]
    for label, run in runs.items():
        argv += ["--from", f"{label}={run / 'runs' / next((run / 'runs').iterdir()).name}"]
    assert main(argv) == 0
    got = {r["mode"]: r for r in read_csv(out / "summary.csv")}
    for label, run in runs.items():
        alone = read_csv(run / "summary.csv")[0]
        for col in ("periods", "latency_ms", "over_105_pct", "training_it_s"):
            assert got[label][col] == pytest.approx(alone[col]), (label, col)
    assert got["green"]["training_vs_sleep"] == pytest.approx(
        got["green"]["training_it_s"] / got["sleep"]["training_it_s"])
    assert {r["mode"] for r in read_csv(out / "periods.csv")} == set(runs)
    command = (out / "COMMAND.txt").read_text()
    assert (out / "daemon_run.png").stat().st_size > 0 and "--from" in command
    # the interpreter that ran it, as a run's meta.json names it: the line runs as written
    assert shlex.split(command)[:3] == [sys.executable, "-m", "harness.hil.daemon_run"]
    assert main(["--out", str(out), "--from", f"x={tmp_path}"]) == 2   # no daemon.jsonl there
    assert "LABEL=RUNDIR" in capsys.readouterr().err
