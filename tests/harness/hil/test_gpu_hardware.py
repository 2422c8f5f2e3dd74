"""Hardware tests (marker ``gpu``; skipped without CuPy and a CUDA device, see conftest.py).

Each GPU workload runs in a child process through its command line, so the test process
itself never holds a CUDA context (which could keep an MPS server from starting) and the
CLIs are exercised as documented in docs/gpu.md.
"""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.gpu


def run_module(*argv, timeout=600, env=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    e.update(env or {})
    out = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, env=e, check=False)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def json_lines(text):
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


def test_smid_ids_are_valid_and_cover_most_sms_on_an_idle_gpu():
    out = run_module("harness.hil.smid", "--samples", "5")
    lines = json_lines(out.stdout)
    samples, union = lines[:-1], lines[-1]
    for s in samples:
        assert s["max_sm_id"] < s["multiprocessor_count"]
        assert s["n_sms"] >= 0.5 * s["multiprocessor_count"]
    assert union["out_of_range"] == []
    assert union["union_fraction"] >= 0.9


def test_emulator_iteration_time_within_20_percent_of_target(tmp_path):
    log = tmp_path / "train.csv"
    out = run_module("harness.hil.training_emulator", "--iterations", "15", "--log", str(log),
                     env={"GPUCONTROL_HOOK_FILE": str(tmp_path / "no-hook")})
    summary = json.loads(out.stderr.strip().splitlines()[-1])["summary"]
    assert summary["iterations"] == 15
    assert abs(summary["median_iter_s"] - 0.2) <= 0.2 * 0.2, summary
    assert 0 < summary["mean_sm_fraction"] <= 1.0


def test_inference_latency_is_measured(tmp_path):
    pytest.importorskip("torchvision")
    out = run_module("harness.hil.inference", "--batches", "10", "--batch-size", "32",
                     "--json")
    rows = json_lines(out.stdout)
    assert len(rows) == 10 and all(r["batch_size"] == 32 for r in rows)
    for r in rows:
        assert math.isfinite(r["gpu_ms"]) and r["gpu_ms"] > 0
        assert r["wall_ms"] >= 0.9 * r["gpu_ms"]


@pytest.mark.slow
def test_closed_loop_on_the_gpu_brings_latency_to_the_slo(tmp_path):
    """Identify a two-point model on the GPU, pick an SLO inside the sleep's range, then run
    the sleep loop for 60 s (15 periods of 4 s) and check the settled latency."""
    pytest.importorskip("torchvision")
    from gpucontrol import Actuation, LinearLatencyModel, TwoTierController
    from harness.hil.gpu_plant import GPUPlant, GPUPlantConfig
    from harness.sim.protocol import run_loop

    cfg = GPUPlantConfig(workdir=str(tmp_path / "plant"), mps_enabled=False)
    with GPUPlant(cfg) as plant:
        plant.step(Actuation(0.0, 100.0), 4.0)  # settle
        l0 = np.mean([plant.step(Actuation(0.0, 100.0), 4.0).mean_ms for _ in range(2)])
        plant.step(Actuation(0.8, 100.0), 4.0)
        l1 = np.mean([plant.step(Actuation(0.8, 100.0), 4.0).mean_ms for _ in range(2)])
        assert l0 > l1, (l0, l1)
        gain = (l1 - l0) / 0.8
        slo = l1 + 0.5 * (l0 - l1)
        ctl = TwoTierController(LinearLatencyModel(gain=gain, offset=l0), slo_ms=slo,
                                outer="none", initial_sleep_s=0.0, sleep_bounds_s=(0.0, 1.0))
        rec = run_loop(ctl, plant, periods=15, period_s=4.0)
    lat = rec.col("latency_ms")
    settled = lat[-5:].mean()
    assert abs(settled - slo) <= max(0.05 * slo, 0.25 * (l0 - l1)), (lat, slo)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is None,
                    reason="nvidia-cuda-mps-control not installed")
def test_mps_restart_with_shadow_prestart(tmp_path):
    pytest.importorskip("torchvision")
    from gpucontrol import Actuation
    from harness.hil.gpu_plant import GPUPlant, GPUPlantConfig

    cfg = GPUPlantConfig(workdir=str(tmp_path / "plant"), initial_mps_pct=80.0, shadow=True)
    with GPUPlant(cfg) as plant:
        assert plant.mps_enabled
        hi = plant.step(Actuation(0.0, 80.0), 4.0)
        plant.step(Actuation(0.0, 20.0), 4.0)
        assert plant.wait_idle(300)
        plant.step(Actuation(0.0, 20.0), 4.0)
        lo = plant.step(Actuation(0.0, 20.0), 4.0)
        rep = plant.restart_report()
    assert rep and rep[0]["ok"]
    assert lo.mean_ms < hi.mean_ms
    assert lo.training_sm_share < hi.training_sm_share
    assert rep[0]["gap_s"] < 0.5, rep


@pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is None,
                    reason="nvidia-cuda-mps-control not installed")
def test_smid_peak_stays_under_the_mps_cap_where_the_union_need_not():
    """Under MPS 25 % the union of one launch's SM ids read 0.44-0.54 of the H100 (the cap
    bounds the SMs used at once, not which); the peak held at once must stay near 25 %."""
    from harness.hil.mps_session import client_env, mps_session

    with mps_session(True) as mps:
        if mps is None:
            pytest.skip("the MPS control daemon did not start")
        out = run_module("harness.hil.smid", "--samples", "5", env=client_env(mps, 25))
    lines = json_lines(out.stdout)
    n = lines[0]["multiprocessor_count"]
    assert lines[-1]["max_peak_n_sms"] <= 0.25 * n + 8, lines  # + one split step of slack
    assert all(s["peak_n_sms"] <= s["n_sms"] for s in lines[:-1])
