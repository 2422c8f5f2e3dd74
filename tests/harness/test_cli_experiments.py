"""The ``gpucontrol demo | knobs | burst | sweep`` subcommands (short durations)."""

import sys

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


def test_bad_arguments_are_reported(capsys):
    with pytest.raises(SystemExit):
        main(["burst", "--burst", "10"])
    assert main(["burst", "--controllers", "pid", "--duration", "8", "--no-progress"]) == 2
    assert "unknown controller" in capsys.readouterr().err


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
