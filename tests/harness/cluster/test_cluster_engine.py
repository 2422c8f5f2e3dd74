"""The event-driven engine gives the 1 s loop's results; policy and plant sanity."""

from __future__ import annotations

import numpy as np
import pytest

from harness.cluster import (
    POLICIES,
    ControlParams,
    GpuType,
    PlantParams,
    SimConfig,
    Simulation,
    SyntheticConfig,
    Trace,
    simulate,
    synthetic,
)
from harness.cluster.policies import gpucolo_shares, rates
from harness.cluster.state import PowerOnOrder
from harness.cluster.traces import DAY, INFERENCE, TRAINING, load_openb


def small_trace(seed: int = 0, days: float = 0.25, gpus: float = 12.0) -> Trace:
    return synthetic(SyntheticConfig(days=days, target_gpus=gpus, inf_median_s=1500.0,
                                     train_median_s=3000.0, seed=seed))


def table(trace, **kw) -> Trace:
    n = len(kw["arrival"])
    base = {"mem_gb": np.full(n, 2.0), "beta": np.full(n, 0.3), "sigma": np.ones(n)}
    base.update(kw)
    return Trace("table", **{k: np.asarray(v) for k, v in base.items()})


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("placement", ["first-fit", "kace", "mudi"])
def test_event_engine_equals_one_second_loop(policy, placement):
    if policy == "nocolo" and placement != "first-fit":
        pytest.skip("nothing to place")
    tr = small_trace(seed=POLICIES.index(policy))
    horizon = 5 * 3600
    cfg = SimConfig(policy=policy, placement=placement, horizon_s=horizon)
    ev = Simulation(tr, cfg).run()
    st = Simulation(tr, cfg).run(stepwise=True)
    assert st.ticks == horizon
    assert ev.ticks < horizon / 2      # it skipped most seconds
    np.testing.assert_array_equal(ev.finish, st.finish)
    np.testing.assert_allclose(ev.daily_gpus, st.daily_gpus, rtol=1e-12)
    assert ev.mps_changes == st.mps_changes and ev.restarts == st.restarts
    assert (ev.finish >= 0).sum() > 20


def test_nocolo_counts_one_gpu_per_job():
    # 3 jobs of 100 s overlapping for 50 s: GPU-seconds 300 over a day
    tr = table(None, arrival=[0, 50, 50], work=[100.0, 100.0, 100.0], demand=[1.0, 1.0, 1.0],
               kind=[0, 1, 0])
    r = simulate(tr, "nocolo")
    assert r.daily_used[0] * DAY == pytest.approx(300.0)
    assert list(r.finish) == [100, 150, 150]
    assert r.violation_rate == 0.0


def test_fixed_shares_as_in_section_iii():
    # Table I of the GPUColo paper (Chen et al., ICDCS 2024): 4 jobs demanding 50 %;
    # first-fit by utilization puts 2 per GPU,
    # each gets its 50 % and none is slowed
    tr = table(None, arrival=[0, 0, 0, 0], work=[30.0, 35.0, 52.0, 52.0], demand=[0.5] * 4,
               kind=[0, 0, 1, 1], mem_gb=[2.5, 2.5, 7.0, 7.0], beta=[0.0] * 4)
    r = simulate(tr, "simple", plant=PlantParams(interference=0.0, max_speedup=1.0))
    assert r.peak_gpus == 2 and list(r.finish) == [30, 35, 52, 52]
    # Conservative 4:1 weights: training gets 20 % < its 25 % demand while the inference runs
    # (0.8x for 30 s), then the whole GPU (capped at 1x): 30 + (52 - 24) = 58
    tr1 = table(None, arrival=[0, 0], work=[30.0, 52.0], demand=[0.25, 0.25], kind=[0, 1],
                beta=[0.0, 0.0])
    r1 = simulate(tr1, "conservative", plant=PlantParams(interference=0.0, max_speedup=1.0))
    assert list(r1.finish) == [30, 58]


def test_separate_provisions_five_to_one():
    tr = table(None, arrival=[0, 0], work=[100.0, 100.0], demand=[0.6, 0.6], kind=[1, 1])
    r = simulate(tr, "separate", horizon_s=100, plant=PlantParams(max_speedup=1.0))
    assert r.daily_used[0] == pytest.approx(2.0)
    assert r.daily_gpus[0] == pytest.approx(12.0)   # 2 training GPUs -> 10 inference + 2


