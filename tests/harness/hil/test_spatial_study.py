"""The spatial hardware step on the CPU: its plan and dry run, the campaign entry, the
summary/README from result files, and GreenGPUPlant's knob (hook file) and switch report."""

import json
import math
import time
from pathlib import Path

import pytest

from gpucontrol import Actuation
from gpucontrol.node.hooks import HookReader, HookWriter
from harness.hil.campaign import STEPS
from harness.hil.readme import draft_readmes
from harness.hil.spatial_plant import GreenGPUPlant
from harness.hil.spatial_study import BACKENDS, main, plan, readme_section, summarize
from harness.results import write_csv


def test_plan_covers_every_backend_and_fits_the_campaign_step():
    steps = plan()
    assert [(s["phase"], s["backend"]) for s in steps] == [
        ("probe", "green-context"), ("plant", "green-context"), ("plant", "mps-restart"),
        ("plant", "sleep")]
    assert all(s["shares"] == [100, 75, 50, 25] for s in steps)
    total = sum(s["expected_s"] for s in steps)
    step = STEPS["spatial"]
    assert total <= step.timeout_s and step.expected_s <= step.timeout_s <= 570
    assert step.commands[0].argv[:2] == ("-m", "harness.hil.spatial_study")
    with pytest.raises(ValueError, match="backends"):
        plan(["mig"])
    with pytest.raises(ValueError, match="shares"):
        plan(shares=[0])


