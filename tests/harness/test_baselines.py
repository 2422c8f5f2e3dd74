"""Each baseline's defining behaviour."""

import math

import numpy as np
import pytest

from harness.experiments.burst import burst_scenario
from harness.experiments.common import build_controllers, identify_family
from harness.sim import baselines as B
from harness.sim.protocol import PlantActuation, run_loop
from harness.sim.simulated import SimulatedColocation


@pytest.fixture(scope="module")
def ref():
    return SimulatedColocation.preset("fig8")


@pytest.fixture(scope="module")
def family(ref):
    return identify_family(ref)


def plant(seed=0):
    return SimulatedColocation.preset("fig8", seed=seed)


def test_fixed_allocations_never_move():
    for ctl, inf, tr in [(B.FixedAllocation(0.3, 70.0), None, 70.0),
                         (B.FixedAllocation.simple(90.0), 50.0, 50.0),
                         (B.FixedAllocation.conservative(90.0), 40.0, 10.0)]:
        rec = run_loop(ctl, plant(), 8, burst_scenario(burst_s=(8, 20)))
        assert set(rec.col("mps_pct")) == {tr}
        assert set(rec.col("inference_mps_pct")) == {100.0 if inf is None else inf}
        assert not any(rec.col("restarting")) and not any(rec.col("inference_restarting"))


def test_simple_misses_the_slo_and_conservative_starves_training(ref):
    s = run_loop(B.FixedAllocation.simple(90.0), plant(), 10)
    c = run_loop(B.FixedAllocation.conservative(90.0), plant(), 10)
    assert np.mean(s.col("latency_ms")) > 90.0
    assert np.mean(c.col("training_throughput")) < 0.2 * np.mean(s.col("training_throughput"))


def test_fixed_allocation_validation():
    with pytest.raises(ValueError, match="mps_pct"):
        B.FixedAllocation(0.0, 0.5)
    with pytest.raises(ValueError, match="sleep_s"):
        B.FixedAllocation(-1.0, 50.0)


def test_sleep_only_never_touches_mps(family):
    ctl = B.sleep_only(family, 90.0, mps_pct=80.0)
    rec = run_loop(ctl, plant(), 60, burst_scenario(burst_s=(40, 200)))
    assert set(rec.col("mps_pct")) == {80.0}
    assert rec.col("sleep_s").max() == 1.0          # the burst saturates the sleep
    assert rec[0]["controller"] == "Sleep-only"


def test_mps_only_moves_only_mps_every_window():
    ctl = B.MPSOnly(90.0, 0.9, every=6, initial_mps_pct=80.0)
    rec = run_loop(ctl, plant(), 36)
    assert set(rec.col("sleep_s")) == {0.0}
    changes = np.flatnonzero(rec.col("mps_changed"))
    assert len(changes) >= 1 and all((k + 1) % 6 == 0 for k in changes)
    assert rec.col("mps_pct")[-1] < 80.0            # sleep 0 at MPS 80 is far above 90 ms


def test_mps_only_validation():
    with pytest.raises(ValueError, match="mps_gain"):
        B.MPSOnly(90.0, 0.0)
    with pytest.raises(ValueError, match="every"):
        B.MPSOnly(90.0, 1.0, every=0)


def test_gslice_keeps_the_sum_at_100_and_restarts_inference():
    ctl = B.GSliceExtended(90.0, every=6, initial_inference_pct=60.0)
    rec = run_loop(ctl, plant(), 48)
    assert np.allclose(rec.col("mps_pct") + rec.col("inference_mps_pct"), 100.0)
    assert set(rec.col("sleep_s")) == {0.0}
    changes = np.flatnonzero(rec.col("mps_changed"))
    assert len(changes) >= 2 and all((k + 1) % 6 == 0 for k in changes)
    # 60 % inference misses 90 ms: the inference share grows, and each change restarts it
    assert rec.col("inference_mps_pct")[changes[0] + 1] == 70.0
    for k in changes:
        assert rec[k + 1]["inference_restarting"] and rec[k + 1]["restarting"]


