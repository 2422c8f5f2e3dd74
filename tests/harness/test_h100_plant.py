"""The simulated plant's spatial-share backends and the ``h100`` preset calibrated to the
H100 runs in docs/results (time slicing without MPS, green-context partitions with and without
MPS, the steep MPS corner, resize timing)."""

import math
from pathlib import Path

import numpy as np
import pytest

from gpucontrol import Actuation
from harness.results import read_csv
from harness.sim.physics import BACKENDS, ColocationParams
from harness.sim.presets import PRESETS, shipped_calibration, suggested_slo_ms
from harness.sim.simulated import SimulatedColocation

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"

#: The H100 table of the issue "Restart-free spatial sharing end to end": per backend and
#: commanded training share, mean inference latency (ms) and training iterations/s.
TABLE = {
    "mps-restart": {100: (181.0, 4.67), 75: (44.6, 2.67), 50: (27.5, 1.67), 25: (21.4, 0.67)},
    "green-context": {100: (40.4, 2.33), 75: (40.4, 1.50), 50: (40.4, 1.17), 25: (40.4, 0.67)},
    "green-context+mps": {100: (182.0, 4.83), 75: (33.9, 3.00), 50: (24.7, 2.00),
                          25: (20.9, 0.83)},
    "sleep": {100: (40.5, 2.33), 75: (34.6, 1.83), 50: (29.4, 1.50), 25: (23.4, 0.50)},
}


def _levels():
    rows = read_csv(RESULTS / "spatial" / "levels.csv")
    rows += read_csv(RESULTS / "spatial_mps" / "levels.csv")
    return {(r["backend"], int(r["share_pct"])): r for r in rows}


def test_the_table_is_the_measured_files():
    """The table the check uses is the committed runs' levels.csv, rounded."""
    levels = _levels()
    for b, shares in TABLE.items():
        for share, (lat, its) in shares.items():
            r = levels[(b, share)]
            assert r["latency_ms"] == pytest.approx(lat, abs=0.06)
            assert r["training_throughput"] == pytest.approx(its, abs=0.006)


def _measure(backend, share, sleep_s, seed=3):
    """The spatial study's procedure on the simulated plant: a warm-up, then 8 periods of
    2 s at the level (its 3, longer for a steadier mean)."""
    plant = SimulatedColocation.preset("h100", backend=backend, seed=seed)
    act = Actuation(sleep_s, 100.0 if backend == "sleep" else float(share))
    for _ in range(2):
        plant.step(act, 2.0)
    res = [plant.step(act, 2.0) for _ in range(8)]
    lat = sum(r.mean_ms * r.count for r in res) / sum(r.count for r in res)
    return lat, sum(r.training_iterations for r in res) / 16.0


@pytest.mark.parametrize("backend", list(TABLE))
def test_the_h100_preset_reproduces_the_measured_table_within_15_pct(backend):
    """Latency and training rate, every backend at every share, within 15 % of the measured
    cell. One exception, the sleep backend's training rate at a sleep: the GPU harness drops
    the iterations whose log row (written after the sleep) lands after the period's end, so
    its count reads low (0.50 it/s at 25 %, where the latency implies about 1 it/s); there
    the cell is the rate the same rows give, 1 / (iteration + sleep)."""
    levels = _levels()
    for share, (lat, its) in TABLE[backend].items():
        row = levels[(backend, share)]
        sleep = float(row["sleep_s"])
        m_lat, m_its = _measure(backend, share, sleep)
        assert m_lat == pytest.approx(lat, rel=0.15), (backend, share, "latency")
        if backend == "sleep" and sleep > 0:
            busy = row["training_sm_share"] / row["training_throughput"]
            its = 1.0 / (busy + sleep)
        assert m_its == pytest.approx(its, rel=0.15), (backend, share, "it/s")


def test_the_noise_free_views_follow_the_simulation():
    """The expected views (what calibration fits) and the simulated runs agree."""
    for backend in BACKENDS:
        plant = SimulatedColocation.preset("h100", backend=backend)
        sleep = 0.2 if backend == "sleep" else 0.0
        share = 100.0 if backend == "sleep" else 75.0
        lat, its = _measure(backend, share, sleep, seed=5)
        assert plant.expected_latency_ms(sleep, share) == pytest.approx(lat, rel=0.03)
        assert plant.expected_training_throughput(sleep, share) == pytest.approx(its, rel=0.05)


def test_time_slicing_partitions_confine_the_training_but_not_the_latency():
    p = SimulatedColocation.preset("h100", backend="green-context")
    lat = [p.expected_latency_ms(0.0, s) for s in (25, 50, 75, 100)]
    its = [p.expected_training_throughput(0.0, s) for s in (25, 50, 75, 100)]
    assert max(lat) == pytest.approx(min(lat), rel=1e-12)
    assert its == sorted(its) and its[0] < 0.3 * its[-1]
    mps = SimulatedColocation.preset("h100", backend="green-context+mps")
    assert mps.expected_latency_ms(0.0, 25) < 0.6 * lat[0]     # inside MPS a partition helps


def test_the_mps_corner_is_steep():
    """Under MPS the inference keeps ~4 % of the SMs when the training may use them all: the
    corner between 75 % and 100 % (measured 44.6 -> 181 ms, 8.5x across 25..100 %)."""
    p = SimulatedColocation.preset("h100")
    lat = np.asarray(p.expected_latency_ms(0.0, np.array([25.0, 75.0, 100.0])))
    assert lat[2] / lat[0] > 6.0 and lat[2] / lat[1] > 3.0
    fig8 = SimulatedColocation.preset("fig8")
    assert fig8.expected_latency_ms(0.0, 100.0) / fig8.expected_latency_ms(0.0, 25.0) < 2.0