def test_dry_run_needs_no_gpu(capsys, tmp_path):
    assert main(["--dry-run", "--out", str(tmp_path), "--backends", "green-context",
                 "--shares", "100,50"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["phase"] for s in doc["plan"]] == ["probe", "plant"]
    assert doc["expected_s"] == sum(s["expected_s"] for s in doc["plan"])
    assert not any(tmp_path.iterdir())  # a dry run writes nothing
    assert main(["--dry-run", "--shares", "150"]) == 2
    assert "shares" in capsys.readouterr().err


def fake_results(d: Path):
    d.mkdir(parents=True)
    write_csv([{"share_pct": 50.0, "sm_count": 64, "sm_given_fraction": 64 / 132,
                "smid_n_sms": 64, "smid_fraction": 64 / 132, "matmul_s": 0.004,
                "select_s": 2e-6, "switch_overhead_s": 1e-4}], d / "partitions.csv")
    rows = []
    for b, lat, it in (("green-context", 20.0, 3.0), ("sleep", 24.0, 2.5),
                       ("mps-restart", 21.0, 2.8)):
        rows.append({"backend": b, "share_pct": 50.0, "sleep_s": 0.0, "latency_first_ms": lat,
                     "latency_ms": lat, "p99_ms": lat + 3, "training_sm_share": 0.4,
                     "training_throughput": it})
    write_csv(rows, d / "levels.csv")
    write_csv([{"backend": "green-context", "share_pct": 50.0, "latency_s": 0.12,
                "switch_s": 4e-5, "ok": True},
               {"backend": "mps-restart", "share_pct": 50.0, "latency_s": 9.0, "ok": True}],
              d / "resizes.csv")
    (d / "meta.json").write_text("{}")
    (d / "gpu.json").write_text(json.dumps({
        "gpu": {"name": "NVIDIA H100", "driver": "x"},
        "mps_control": "/usr/bin/nvidia-cuda-mps-control",
        "spatial_backends": [{"name": "green-context", "available": True, "reason": ""},
                             {"name": "cpu.max", "available": False, "reason": "no cgroup"}]}))


def test_summary_and_readme_from_result_files(tmp_path):
    d = tmp_path / "spatial"
    fake_results(d)
    text = "\n".join(readme_section(d, True))
    assert "green-context in-process switch: median 0.040 ms (goal < 1 ms: met)" in text
    assert "mps-restart: median 9.0000 s" in text
    assert "green-context: available; cpu.max: no (no cgroup)." in text
    # green vs sleep at the same share
    assert "| 50.000 | 20.000 | 24.000 | 3.000 | 2.500 | spatial better |" in text
    written = draft_readmes(tmp_path)
    assert written == [d / "README.md"]
    readme = (d / "README.md").read_text()
    assert "green contexts vs MPS restarts vs sleep" in readme and "NVIDIA H100" in readme
    assert summarize([], [], []) == "\n"


def test_green_plant_commands_the_share_through_the_hook_file(tmp_path):
    plant = GreenGPUPlant(shares_pct=(25, 50), workdir=str(tmp_path), target_iter_s=0.1)
    assert not plant.cfg.mps_enabled
    plant.workdir = tmp_path
    argv = plant._training_argv()
    i = argv.index("--backend")
    assert argv[i + 1] == "cupy-green" and argv[argv.index("--green-shares") + 1] == "25,50"
    assert argv[argv.index("--spatial-log") + 1] == f"{tmp_path}/spatial-{{pid}}.csv"
    plant._hook = HookWriter(tmp_path / "gpu.hook")
    reader = HookReader(tmp_path / "gpu.hook")
    plant._apply(Actuation(0.2, 50.0))
    assert reader.share_pct() == 50 and reader.sleep_s() == 0.2 and plant.share_pct == 50
    plant._apply(Actuation(0.0, 100.0))
    assert reader.share_pct() is None and len(plant.commands) == 2
    # the training's switch log, as the cupy-green emulator writes it
    from harness.hil._tail import CSVTail

    t_cmd = plant.commands[0][0]
    write_csv([{"t_unix": t_cmd - 5, "share_cmd_pct": "", "share_pct": 100, "sm_count": 132,
                "select_s": 1e-6, "switch_s": 1e-5},
               {"t_unix": t_cmd + 0.15, "share_cmd_pct": 50, "share_pct": 50, "sm_count": 64,
                "select_s": 1e-6, "switch_s": 3e-5}], tmp_path / "spatial-1.csv")
    plant._switch_tail, plant.switches = CSVTail(tmp_path / "spatial-*.csv"), []
    rep = plant.switch_report()
    assert rep[0]["sm_count"] == 64 and rep[0]["delay_s"] == pytest.approx(0.15, abs=1e-3)
    assert math.isnan(rep[1]["delay_s"]) or rep[1]["delay_s"] >= 0
    plant._hook.close()
    plant.closed = True
    assert time.time() >= t_cmd
    with pytest.raises(ValueError, match="shares_pct"):
        GreenGPUPlant(shares_pct=(0,))
    assert set(BACKENDS) == {"green-context", "mps-restart", "sleep", "green-context+mps"}


@pytest.mark.slow
@pytest.mark.solo
def test_green_and_sleep_plants_end_to_end_on_the_cpu(tmp_path):
    """The whole chain without a GPU: plant -> hook file -> emulator (numpy-green) switches at
    iteration boundaries -> switch log -> resize report; and the sleep backend's duty."""
    import sys

    from harness.hil.gpu_plant import GPUPlantConfig
    from harness.hil.spatial_study import run_plant

    here = Path(__file__).resolve().parent
    base = GPUPlantConfig(workdir=str(tmp_path / "g"), target_iter_s=0.05, matrix_n=128,
                          copy_mb=0.25, start_timeout_s=60,
                          inference_argv=(sys.executable, str(here / "fake_inference.py")))
    levels, resizes = run_plant("green-context", [100, 50, 25], period_s=0.5, measure=1,
                                base=base, training_backend="numpy-green")
    assert [r["share_pct"] for r in levels] == [100, 50, 25]
    assert all(r["training_throughput"] > 0 and r["latency_ms"] > 0 for r in levels)
    assert [r["share_pct"] for r in resizes] == [50, 25]
    for r in resizes:  # command to the first iteration on the new partition (in-process
        # microseconds and about one 0.05 s iteration; a restart takes seconds: budgets a
        # loaded CI machine meets)
        assert r["ok"] and 0 <= r["latency_s"] < 2.0 and r["switch_s"] < 0.1
    assert [r["sm_count"] for r in resizes] == [50, 25]  # the simulated pool: 100 "SMs"
    levels, _ = run_plant("sleep", [100, 50], period_s=0.5, measure=1,
                          base=GPUPlantConfig(**{**vars(base), "workdir": str(tmp_path / "s")}),
                          training_backend="numpy-green")
    assert levels[1]["sleep_s"] == pytest.approx(0.05)  # duty 50 %: sleep one iteration
    assert levels[1]["training_throughput"] < levels[0]["training_throughput"]


def test_a_failing_phase_leaves_the_others_and_says_so(tmp_path, capsys, monkeypatch):
    # on this machine the probe's child process finds no GPU (no cupy or no device); the
    # check before the phases is passed over, as on a GPU machine whose probe fails
    pytest.importorskip("numpy")
    import harness.hil.spatial_study as study

    monkeypatch.setattr(study, "require_gpu", lambda *a, **k: None)
    try:
        import cupy  # noqa: F401

        pytest.skip("cupy is installed: the probe may succeed here")
    except ImportError:
        pass
    assert main(["--out", str(tmp_path), "--backends", "", "--shares", "50"]) == 1
    errs = (tmp_path / "errors.txt").read_text()
    assert errs.startswith("probe green-context: RuntimeError: the partition probe exited")
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["plan"][0]["phase"] == "probe" and "gpu_error" in meta
    assert (tmp_path / "summary.md").is_file()
    assert "Phases that failed (see errors.txt): probe green-context" in "\n".join(
        readme_section(tmp_path, True))


def test_probe_reports_every_partition_and_the_full_device():
    """Asked for 50 and 25 %, the probe still measures the full device (the pool always has
    it): the H100 run of the gpu test read the 100 % row and found none (KeyError: 100)."""
    import numpy as np

    from harness.hil.smid import summarize_smids
    from harness.hil.spatial_study import probe_partitions
    from tests.harness.hil.fake_cuda import FakeCuda
    from tests.harness.hil.test_green_ctx import FakeCupy

    cp = FakeCupy()
    cp.float32 = np.float32
    cp.ones = lambda shape, dtype=None: np.ones(shape, dtype=dtype)
    cp.empty_like = np.empty_like
    lib = FakeCuda()

    class Sampler:  # reaches exactly the SMs of the partition whose stream it runs on
        def sample(self, stream):
            n = lib.green[lib.streams[stream.ptr]]
            return summarize_smids(range(n), 132, starts=[0] * n, ends=[9] * n)

    rows, desc = probe_partitions((50, 25), matrix_n=8, matmuls=2, cupy=cp, lib=lib,
                                  sampler=Sampler())
    by = {r["share_pct"]: r for r in rows}
    assert sorted(by) == [25.0, 50.0, 100.0]
    assert by[100]["sm_count"] == desc["total_sms"] == 132
    assert [by[s]["smid_peak_n_sms"] for s in (25, 50, 100)] == [32, 64, 132]
    assert lib.green == {}  # the pool was closed


def test_gpu_green_plant_kind(monkeypatch):
    """``--plant gpu-green``: the green-context + MPS plant from the registry."""
    import harness.hil as hil
    from gpucontrol.errors import PlantUnavailable
    from harness.experiments.plants import make_plant
    from harness.hil.spatial_plant import make_green_gpu_plant

    monkeypatch.setattr(hil, "torch_cuda_available", lambda: False)
    monkeypatch.setattr(hil, "cupy_device_count", lambda: 0)
    with pytest.raises(PlantUnavailable, match="gpu-green"):
        make_plant("gpu-green", "fig8")
    monkeypatch.setattr(hil, "cupy_device_count", lambda: 1)
    p = make_green_gpu_plant("fig8", size_inference_to_ms=None, shares_pct=(50, 100))
    assert p.cfg.mps_enabled and p.shares_pct == (50.0, 100.0)
    assert p.cfg.training_args[:2] == ("--backend", "cupy-green")
    assert p.cfg.size_inference_to_ms is None and not p.started


def test_backends_figure_and_the_spatial_mps_readme(tmp_path):
    from harness.hil.figures import main as figures_main

    d = tmp_path / "spatial_mps"
    d.mkdir()
    write_csv([{"backend": "green-context+mps", "share_pct": s, "latency_ms": lat,
                "training_throughput": it} for s, lat, it in ((25, 21.0, 0.8),
                                                              (75, 34.0, 3.0))],
              d / "levels.csv")
    assert figures_main(["backends", str(tmp_path), "--out", str(tmp_path / "b.png")]) == 0
    assert (tmp_path / "b.png").stat().st_size > 1000
    assert figures_main(["backends", str(tmp_path / "none"), "--out", str(tmp_path / "c.png")]) == 1
    assert draft_readmes(tmp_path) == [d / "README.md"]
    assert "green contexts inside MPS" in (d / "README.md").read_text()


def test_the_backends_figure_draws_a_sleep_row_at_the_tables_rate(tmp_path, monkeypatch):
    """The figure beside the README's H100 table drew the sleep rows at the rate the run's
    harness counted (0.50 it/s at 25 %), where the table gives 1 / (iteration + sleep) from
    the same row (0.98 it/s): now both read the row the same way. A row without a sleep, or
    without an SM share, keeps its counted rate."""
    from harness.hil import figures

    rows = [{"backend": "sleep", "share_pct": 25.0, "sleep_s": 0.6, "latency_ms": 23.4,
             "training_sm_share": 0.2127, "training_throughput": 0.49996},
            {"backend": "sleep", "share_pct": 100.0, "sleep_s": 0.0, "latency_ms": 40.5,
             "training_sm_share": 0.994, "training_throughput": 2.333},
            {"backend": "green-context+mps", "share_pct": 75.0, "sleep_s": 0.0,
             "latency_ms": 33.9, "training_sm_share": "", "training_throughput": 3.0}]
    drawn = {}
    real_rate = figures.backends_figure.__globals__["_rate"]
    monkeypatch.setattr(figures, "_rate", lambda r: drawn.setdefault(
        (r["backend"], r["share_pct"]), real_rate(r)))
    figures.backends_figure(rows, tmp_path / "b.png")
    assert round(drawn[("sleep", 25.0)], 2) == 0.98
    assert drawn[("sleep", 100.0)] == 2.333 and drawn[("green-context+mps", 75.0)] == 3.0