def test_gslice_shrinks_inference_when_well_below_slo():
    ctl = B.GSliceExtended(90.0, every=2, initial_inference_pct=90.0, step_down=5.0)
    act = ctl.update(70.0)
    assert not act.mps_changed
    act = ctl.update(70.0)
    assert isinstance(act, PlantActuation) and act.mps_changed
    assert act.inference_mps_pct == 85.0 and act.mps_pct == 15.0
    # inside the band [(1 - slack) SLO, SLO] nothing changes
    ctl.update(88.0)
    assert not ctl.update(88.0).mps_changed


def test_gslice_ignores_periods_without_requests():
    ctl = B.GSliceExtended(90.0, every=2, initial_inference_pct=70.0)
    from gpucontrol import Measurement

    ctl.update(Measurement(math.nan, count=0))
    act = ctl.update(Measurement(math.nan, count=0))
    assert not act.mps_changed and act.reason == "hold"


def test_oracle_point_is_the_best_static_point(ref):
    _s, _m, lat, tp, ok = B.best_static_point(ref, 90.0, batch=105)
    assert ok and lat <= 90.0
    # brute force on a coarse grid: nothing meeting the SLO trains faster
    S, M = np.meshgrid(np.linspace(0, 1, 21), np.arange(1, 101, 3.0))
    L = ref.expected_latency_ms(S, M, 105)
    TP = ref.expected_training_throughput(S, M, 105)
    assert TP[L <= 90.0].max() <= tp + 1e-9


def test_oracle_infeasible_slo_reports_least_latency(ref):
    _s, m, lat, _tp, ok = B.best_static_point(ref, 50.0, batch=105)
    assert not ok and lat > 50.0 and m == 1.0


def test_oracle_switches_per_phase_without_restarts(ref):
    sc = burst_scenario(burst_s=(40, 80))
    o = B.Oracle(ref, 90.0, sc, duration_s=120)
    assert [p.batch for p in o.points] == [105, 115, 105]
    assert o.points[1].mps_pct < o.points[0].mps_pct
    rec = run_loop(o, plant(), 30, sc)
    assert not any(rec.col("restarting"))
    mps = rec.col("mps_pct")
    assert mps[9] == o.points[0].mps_pct and mps[10] == o.points[1].mps_pct
    assert mps[20] == o.points[2].mps_pct
    again = run_loop(o, plant(1), 30, sc)          # reusable: phases follow plant time
    assert again.col("mps_pct").tolist() == mps.tolist()


def test_gpucolo_controllers(family):
    two = B.gpucolo_two_tier(family, 90.0)
    ours = B.gpucolo_midrange_adaptive(family, 90.0)
    sc = burst_scenario(burst_s=(60, 220))
    r2 = run_loop(two, plant(), 100, sc)
    r3 = run_loop(ours, plant(), 100, sc)
    for rec in (r2, r3):
        changes = np.flatnonzero(rec.col("mps_changed"))
        # the outer loop acts at most once per 25 counted periods (held periods not counted)
        assert len(changes) >= 1 and changes[0] == 24 and np.all(np.diff(changes) >= 25)
    assert np.all(np.isfinite(r3.col("gain_estimate")))
    assert np.all(np.isnan(r2.col("gain_estimate")))
    assert r2[0]["controller"] == "GPUColo two-tier"


def test_build_controllers_names(ref):
    from harness.experiments.common import CONTROLLER_NAMES

    ctls = build_controllers(CONTROLLER_NAMES, plant=ref, slo_ms=90.0,
                             scenario=burst_scenario(), duration_s=400)
    assert B.names(ctls) == list(CONTROLLER_NAMES)
    oracle = ctls[-1]
    open_ = ctls[0]
    assert (open_.sleep_s, open_.mps_pct) == (oracle.points[0].sleep_s, oracle.points[0].mps_pct)