def test_partitions_follow_the_device_granularity_and_wave_quantization():
    p = SimulatedColocation.preset("h100").params
    assert p.sm_count == 132 and p.sm_granularity == 8
    gc = ColocationParams(**{**p.__dict__, "share_backend": "green-context"})
    sms = np.round(gc.sm_fraction(np.array([25.0, 50.0, 75.0, 100.0, 60.0])) * 132)
    assert list(sms) == [32, 64, 96, 132, 64]        # 60 % runs on the 50 % partition
    # the probe's matmul times on 132/96/64/32 SMs give the relative speeds
    probe = {int(r["sm_count"]): r["matmul_s"] for r in
             read_csv(RESULTS / "spatial" / "partitions.csv")}
    for n, t in probe.items():
        assert gc.speed(n / 132) == pytest.approx(probe[132] / t, rel=0.02)


def test_a_green_partition_changes_at_the_next_iteration_without_a_restart():
    plant = SimulatedColocation.preset("h100", backend="green-context+mps", seed=1,
                                       iteration_jitter=0.0)
    plant.step(Actuation(0.0, 100.0), 4.0)
    r = plant.step(Actuation(0.0, 50.0), 4.0)
    assert not r.restarting and r.mps_pct == 50.0
    assert plant._share == 50.0                           # taken within the period
    assert r.training_iterations > 0.5 * 4.0 * plant.expected_training_throughput(0.0, 50.0)


def test_an_mps_resize_takes_effect_after_its_delay():
    """MPS restarts with a shadow process pre-started: no downtime (``restart_s`` 0 on the
    H100), the new share from ``resize_delay_s`` (about 2 s) after the command."""
    plant = SimulatedColocation.preset("h100", seed=1)
    delay = plant.params.resize_delay_s
    assert 1.5 < delay < 2.5 and plant.params.restart_s == 0.0
    plant.step(Actuation(0.0, 100.0), 4.0)
    r = plant.step(Actuation(0.0, 50.0), 1.0)
    assert r.restarting and plant._share == 100.0         # still the old share
    r = plant.step(Actuation(0.0, 50.0), 2.0)
    assert plant._share == 50.0
    r = plant.step(Actuation(0.0, 50.0), 4.0)
    assert not r.restarting
    assert r.mean_ms == pytest.approx(plant.expected_latency_ms(0.0, 50.0), rel=0.1)


def test_the_h100_preset_is_the_shipped_calibration():
    doc = shipped_calibration("h100")
    assert doc["kind"] == "gpucontrol.plant-calibration" and doc["base_preset"] == "fig8"
    assert PRESETS["h100"] == {**PRESETS["fig8"], **doc["overrides"]}
    p = SimulatedColocation.preset("h100").params
    for k, v in doc["overrides"].items():
        assert getattr(p, k) == pytest.approx(v), k
    assert suggested_slo_ms("h100") == 30.0 and suggested_slo_ms("fig8") == 90.0
    assert suggested_slo_ms("fig4") is None
    with pytest.raises(ValueError, match="no shipped calibration"):
        shipped_calibration("fig8")


def test_the_suggested_slo_needs_a_real_sleep_on_every_backend():
    """30 ms: inside the sleep-only range (18.1 ms alone, 40.5 ms time-sliced unslept), so
    sleep alone needs a real sleep, and between the 75 % and 50 % partitions under MPS."""
    slo = suggested_slo_ms("h100")
    sleep = SimulatedColocation.preset("h100", backend="sleep")
    s = np.linspace(0.0, 1.0, 201)
    need = s[np.argmax(np.asarray(sleep.expected_latency_ms(s, 100.0)) <= slo)]
    assert 0.1 < need < 0.4
    gc = SimulatedColocation.preset("h100", backend="green-context+mps")
    assert gc.expected_latency_ms(0.0, 50.0) < slo < gc.expected_latency_ms(0.0, 75.0)


@pytest.mark.parametrize("field, value, match", [
    ("share_backend", "cuda", "share_backend must be one of mps, green-context"),
    ("green_shares_pct", (50.0, 25.0), "green_shares_pct must be increasing shares"),
    ("train_blocks", 512, "needs sm_count > 0"),
    ("timeslice_switch_loss", 0.5, "must be < 1"),
    ("resize_delay_s", -1.0, r"resize_delay_s must be a number in \[0.0, 600.0\]"),
])
def test_bad_backend_settings_are_named(field, value, match):
    with pytest.raises(ValueError, match=match):
        ColocationParams(**{field: value})
    with pytest.raises(ValueError, match="backend must be one of"):
        SimulatedColocation.preset("h100", backend="cuda")


def test_the_fig_presets_keep_their_physics():
    """The new fields default to the GPUColo presets' physics: MPS caps, no wave quantization,
    no slow-down of the training, no switch loss (their own tests hold the numbers)."""
    p = SimulatedColocation.preset("fig8").params
    assert (p.share_backend, p.sm_count, p.train_blocks, p.train_interference,
            p.timeslice_switch_loss, p.resize_delay_s) == ("mps", 0, 0, 0.0, 0.0, 0.0)
    assert math.isclose(float(p.train_rate(80.0, 100.0)), float(p.train_share(80.0, 100.0)))
