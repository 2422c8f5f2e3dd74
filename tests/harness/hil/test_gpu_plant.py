"""GPUPlant on the CPU: the real orchestration (MPS daemon, hook file, MPS actuator with shadow
restart, calibration, log tailing, batch-size file) with the training emulator on its NumPy
backend, a synthetic inference backend, and a fake ``nvidia-cuda-mps-control``."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from gpucontrol import Actuation, LinearLatencyModel, TwoTierController
from harness.hil.gpu_plant import PRESETS, GPUPlant, GPUPlantConfig
from harness.sim.protocol import Plant, PlantActuation, run_loop

HERE = Path(__file__).resolve().parent


def cpu_config(tmp_path, **kw):
    base = {"workdir": str(tmp_path / "plant"), "batch": 105, "target_iter_s": 0.05,
            "matrix_n": 128, "copy_mb": 0.25, "start_timeout_s": 60, "initial_mps_pct": 100.0,
            "inference_argv": (sys.executable, str(HERE / "fake_inference.py")),
            "training_args": ("--backend", "numpy")}
    base.update(kw)
    return GPUPlantConfig(**base)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("kw, field", [
    ({"batch": 0}, "batch"), ({"inference_mps_pct": 0}, "mps_pct"),
    ({"initial_mps_pct": 101}, "mps_pct"), ({"max_sleep_s": 0}, "max_sleep_s"),
    ({"initial_sleep_s": 99}, "initial_sleep_s"), ({"latency": "p50"}, "latency"),
    ({"target_iter_s": 0}, "target_iter_s"), ({"training_argv": ()}, "argv")])
def test_config_validation(kw, field):
    with pytest.raises(ValueError, match=field):
        GPUPlantConfig(**kw)


def test_presets_and_protocol():
    plant = GPUPlant.preset("fig8", seed=3)
    assert isinstance(plant, Plant)
    assert plant.cfg.batch == 105 and plant.cfg.initial_mps_pct == 80.0
    assert GPUPlant.preset("fig4").cfg.inference_mps_pct == 80.0
    assert set(PRESETS) >= {"fig4", "fig8"}
    with pytest.raises(ValueError, match="preset"):
        GPUPlant.preset("fig99")
    assert not plant.started  # nothing runs until the first step
    with pytest.raises(ValueError, match="set_load accepts batch"):
        plant.set_load(sm=3)
    with pytest.raises(ValueError, match="does not take noise_sigma"):
        GPUPlant.preset("fig8", noise_sigma=0.1)
    assert GPUPlant.preset("fig4", mps_enabled=False).cfg.mps_enabled is False


@pytest.mark.slow
def test_plant_knobs_batch_and_shadow_mps_restart(tmp_path, fake_mps):
    exe, record = fake_mps
    with GPUPlant(cpu_config(tmp_path, mps_binary=exe)) as plant:
        assert plant.mps_enabled
        assert plant.calibration["matmuls"] >= 1
        plant.step(Actuation(sleep_s=0.0, mps_pct=100.0), 0.5)  # first iterations logged
        busy = plant.step(Actuation(sleep_s=0.0, mps_pct=100.0), 1.0)
        assert busy.count > 8 and busy.training_iterations >= 3
        assert busy.mps_pct == 100.0 and not busy.restarting
        assert math.isnan(busy.training_sm_share)  # no %smid on the NumPy backend
        assert busy.inference_images == 105 * busy.count
        plant.step(Actuation(sleep_s=0.4, mps_pct=100.0), 0.5)  # let the sleep take hold
        idle = plant.step(Actuation(sleep_s=0.4, mps_pct=100.0), 1.0)
        assert idle.sleep_s == 0.4
        # more sleep, lower latency (busy ~60 ms; idle <= 20 + 40 * it / (it + 0.4) even when
        # a loaded CPU stretches the 0.05 s iteration several times)
        assert idle.mean_ms < busy.mean_ms - 8
        assert idle.training_iterations < busy.training_iterations
        # the iteration time a node's hook measures: compute only, the 0.4 s sleep excluded
        assert 0 < busy.iteration_s < 0.4 and 0 < idle.iteration_s < 0.4

        plant.set_load(batch=115)
        burst = plant.step(Actuation(sleep_s=0.4, mps_pct=100.0), 1.0)
        assert burst.batch == 115 and burst.inference_images > 115 * (burst.count - 2)

        # MPS 100 -> 30: restart with shadow pre-start in the background
        old_pid = plant._actuator.pid
        r = plant.step(Actuation(sleep_s=0.0, mps_pct=30.0), 0.5)
        assert r.restarting
        assert plant.wait_idle(30)
        new_pid = plant._actuator.pid
        assert new_pid != old_pid and not alive(old_pid)
        low = plant.step(Actuation(sleep_s=0.0, mps_pct=30.0), 1.0)
        assert low.mps_pct == 30.0 and not low.restarting
        assert low.mean_ms < busy.mean_ms * 115 / 105 - 5
        rep = plant.restart_report()
        assert len(rep) == 1 and rep[0]["ok"] and rep[0]["shadow"]
        assert rep[0]["old_pct"] == 100.0 and rep[0]["new_pct"] == 30.0
        assert rep[0]["gap_s"] < 0.5  # the goal for shadow pre-start
        inf_pid = plant._inference.pid
        workdir = plant.workdir
    # closed: processes gone, MPS told to quit, the hook file removed
    assert not alive(new_pid) and not alive(inf_pid)
    assert record.read_text().splitlines()[-1] == "cmd quit"
    assert not (workdir / "gpu.hook").exists()
    assert (workdir / f"training-{new_pid}.csv").exists()


@pytest.mark.slow
def test_sleep_only_fallback_ignores_mps(tmp_path):
    with GPUPlant(cpu_config(tmp_path, mps_enabled=False)) as plant:
        assert not plant.mps_enabled
        pid = plant._actuator.pid
        with pytest.warns(RuntimeWarning, match="sleep-only"):
            r = plant.step(Actuation(sleep_s=0.1, mps_pct=20.0), 0.5)
        assert r.mps_pct == 100.0 and not r.restarting
        assert plant._actuator.pid == pid and plant.restarts == []


@pytest.mark.slow
def test_inference_mps_change_restarts_the_inference(tmp_path, fake_mps):
    exe, _ = fake_mps
    with GPUPlant(cpu_config(tmp_path, mps_binary=exe, inference_mps_pct=80.0)) as plant:
        first = plant._inference.pid
        r = plant.step(PlantActuation(sleep_s=0.0, mps_pct=100.0, inference_mps_pct=60.0), 0.3)
        assert r.inference_restarting
        assert plant.wait_idle(30)
        assert plant._inference.pid != first and plant.inference_mps_pct == 60.0
        assert plant.step(Actuation(0.0, 100.0), 0.5).inference_mps_pct == 60.0


@pytest.mark.slow
@pytest.mark.solo
def test_closed_loop_on_the_cpu_plant_reaches_the_slo(tmp_path):
    """The whole loop in real time: controller -> hook file -> emulator sleeps -> its log ->
    the synthetic inference slows down or speeds up -> its log -> the plant's measurement.

    Fake inference: 20 + 40 * duty ms with duty = iter / (iter + sleep), iteration ~0.05 s,
    so the SLO of 40 ms needs sleep ~= one iteration; the local gain there, -10/iter ms/s,
    is -100..-200 ms/s as the CPU's speed wanders, within (0, 2) of the nominal -150. The CPU
    is shared, so the check is on the median of the settled periods with a wide margin."""
    slo = 40.0
    ctl = TwoTierController(LinearLatencyModel(gain=-150.0, offset=60.0), slo_ms=slo,
                            outer="none", inner_period_s=0.5, sleep=(0.0, 0.5))
    with GPUPlant(cpu_config(tmp_path, mps_enabled=False, matrix_n=256)) as plant:
        rec = run_loop(ctl, plant, periods=16)
    lat = rec.col("latency_ms")
    assert lat[:2].max() > slo + 4  # no sleep at first: above the SLO
    assert abs(np.median(lat[-8:]) - slo) < 0.2 * slo
    assert 0.01 < np.median(rec.col("next_sleep_s")[-8:]) < 0.3


@pytest.mark.slow
def test_sigterm_to_the_experiment_still_quits_mps(tmp_path, fake_mps):
    """A SIGTERM'd experiment runs close(): MPS gets 'quit', children are stopped."""
    import signal
    import subprocess
    import time

    exe, record = fake_mps
    script = tmp_path / "exp.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "from gpucontrol import Actuation\n"
        "from harness.hil.gpu_plant import GPUPlant, GPUPlantConfig\n"
        "from test_gpu_plant import cpu_config\n"
        "from pathlib import Path\n"
        f"plant = GPUPlant(cpu_config(Path({str(tmp_path)!r}), mps_binary={exe!r}))\n"
        "plant.start()\n"
        "print(plant._actuator.pid, plant._inference.pid, flush=True)\n"
        "while True:\n"
        "    plant.step(Actuation(0.0, 100.0), 0.5)\n")
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            cwd=root, env={**__import__("os").environ, "PYTHONPATH": str(root)})
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert record.read_text().splitlines()[-1] == "cmd quit"
    assert pids and not any(alive(p) for p in pids)


