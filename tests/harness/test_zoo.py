"""The plant zoo: every plant follows the protocol, its noise-free views match its runs, and
the wrappers do what they say."""

import math

import numpy as np
import pytest

from gpucontrol import Actuation
from harness.sim import zoo
from harness.sim.protocol import Plant


@pytest.mark.parametrize("name", zoo.PLANTS)
def test_plant_protocol_and_expected_views(name):
    plant = zoo.make_plant(name, seed=1)
    assert isinstance(plant, Plant)
    act = Actuation(0.3, 80.0)
    rs = [plant.step(act, 4.0) for _ in range(12)]
    means = [r.mean_ms for r in rs[4:]]
    expect = float(plant.expected_latency_ms(0.3, 80.0))
    assert abs(np.mean(means) - expect) / expect < 0.08
    assert all(r.iteration_s > 0 for r in rs)
    tp = np.mean([r.training_iterations / r.period_s for r in rs[4:]])
    assert abs(tp - float(plant.expected_training_throughput(0.3, 80.0))) / tp < 0.15


def test_latency_falls_with_sleep_and_mps():
    for name in ("hyperbolic", "mixture", "ours", "queue"):
        p = zoo.make_plant(name)
        s = np.linspace(0, 1, 11)
        assert np.all(np.diff(p.expected_latency_ms(s, 100.0)) < 0)
        assert p.expected_latency_ms(0.0, 50.0) < p.expected_latency_ms(0.0, 100.0)


def test_queue_slope_near_sleep_0_is_many_times_the_white_noise_secant():
    """The queue plant is convex in the training's footprint: a user's white-noise fit over
    [0, 1] s reports a slope far under the local one near sleep 0 (the gain-schedule and
    ringing case a linear model meets)."""
    from sysid import fit_static

    u, y = zoo.white_noise_record(zoo.make_plant("queue", seed=100), 60, seed=0)
    secant = fit_static(u, y).gain
    p = zoo.make_plant("queue")
    local = float(p.expected_latency_ms(1e-4, 100.0) - p.expected_latency_ms(0.0, 100.0)) / 1e-4
    assert local / secant > 8.0


def test_mixture_p99_is_the_busy_latency_whatever_the_sleep():
    p = zoo.make_plant("mixture", seed=0)
    p99 = [p.step(Actuation(s, 100.0), 4.0).p99_ms for s in (0.0, 0.0, 1.0, 1.0)]
    assert abs(p99[1] - p99[3]) / p99[1] < 0.1          # sleep barely moves the tail
    low = [p.step(Actuation(0.0, 50.0), 4.0) for _ in range(4)][-1].p99_ms
    assert low < 0.7 * p99[1]                            # MPS does


def test_restart_downtime_and_load():
    p = zoo.make_plant("hyperbolic")
    p.step(Actuation(0.0, 100.0), 4.0)
    r = p.step(Actuation(0.0, 50.0), 4.0)
    assert r.restarting and r.training_iterations == 0.0
    before = p.step(Actuation(0.0, 50.0), 4.0).mean_ms
    p.set_load(load=1.3)
    assert p.step(Actuation(0.0, 50.0), 4.0).mean_ms > 1.2 * before
    with pytest.raises(ValueError, match="load"):
        p.set_load(batch=3)


def test_delay_and_glitch_wrappers():
    d = zoo.make_plant("delayed", seed=0)
    first = d.step(Actuation(0.0, 100.0), 4.0)
    assert first.count == 0 and math.isnan(first.mean_ms) and first.training_iterations > 0
    g = zoo.GlitchPlant(zoo.make_plant("hyperbolic"), periods=[1])
    rs = [g.step(Actuation(0.0, 100.0), 4.0) for _ in range(3)]
    assert rs[1].mean_ms == 1e12 and rs[2].mean_ms < 1e3


def test_outlier_periods_multiply_the_real_reading():
    clean = zoo.make_plant("hyperbolic", seed=1)
    out = zoo.GlitchPlant(zoo.make_plant("hyperbolic", seed=1), periods=[1], factor=3.0)
    a = [clean.step(Actuation(0.0, 100.0), 4.0) for _ in range(3)]
    b = [out.step(Actuation(0.0, 100.0), 4.0) for _ in range(3)]
    assert b[1].mean_ms == pytest.approx(3.0 * a[1].mean_ms)
    assert b[1].p99_ms == pytest.approx(3.0 * a[1].p99_ms)
    assert b[2].mean_ms == pytest.approx(a[2].mean_ms)     # the plant itself is untouched
    assert b[1].training_iterations == pytest.approx(a[1].training_iterations)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="factor"):
            zoo.GlitchPlant(clean, periods=[1], factor=bad)


def test_load_trace_scenario_and_oracle():
    q = zoo.load_trace(300, seed=2, steps=((100, 1.3),))
    assert q.shape == (300,) and q[150] > q[50]
    sc = zoo.load_scenario(q)
    assert sc.load_at(0.0)["load"] == pytest.approx(q[0], abs=1e-4)
    p = zoo.make_plant("hyperbolic")
    hi, lo = zoo.oracle_rate(p, 80.0, 1.0), zoo.oracle_rate(p, 80.0, 1.3)
    assert hi > lo > 0
    assert zoo.oracle_rate(p, 1.0, 1.0) == 0.0


def test_white_noise_record_is_a_user_identification():
    from sysid import fit_static

    u, y = zoo.white_noise_record(zoo.make_plant("hyperbolic"), 60, seed=0)
    fit = fit_static(u, y)
    assert fit.gain < 0 and len(u) == 60


def test_oracle_held_to_partitions_is_at_most_the_free_oracle():
    p = zoo.make_plant("hyperbolic")
    free = zoo.oracle_rate(p, 80.0, 1.0)
    held = zoo.oracle_rate(p, 80.0, 1.0, levels_pct=(25, 50, 75, 100))
    assert 0.0 < held <= free
    assert zoo.oracle_rate(p, 80.0, 1.0, levels_pct=[100]) <= held
    for bad in ([], [0.0], [101], [float("nan")]):
        with pytest.raises(ValueError, match="levels_pct"):
            zoo.oracle_rate(p, 80.0, 1.0, levels_pct=bad)


def test_the_oracle_cache_is_the_plants_own_and_goes_with_it():
    """Two plants of other physics at the same SLO and load get their own oracle; a freed
    plant's entries are dropped (a plant that takes over its id cannot read them)."""
    import gc

    from harness.sim.zoo_load import _ORACLE_CACHE

    a, b = zoo.make_plant("hyperbolic"), zoo.make_plant("queue")
    ra, rb = zoo.oracle_rate(a, 80.0, 1.0), zoo.oracle_rate(b, 80.0, 1.0)
    assert ra != rb and a in _ORACLE_CACHE and b in _ORACLE_CACHE
    n = len(_ORACLE_CACHE)
    del a
    gc.collect()
    assert len(_ORACLE_CACHE) == n - 1 and b in _ORACLE_CACHE