def test_gpucolo_controls_inference_to_its_setpoint():
    # one inference and one training job that together would slow the inference past its SLO
    tr = table(None, arrival=[0, 0], work=[20000.0, 20000.0], demand=[0.5, 0.5], kind=[0, 1],
               beta=[0.2, 0.8], sigma=[1.0, 1.0])
    sim = Simulation(tr, SimConfig(policy="gpucolo", horizon_s=3000))
    r = sim.run()
    g = sim.state.gpu[0]
    lat, ref = sim.controller.colo_latency_check(g)
    assert lat == pytest.approx(ref, rel=1e-12)
    # within one actuator step (1 ms of sleep) of the set point
    assert lat == pytest.approx(sim.controller.setpoint, abs=0.2)
    assert 0.0 < sim.controller.ctl.sleep[g] < 1.0
    assert r.controller_updates < 20      # settled and parked quickly


def test_colo_sum_form_equals_generic_plant_on_random_gpus():
    tr = small_trace(seed=5, gpus=30)
    sim = Simulation(tr, SimConfig(policy="gpucolo"))
    checks = []
    ctl = sim.controller
    orig = ctl.step

    def step(t):
        for g in list(sim.state.active):
            if sim.state.colo[g] and len(checks) < 200:
                checks.append(ctl.colo_latency_check(g))
        orig(t)
    ctl.step = step
    sim.run()
    assert len(checks) > 20
    a, b = np.array(checks).T
    np.testing.assert_allclose(a, b, rtol=1e-10)


def test_power_on_order_is_first_fit_by_power_on_order():
    # the search structure against the plain rule: among the GPUs that are on and where the
    # job fits, the one powered on first
    rng = np.random.default_rng(3)
    oo = PowerOnOrder(capacity=4)
    on: dict[int, tuple[int, float, float, int]] = {}    # slot -> (power-on count, u, m, pool)
    free, counter = list(range(200)), 0
    for _ in range(5000):
        if on and (len(on) > 150 or rng.uniform() < 0.45):
            g = int(rng.choice(list(on)))
            if rng.uniform() < 0.5:
                del on[g]
                oo.remove(g)
                free.append(g)
            else:
                o, _, _, pool = on[g]
                u, m = rng.uniform(0, 1), rng.uniform(0, 32)
                on[g] = (o, u, m, pool)
                oo.set(g, u, m)
        else:
            g = free.pop(int(rng.integers(len(free))))
            counter += 1
            pool = int(rng.integers(2))
            on[g] = (counter, 1.0, 32.0, pool)
            oo.add(g, 1.0, 32.0, pool)
        d, m = rng.uniform(0, 1), rng.uniform(0, 32)
        for pool in (None, 0, 1):
            fit = [(o, g) for g, (o, u, mm, pl) in on.items()
                   if u >= d - 1e-9 and mm >= m - 1e-9 and pool in (None, pl)]
            assert oo.first(d, m, pool) == (min(fit)[1] if fit else -1)
    assert oo.n <= 2 * len(on) + 40      # dead positions were dropped


def test_plant_equations():
    u = gpucolo_shares([0, 1], [0.5, 0.4], sleep=1.0, mps=50.0, restarting=False, smax=1.2,
                       iteration_s=1.0)
    assert u[1] == pytest.approx(0.4 * 0.5 * 0.5)
    assert u[0] == pytest.approx(0.5 * 1.2)           # capped at max_speedup
    r = rates([0.5, 0.2], [0.5, 0.4], [0.0, 0.5], [1.0, 1.0], 2.0, 1.0)
    assert r[0] == pytest.approx(2.0 / 1.1) and r[1] == pytest.approx(2.0 * 0.5)


def test_heterogeneous_gpus_speed_and_memory():
    tr = table(None, arrival=[0, 0], work=[100.0, 100.0], demand=[1.0, 1.0], kind=[1, 1],
               mem_gb=[10.0, 20.0])
    types = (GpuType("slow16", speed=0.5, mem_gb=16.0), GpuType("fast32", 2.0, 32.0))
    sim = Simulation(tr, SimConfig(policy="nocolo", gpu_types=types))
    r = sim.run()
    # job 0 fits the first (slow, 16 GB) slot; job 1 needs 32 GB and gets the fast one
    assert list(r.finish) == [200, 50]


@pytest.mark.parametrize("mode,factor,expect", [("rate", 0.96, 0), ("deadline", 0.96, 1)])
def test_slo_modes(mode, factor, expect):
    tr = table(None, arrival=[0], work=[1000.0], demand=[1.0], kind=[0])
    r = simulate(tr, "nocolo", slo_mode=mode, slo_factor=factor)
    assert r.violated[0] == expect