@pytest.mark.slow
def test_mps_study_measures_shadow_and_cold_restarts(tmp_path, fake_mps):
    from harness.hil.mps_study import _write_csv, mps_study, summarize

    exe, _ = fake_mps
    levels, restarts = mps_study((100, 30), period_s=0.4, settle_periods=0, measure_periods=1,
                                 config=cpu_config(tmp_path, mps_binary=exe))
    assert [(r["mode"], r["mps_pct"]) for r in levels] == [
        ("cold", 100.0), ("cold", 30.0), ("shadow", 100.0), ("shadow", 30.0)]
    for mode in ("cold", "shadow"):
        hi, lo = (r["latency_ms"] for r in levels if r["mode"] == mode)
        assert lo < hi  # the fake inference sees the training's smaller MPS share
    cold, shadow = restarts
    assert cold["mode"] == "cold" and not cold["shadow"] and cold["ok"]
    assert shadow["mode"] == "shadow" and shadow["shadow"] and shadow["ok"]
    assert cold["downtime_s"] > 0 and shadow["downtime_s"] == 0
    assert shadow["gap_s"] < cold["gap_s"]
    text = summarize(levels, restarts)
    assert "median iteration gap" in text and "| shadow | 100 | 30 | True |" in text
    _write_csv(tmp_path / "r.csv", restarts)
    assert (tmp_path / "r.csv").read_text().startswith("mode,")
