"""The PyTorch training loop on restart-free shares (harness.hil.torch_training): on the CPU with a
tiny model and the dry-run partition pool (skipped without torch; CI has none), and on a GPU
(marker ``gpu``) with ResNet-18 on ``torch.cuda.green_contexts``."""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from gpucontrol.node.hooks import HookWriter
from harness.results import read_csv

ROOT = Path(__file__).resolve().parents[3]


def run(*argv, env=None, timeout=120):
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    out = subprocess.run([sys.executable, "-m", "harness.hil.torch_training", *argv],
                         capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=e,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_follows_the_hook_files_share_and_sleep_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    hook = tmp_path / "gpu.hook"
    w = HookWriter(hook, stale_after_s=600)
    w.set_share(60)
    w.set_sleep(0.05)
    try:
        out = run("--device", "cpu", "--model", "tiny", "--image-size", "32",
                  "--batch-size", "4", "--green-pool", "simulated", "--green-shares", "25,50",
                  "--accumulate", "2", "--iterations", "5", "--json",
                  "--log", str(tmp_path / "train-{pid}.csv"),
                  "--spatial-log", str(tmp_path / "sw.csv"),
                  env={"GPUCONTROL_HOOK_FILE": str(hook)})
    finally:
        w.close()
    rows = read_csv(next(tmp_path.glob("train-*.csv")))
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3, 4]
    assert all(0.04 <= r["sleep_s"] < 0.5 and r["iter_s"] > 0 for r in rows), rows
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert {x["share_pct"] for x in lines} == {50.0}  # the largest partition under 60 %
    sw = read_csv(tmp_path / "sw.csv")
    assert [(r["share_cmd_pct"], r["share_pct"]) for r in sw] == [(60, 50)]
    summary = json.loads(out.stderr.strip().splitlines()[-1])["summary"]
    assert summary == {"iterations": 5, "model": "tiny", "partitions": "simulated",
                       "why_not": None}


def test_sizing_is_saved_and_reused(tmp_path):
    pytest.importorskip("torch")
    cal = tmp_path / "cal.json"
    args = ("--device", "cpu", "--model", "tiny", "--image-size", "32", "--batch-size", "4",
            "--green-pool", "none", "--target-iter-s", "0.05", "--calibration-file", str(cal))
    run(*args, "--iterations", "0")
    saved = json.loads(cal.read_text())
    assert saved["accumulate"] >= 1 and saved["target_iter_s"] == 0.05
    out = run(*args, "--iterations", "1", "--ready-file", str(tmp_path / "ready.json"))
    assert json.loads((tmp_path / "ready.json").read_text())["accumulate"] == \
        saved["accumulate"]
    assert "iterations" in out.stderr


def test_bad_arguments_name_the_flag():
    out = subprocess.run([sys.executable, "-m", "harness.hil.torch_training", "--batch-size",
                          "0"], capture_output=True, text=True, cwd=ROOT, check=False,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and "--batch-size must be >= 1" in out.stderr


@pytest.mark.gpu
def test_resnet18_runs_on_the_commanded_green_partition(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    if not (torch.cuda.is_available() and
            getattr(torch.cuda.green_contexts, "SUPPORTED", False)):
        pytest.skip("this PyTorch has no CUDA green contexts")
    hook = tmp_path / "gpu.hook"
    w = HookWriter(hook, stale_after_s=600)
    w.set_share(25)
    try:
        run("--iterations", "6", "--accumulate", "2", "--log", str(tmp_path / "part.csv"),
            "--spatial-log", str(tmp_path / "sw.csv"), env={"GPUCONTROL_HOOK_FILE": str(hook)},
            timeout=300)
        w.set_share(None)
        run("--iterations", "6", "--accumulate", "2", "--log", str(tmp_path / "full.csv"),
            env={"GPUCONTROL_HOOK_FILE": str(hook)}, timeout=300)
    finally:
        w.close()
    sw = read_csv(tmp_path / "sw.csv")
    assert sw[0]["share_pct"] == 25 and 0 < sw[0]["sm_count"] < 100

    def compute(name):  # the first two iterations warm up (cuDNN, the allocator)
        return statistics.median(r["compute_s"] for r in read_csv(tmp_path / name)[2:])

    assert compute("part.csv") > 1.5 * compute("full.csv")  # 32 of 132 SMs: slower


@pytest.mark.slow
def test_green_plant_runs_the_torch_training_on_the_cpu(tmp_path):
    """GreenGPUPlant(training_backend="torch-dry-run"): the plant sizes the PyTorch training,
    starts it, commands shares through the hook file and reads its logs."""
    pytest.importorskip("torch")
    from harness.hil.gpu_plant import GPUPlantConfig
    from harness.hil.spatial_study import run_plant

    here = Path(__file__).resolve().parent
    base = GPUPlantConfig(workdir=str(tmp_path / "g"), target_iter_s=0.05, start_timeout_s=120,
                          inference_argv=(sys.executable, str(here / "fake_inference.py")))
    levels, resizes = run_plant("green-context", [100, 50], period_s=1.0, measure=2,
                                base=base, training_backend="torch-dry-run")
    assert [r["share_pct"] for r in levels] == [100, 50]
    # the training ran (a loaded machine may starve it through one level, not through both)
    assert sum(r["training_throughput"] for r in levels) > 0, levels
    assert [(r["share_pct"], r["ok"]) for r in resizes] == [(50, True)]
    cal = json.loads((tmp_path / "g" / "calibration.json").read_text())
    assert cal["model"] == "tiny" and cal["accumulate"] >= 1