def test_config_validation():
    with pytest.raises(ValueError, match="unknown policy"):
        SimConfig(policy="magic")
    with pytest.raises(ValueError, match="placement"):
        SimConfig(placement="random")
    with pytest.raises(ValueError, match="slo_mode"):
        SimConfig(slo_mode="p99")
    with pytest.raises(ValueError, match="max_speedup"):
        PlantParams(max_speedup=0.5)
    with pytest.raises(ValueError, match="detune"):
        ControlParams(detune=2.5)


def test_openb_slice_runs_and_gpucolo_packs():
    tr = load_openb().window(120, 3)
    res = {p: simulate(tr, p) for p in ("nocolo", "gslice", "gpucolo")}
    assert res["gpucolo"].mean_gpus < res["nocolo"].mean_gpus
    assert res["gpucolo"].violation_rate <= res["gslice"].violation_rate + 0.05
    kinds = tr.kind
    assert (kinds == INFERENCE).any() and (kinds == TRAINING).any()


@pytest.mark.parametrize("field,value", [
    ("speed", 0.0), ("speed", -1.0), ("speed", float("nan")), ("mem_gb", 0.0),
    ("mem_gb", float("nan")), ("mem_gb", float("inf")), ("weight", 0), ("weight", -1),
    ("weight", 1.5)])
def test_gpu_type_refuses_bad_fields(field, value):
    # a NaN memory made the engine look for a fitting slot forever; a zero speed left every
    # job unfinished; a zero weight was silently taken as 1
    with pytest.raises(ValueError, match=f"GpuType {field} must be"):
        GpuType("x", **{field: value})


@pytest.mark.parametrize("field,value", [
    ("horizon_s", 0), ("horizon_s", -5), ("horizon_s", 1.5), ("seed", -1), ("seed", 1.5),
    ("slo_factor", "0.9"), ("slo_factor", float("nan")), ("gpu_types", ("gpu",))])
def test_sim_config_refuses_bad_fields(field, value):
    # horizon_s 0 ended in an IndexError, 1.5 ran; a bad seed failed deep inside numpy
    with pytest.raises((TypeError, ValueError), match=field):
        SimConfig(**{field: value})


@pytest.mark.parametrize("cls,field,value", [
    (ControlParams, "threshold", float("nan")), (ControlParams, "threshold", -1.0),
    (ControlParams, "sleep_max_s", -1.0), (ControlParams, "sleep_max_s", float("nan")),
    (ControlParams, "sleep_tolerance_s", -1.0), (ControlParams, "sleep_tolerance_s", 2.0),
    (ControlParams, "gslice_slack", float("nan")), (ControlParams, "gslice_slack", -1.0),
    (ControlParams, "outer_every", 2.5), (PlantParams, "train_iteration_s", float("inf")),
    (PlantParams, "interference", "0.5")])
def test_params_refuse_bad_fields(cls, field, value):
    # each was taken and the run went on with it
    with pytest.raises((TypeError, ValueError), match=f"{field} must be"):
        cls(**{field: value})


@pytest.mark.parametrize("column,value", [
    ("mem_gb", float("nan")), ("mem_gb", -1.0), ("work", float("nan")), ("work", float("inf")),
    ("arrival", -50), ("beta", float("nan")), ("sigma", -1.0), ("kind", 2)])
def test_trace_refuses_bad_task_values(column, value):
    # a NaN memory made the engine look for a fitting GPU forever; a NaN length was taken
    kw = {"arrival": [0, 10], "work": [100.0, 100.0], "demand": [0.5, 0.5], "kind": [0, 1]}
    kw[column] = [value, kw.get(column, [2.0, 2.0])[1]] if column in kw else [value, 1.0]
    with pytest.raises(ValueError, match=f"every task's {column} must be"):
        table(None, **kw)


def test_a_run_without_inference_tasks_has_no_violation_rate():
    # it reported 0.0 % SLO violations: a rate over no task at all
    from harness.cluster.figures import format_table, summary_rows

    tr = table(None, arrival=[0, 50], work=[100.0, 100.0], demand=[0.5, 0.5], kind=[1, 1])
    r = simulate(tr, "gpucolo")
    assert np.isnan(r.violation_rate)
    row = summary_rows([r], None)[0]
    assert format_table([row]).splitlines()[-1].split()[5] == "n/a"
    # with an inference task that met its SLO the rate is a true 0
    tr = table(None, arrival=[0, 50], work=[100.0, 100.0], demand=[0.5, 0.5], kind=[0, 1])
    assert simulate(tr, "nocolo").violation_rate == 0.0
