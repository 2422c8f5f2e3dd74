"""Hardware tests of the green-context path (marker ``gpu``; skipped without CuPy and a CUDA
device). As in test_gpu_hardware.py, the GPU work runs in child processes."""

import json

import pytest
from test_gpu_hardware import run_module as _run_module

from gpucontrol.node.actuators.spatial import probe_green_context_driver
from gpucontrol.node.hooks import HookWriter
from harness.results import read_csv

pytestmark = pytest.mark.gpu


def run_module(*argv, timeout=300, env=None):
    """test_gpu_hardware's child-process runner, with this file's shorter time limit."""
    return _run_module(*argv, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def green_ok():
    ok, why, _v = probe_green_context_driver()
    if not ok:
        pytest.skip(f"green contexts unavailable: {why}")


def test_partitions_confine_the_smid_sample(tmp_path, green_ok):
    run_module("harness.hil.spatial_study", "--out", str(tmp_path), "--backends", "",
               "--shares", "50,25")
    rows = {r["share_pct"]: r for r in read_csv(tmp_path / "partitions.csv")}
    meta = json.loads((tmp_path / "meta.json").read_text())
    total = meta["pool"]["total_sms"]
    assert rows[100]["sm_count"] == total
    for share in (50, 25):
        r = rows[share]
        assert r["sm_count"] < total
        # blocks of a green-context stream land only on the partition's SMs
        assert 0 < r["smid_n_sms"] <= r["sm_count"], r
        assert 0 < r["smid_peak_n_sms"] <= r["smid_n_sms"], r
    # less SMs, slower fixed work
    assert rows[25]["matmul_s"] > rows[100]["matmul_s"]
    assert rows[50]["select_s"] < 1e-3


def test_emulator_follows_the_hook_file_share(tmp_path, green_ok):
    w = HookWriter(tmp_path / "gpu.hook", stale_after_s=600)
    w.set_share(25)
    try:
        run_module("harness.hil.training_emulator", "--backend", "cupy-green",
                   "--green-shares", "25,50", "--iterations", "8", "--target-iter-s", "0.05",
                   "--log", str(tmp_path / "train.csv"),
                   "--spatial-log", str(tmp_path / "sw.csv"),
                   env={"GPUCONTROL_HOOK_FILE": str(tmp_path / "gpu.hook")})
    finally:
        w.close()
    switches = read_csv(tmp_path / "sw.csv")
    assert switches[-1]["share_pct"] == 25
    n = switches[-1]["sm_count"]
    rows = read_csv(tmp_path / "train.csv")
    assert rows and all(r["n_sms"] <= n for r in rows), (n, [r["n_sms"] for r in rows])
    assert all(r["switch_s"] < 1e-3 for r in switches[1:])
