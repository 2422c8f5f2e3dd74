"""The ``gpucontrol demo | knobs | burst | sweep`` subcommands (short durations)."""

import sys
from pathlib import Path

import pytest

from harness.cli import COMMAND_MODULES, build_parser, main


def test_commands_are_registered():
    assert "harness.cli.experiments" in COMMAND_MODULES
    sub = build_parser()._subparsers._group_actions[0].choices
    assert {"demo", "knobs", "burst", "sweep"} <= set(sub)


def test_demo_runs(tmp_path, capsys):
    assert main(["demo", "--duration", "40", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "GPUColo mid-range + adaptive" in out and "training vs Oracle" in out
    assert (tmp_path / "burst" / "burst_summary.md").exists()


def test_knobs_runs(tmp_path, capsys):
    assert main(["knobs", "--duration", "30", "--change", "10,20", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    assert "Sleep+MPS" in capsys.readouterr().out
    assert (tmp_path / "knobs" / "knobs.png").exists()


def test_burst_runs_with_options(tmp_path, capsys):
    assert main(["burst", "--duration", "48", "--burst", "16,32", "--batch", "105,115",
                 "--slo", "92", "--controllers", "two-tier,oracle", "--out", str(tmp_path),
                 "--no-progress", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "GPUColo two-tier" in out and "GSLICE" not in out.split("\n", 2)[2]


def test_sweep_runs(tmp_path, capsys):
    assert main(["sweep", "--duration", "60", "--warmup", "20", "--slos", "85,90",
                 "--controllers", "two-tier", "--out", str(tmp_path), "--no-progress"]) == 0
    assert "85.00" in capsys.readouterr().out


def _rc(argv):
    """Exit status of ``gpucontrol ARGV`` (argparse errors exit through SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_bad_arguments_are_reported(capsys):
    assert _rc(["burst", "--burst", "10"]) == 2
    assert _rc(["burst", "--controllers", "pid", "--duration", "8", "--no-progress"]) == 2
    assert "unknown controller" in capsys.readouterr().err


# argv, text the one-line message must hold (the field and its allowed range)
BAD = [
    (["burst", "--period", "0"], "--period: must be in [0.1, 60] s, got 0"),
    (["burst", "--period", "1000"], "--period: must be in [0.1, 60] s"),
    (["burst", "--period", "-4"], "--period: must be in [0.1, 60] s, got -4"),
    (["demo", "--duration", "30"], "--duration 30 s is not a whole number of 4 s periods"),
    (["demo", "--slo", "50"], "--slo 50: the demo on the sim plant runs the Fig 8 burst at its "
                              "SLO of 90 ms; --slo is for --plant cpu"),
    (["demo", "--plant", "cpu", "--duration", "3", "--period", "4"],
     "--duration 3 s with --plant cpu (its closed-loop phase) is 0.75 periods of 4 s; it needs "
     "at least 20 (--duration >= 80 s, a whole number of periods)"),
    # the durations a message suggests are ones the command takes (10 s used to suggest 8
    # or 12, both then refused)
    (["demo", "--plant", "cpu", "--duration", "10"],
     "--duration 10 s with --plant cpu (its closed-loop phase) is 2.5 periods of 4 s; it needs "
     "at least 20 (--duration >= 80 s"),
    (["demo", "--plant", "cpu", "--duration", "90"],
     "--duration 90 s is not a whole number of 4 s periods; use 88 or 92"),
    (["demo", "--plant", "cpu", "--duration", "10", "--period", "1"],
     "--duration 10 s with --plant cpu (its closed-loop phase) is 10 periods of 1 s; it needs at "
     "least 20 (--duration >= 20 s"),
    (["demo", "--plant", "cpu", "--preset", "fig4"],
     "--preset 'fig4': the CPU plant's preset must be default or small (fig8 means default)"),
    (["burst", "--batch", "-5,10"], "--batch: both values must be in [1, 4096], got '-5,10'"),
    (["burst", "--burst", "-10,20"], "--burst: both values must be in [0, inf], got '-10,20'"),
    (["burst", "--duration", "0"], "--duration: must be in (0, 86400] s"),
    (["burst", "--duration", "1e9"], "--duration: must be in (0, 86400] s"),
    (["burst", "--duration", "nan"], "--duration: must be in (0, 86400] s"),
    (["burst", "--seed", "-1"], "--seed: must be in [0, 4294967295], got -1"),
    (["burst", "--controllers", ""], "--controllers: expected at least one controller"),
    (["burst", "--slo", "0"], "--slo: must be in (0, 10000] ms"),
    (["burst", "--slo", "10", "--duration", "40", "--burst", "8,20"], "infeasible"),
    (["burst", "--burst", "290,90"], "--burst: expected A < B"),
    (["burst", "--burst", "90,500"], "the burst must end within --duration (400 s)"),
    (["burst", "--batch", "0,115"], "--batch: both values must be in [1, 4096]"),
    (["knobs", "--change", "20,70"], "--change 20,70: both steps must come before"),
    (["sweep", "--warmup", "500"], "--warmup 500 s must be less than --duration (400 s)"),
    (["sweep", "--warmup", "-1"], "--warmup: must be in [0, inf), got -1"),
    (["sweep", "--slos", "90,-5"], "--slos: must be in (0, 10000] ms, got -5"),
    (["sweep", "--slos", ""], "--slos: expected at least one number"),
    (["sweep", "--slos", "90,85,90"], "--slos: 90 given more than once; give each value once"),
    (["identify", "--mps", "80,80"], "--mps: 80 given more than once"),
    (["identify", "--train", "1"], "--train: must be in (0, 1), got 1"),
    (["identify", "--train", "0.02"], "--train 0.02 of --periods 100 leaves 2 periods"),
    (["identify", "--periods", "5"], "--periods: must be in [10, 100000], got 5"),
    (["identify", "--mps", "0,50"], "--mps: must be in [1, 100] %, got 0"),
    (["identify", "--sleep", "0.7,0.1"], "--sleep: expected A < B"),
    (["calibrate", "--from", "x", "--settle", "-1"], "--settle: must be in [0, 1000]"),
    (["cluster", "--scale", "0"], "--scale: must be in (0, 100000], got 0"),
    (["cluster", "--days", "-3"], "--days: must be in (0, 3650], got -3"),
    (["cluster", "--seed", "-1"], "--seed: must be in [0, 4294967295]"),
    (["cluster", "--ratios", "1,0"], "--ratios: must be in (0, 100], got 0"),
    (["cluster", "--ratios", ""], "--ratios: expected at least one number, e.g. 1,2,3,4,5"),
    (["cluster", "--ratios", "2,2"], "--ratios: 2 given more than once"),
    (["cluster", "--no-burst", "--burst-days", "1", "2"],
     "--burst-days 1 2 and --no-burst contradict each other"),
    (["cluster", "--days", "5"], "--days 5 is for --trace synthetic only; the openb trace"),
    (["cluster", "--trace", "pai", "x.csv", "--scale", "10"],
     "--scale 10 is for --trace synthetic only; the pai trace"),
    # one line: the "expect N min" note of a long synthetic run comes after the checks
    (["cluster", "--trace", "synthetic", "extra"], "--trace synthetic takes no file, got 'extra'"),
    (["cluster", "--burst-days", "40", "20"], "--burst-days 40 20: START must be before END"),
    (["cluster", "--window", "0", "0"], "--window 0 0: DAYS must be > 0"),
    (["cluster", "--window", "900", "10", "--no-burst"], "--window 900 10 holds no tasks"),
    (["cluster", "--trace", "synthetic", "--days", "2", "--scale", "10"],
     "the default --burst-days 20 40 start after the trace's 2 days: give --burst-days START "
     "END with START in [0, 2), or --no-burst"),
    # a --window shorter than the default burst's start: the message said "--burst-days 20
    # 40", a flag the user had not given
    (["cluster", "--window", "200", "10"],
     "the default --burst-days 20 40 start after the trace's 10 days"),
]


@pytest.mark.parametrize("argv,text", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, text, tmp_path, capsys):
    out = tmp_path / "out"
    assert _rc([*argv, "--out", str(out), "--no-progress"] if argv[0] != "calibrate" else
               [*argv, "--out", str(out)]) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], cap.err
    assert "Traceback" not in cap.err
    assert not out.exists()


@pytest.mark.parametrize("argv, text", [
    (["--burst-days", "30", "20"], "--burst-days 30 20: START must be before END"),
    (["--window", "0", "0"], "--window 0 0: DAYS must be > 0"),
    (["--window", "112", "10", "--burst-days", "13", "26"],
     "--burst-days 13 26 start after the trace's 10 days"),
    (["--trace", "synthetic", "--days", "2", "--scale", "10"],
     "the default --burst-days 20 40 start after the trace's 2 days"),
])
def test_days_the_flags_alone_refuse_are_refused_before_the_trace_loads(argv, text, tmp_path,
                                                                         capsys, monkeypatch):
    """``--burst-days 30 20`` printed the openb loader's report before its refusal: a check
    that needs no trace now runs before any loading or printing."""
    import harness.cli.cluster as cluster

    def no_load(*a):
        raise AssertionError("the trace was loaded")

    monkeypatch.setattr(cluster, "load_trace", no_load)
    assert _rc(["cluster", *argv, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and text in cap.err and cap.err.count("\n") == 1, cap


def test_unwritable_out_is_refused_before_running(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("")
    assert _rc(["burst", "--out", str(f / "sub"), "--duration", "8", "--burst", "1,4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a folder" in err and "--out" in err


def test_missing_trace_file_is_one_line(tmp_path, capsys):
    assert _rc(["cluster", "--trace", "pai", str(tmp_path / "none.csv"),
                "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "none.csv" in err and "No such file" in err


def test_header_only_trace_is_refused(tmp_path, capsys):
    from harness.cluster.traces import OPENB_PODS

    head = Path(OPENB_PODS).read_text().splitlines()[0] + "\n"
    f = tmp_path / "pods.csv"
    f.write_text(head)
    assert _rc(["cluster", "--trace", "openb", str(f), "--out", str(tmp_path / "o")]) == 2
    assert "holds no tasks" in capsys.readouterr().err


def test_garbage_calibrate_rows_are_one_line(tmp_path, capsys):
    f = tmp_path / "x.csv"
    f.write_text("t_start_s,latency_ms,mps_pct,sleep_s\n1,2\n")
    assert _rc(["calibrate", "--from", str(f), "--preset", "fig8",
                "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gpucontrol calibrate: error: --from: {f}: line 2 has 2 fields, the header 4"
    f.write_text("t_start_s,latency_ms,mps_pct,sleep_s\n0,90,80,0.5\nfoo,bar,baz,qux\n")
    assert _rc(["calibrate", "--from", str(f), "--preset", "fig8",
                "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("line 3: latency_ms is 'bar', not a number") and "\n" not in err


def test_version(capsys):
    from gpucontrol import __version__

    assert _rc(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"gpucontrol {__version__}"


def test_sweep_reports_infeasible_slo_honestly(tmp_path, capsys):
    assert main(["sweep", "--duration", "40", "--slos", "10,90", "--controllers",
                 "gslice,two-tier", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "Infeasible SLO(s) 10 ms" in out
    from harness.results import read_csv

    rows = read_csv(tmp_path / "slo_sweep" / "slo_sweep_summary.csv")
    feas = {(r["slo_ms"], r["controller"]): r["feasible"] for r in rows}
    assert feas[(10.0, "GSLICE-extended")] in ("False", 0.0, False)
    assert feas[(10.0, "GPUColo two-tier")] in ("False", 0.0, False)
    assert feas[(90.0, "GPUColo two-tier")] in ("True", 1.0, True)


def test_plant_gpu_without_a_gpu_says_so(tmp_path, monkeypatch, capsys):
    from harness import hil as gpu

    monkeypatch.setattr(gpu, "torch_cuda_available", lambda: False)
    monkeypatch.setattr(gpu, "cupy_device_count", lambda: 0)
    assert main(["burst", "--plant", "gpu", "--duration", "8", "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "GPU harness" in err and "--plant sim" in err


def test_plant_gpu_without_the_harness_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "harness.hil", None)
    assert main(["demo", "--plant", "gpu", "--duration", "8", "--out", str(tmp_path)]) == 3
    assert "needs the GPU harness" in capsys.readouterr().err


def test_nonexistent_training_cmd_is_one_line(tmp_path, capsys):
    assert _rc(["daemon", "--training-cmd", "no-such-program-xyz --epochs 3",
                "--fixed-sleep", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("gpucontrol daemon: error: --training-cmd: program 'no-such-program-xyz' "
                   "not found or not executable on PATH")


def test_knobs_default_steps_follow_the_duration(tmp_path, capsys):
    assert main(["knobs", "--duration", "30", "--out", str(tmp_path), "--no-progress"]) == 0
    import json

    meta = json.loads((tmp_path / "knobs" / "knobs_meta.json").read_text())
    assert meta["change_s"] == [10.0, 20.0]


def test_the_gpu_campaign_commands_pass_the_checks(tmp_path):
    from harness.hil.campaign import STEPS

    parser = build_parser()
    n = 0
    for step in STEPS.values():
        for cmd in step.commands:
            argv = list(cmd.argv)
            if argv[:2] != ["-m", "harness.cli"]:
                continue
            args = parser.parse_args([a.replace("{out}", str(tmp_path)) for a in argv[2:]])
            assert args.func
            n += 1
    assert n >= 4


def test_the_cpu_demo_runs_the_duration_and_seed_it_is_given(tmp_path, monkeypatch, capsys):
    """--duration is the closed-loop phase, also when it equals the sim demo's default (it
    was read as "not given" and replaced by 120 s); --seed reaches the identification."""
    from harness.experiments import pipeline

    seen = {}

    def fake(out, **kw):
        seen.update(kw)
        return {"slo_choice": "given", "identify_r2": 0.9, "identify_r2_validation": 0.8,
                "closed_periods": kw["closed_periods"], "median_abs_err_pct": 1.0,
                "over_105_pct": 0.0, "training_it_per_period": 1.0, "wall_s": 1.0,
                "files": [], "daemon_exit": 0}

    monkeypatch.setattr(pipeline, "run_pipeline", fake)
    argv = ["demo", "--plant", "cpu", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, "--duration", "400", "--seed", "7"]) == 0
    assert (seen["closed_periods"], seen["period_s"], seen["seed"]) == (100, 4.0, 7)
    assert main(argv) == 0  # the default: 120 s of closed loop
    assert seen["closed_periods"] == 30
    capsys.readouterr()


@pytest.mark.parametrize("argv", [["demo"], ["knobs"], ["burst"], ["sweep"], ["identify"],
                                  ["calibrate", "--from", "x"], ["cluster"]],
                         ids=lambda a: a[0])
def test_an_empty_out_is_refused(argv, tmp_path, monkeypatch, capsys):
    """An empty --out would write into the current folder: refused, one line, nothing
    written ('.' says the current folder)."""
    monkeypatch.chdir(tmp_path)
    assert _rc([*argv, "--out", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "argument --out: an empty path; give a folder" in err
    assert list(tmp_path.iterdir()) == []


def test_cluster_help_is_plain_text(capsys):
    assert _rc(["cluster", "--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and "(default: None)" not in out and "(default: False)" not in out
    assert "Trace-driven cluster simulation" in out


def test_the_cpu_plant_presets_in_the_help_are_the_ones_its_error_lists(capsys):
    from harness.cli.experiments import CPU_PRESETS
    from harness.hil.cpu.plant import PRESETS, presets_text

    assert presets_text() == CPU_PRESETS
    for name in ("default", "small", "fig8"):
        assert name in CPU_PRESETS and name in PRESETS
    for cmd in ("demo", "identify"):
        assert _rc([cmd, "--help"]) == 0
        assert "with --plant cpu default or small (fig8 means default)" in \
            " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("content", ["", "t_start_s,latency_ms,mps_pct,sleep_s\n"],
                         ids=["empty", "header-only"])
def test_calibrate_from_a_file_without_periods_names_the_file_not_the_preset(
        content, tmp_path, capsys):
    f = tmp_path / "x.csv"
    f.write_text(content)
    assert _rc(["calibrate", "--from", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"gpucontrol calibrate: error: --from: source {str(f)!r}: no periods in "
                   f"it (an empty file, or a header alone); give the per-period CSV or the "
                   f"results folder of a knobs, identify, burst or sweep run"), err
    assert not (tmp_path / "o").exists()


def test_knobs_on_another_batch_says_the_papers_columns_are_for_batch_5(tmp_path, capsys):
    argv = ["knobs", "--duration", "6", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, "--preset", "fig8"]) == 0
    err = capsys.readouterr().err
    assert "the paper_* columns are the GPUColo paper's Fig 4, whose setting the fig4 preset " \
           "reproduces at inference batch 5; this run's batch is 105 (preset fig8)" in err
    assert main(argv) == 0  # fig4: batch 5, no note
    assert "paper_* columns" not in capsys.readouterr().err
