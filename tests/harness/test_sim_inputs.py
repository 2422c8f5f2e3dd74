"""Bad input to the simulated plant's API and the zoo's: a ValueError (TypeError for what is
not a number) that names the argument, never a silent misreading or numpy's own error."""

from __future__ import annotations

import numpy as np
import pytest

from harness.sim import zoo
from harness.sim.physics import ColocationParams
from harness.sim.simulated import SimulatedColocation


@pytest.mark.parametrize(("field", "value"), [
    ("batch", True),                   # would run at batch 1
    ("mps_enabled", "no"),             # a non-empty string is truthy: MPS on
    ("keep_samples", "yes"),
    ("measurement_delay", True),
    ("measurement_delay", 1.0),
    ("green_shares_pct", "25"),        # read as the shares 2 % and 5 %
])
def test_params_refuse_values_of_the_wrong_kind(field, value):
    with pytest.raises(ValueError, match=field):
        ColocationParams(**{field: value})
    with pytest.raises(ValueError, match=field):
        SimulatedColocation.preset("fig8", **{field: value})


def test_params_keep_accepting_numpy_ints_and_json_lists():
    p = ColocationParams(batch=np.int64(105), measurement_delay=np.int64(1),
                         mps_enabled=np.bool_(True), green_shares_pct=[25, 50, 100])
    assert p.green_shares_pct == (25.0, 50.0, 100.0)


@pytest.mark.parametrize("name", ["ours", "hyperbolic", "mixture", "delayed", "queue", "h100",
                                  "random"])
@pytest.mark.parametrize(("kw", "arg"), [({"seed": -1}, "seed"), ({"seed": "3"}, "seed"),
                                         ({"seed": None}, "seed"), ({"seed": 1.5}, "seed"),
                                         ({"noise_seed": -2}, "noise_seed"),
                                         ({"restart_s": "a"}, "restart_s")])
def test_make_plant_names_a_bad_seed(name, kw, arg):
    with pytest.raises((ValueError, TypeError), match=arg):
        zoo.make_plant(name, **kw)


def test_analytic_plant_checks_its_own_seed():
    with pytest.raises(ValueError, match="seed"):
        zoo.HyperbolicPlant(seed=-1)


@pytest.mark.parametrize(("args", "kw", "arg"), [
    ((-5,), {}, "periods"), ((1.5,), {}, "periods"), (("10",), {}, "periods"),
    ((10**9,), {}, "periods"),                        # would loop for minutes
    ((10,), {"seed": -1}, "seed"), ((10,), {"swing": -0.1}, "swing"),
    ((10,), {"swing": float("nan")}, "swing"), ((10,), {"jitter": -1.0}, "jitter"),
    ((10,), {"steps": "x"}, "steps"), ((10,), {"steps": [(5,)]}, "steps"),
    ((10,), {"steps": [(5, "a")]}, "steps factor"),
    ((10,), {"steps": [(-1, 1.1)]}, "steps period"),   # would step the last period only
    ((10,), {"steps": [(50, 1.1)]}, "steps period"),   # would step nothing
    ((10,), {"steps": [(5, 0.0)]}, "steps factor"),
])
def test_load_trace_names_a_bad_argument(args, kw, arg):
    with pytest.raises((ValueError, TypeError), match=arg):
        zoo.load_trace(*args, **kw)


def test_load_trace_unchanged_for_good_arguments():
    q = zoo.load_trace(300, seed=2, steps=((100, 1.3),))
    assert q.shape == (300,) and q[100] / q[99] > 1.2
    assert zoo.load_trace(0).size == 0


@pytest.mark.parametrize(("loads", "period", "arg"), [([1.0, -1.0], 4.0, "loads"),
                                                      ([1.0, float("nan")], 4.0, "loads"),
                                                      ("abc", 4.0, "loads"),
                                                      ([1.0, 1.1], 0.0, "period_s")])
def test_load_scenario_names_a_bad_argument(loads, period, arg):
    with pytest.raises((ValueError, TypeError), match=arg):
        zoo.load_scenario(loads, period)


@pytest.mark.parametrize(("kw", "arg"), [({"slo_ms": -1.0}, "slo_ms"), ({"load": 0.0}, "load"),
                                         ({"statistic": "p50"}, "statistic")])
def test_oracle_rate_names_a_bad_argument(kw, arg):
    a = {"slo_ms": 90.0, "load": 1.0, "statistic": "mean", **kw}
    with pytest.raises(ValueError, match=arg):
        zoo.oracle_rate(zoo.make_plant("hyperbolic"), a["slo_ms"], a["load"], a["statistic"])


@pytest.mark.parametrize(("kw", "arg"), [({"periods": 0}, "periods"),
                                         ({"sleep_bounds_s": (1.0, 0.0)}, "sleep_bounds_s"),
                                         ({"sleep_bounds_s": (-1.0, 1.0)}, "sleep_bounds_s"),
                                         ({"statistic": "p50"}, "statistic")])
def test_white_noise_record_names_a_bad_argument(kw, arg):
    with pytest.raises(ValueError, match=arg):
        zoo.white_noise_record(zoo.make_plant("hyperbolic"), **kw)


@pytest.mark.parametrize("periods", [["x"], [1.5], [-1], "12", 3])
def test_glitch_plant_names_bad_periods(periods):
    with pytest.raises((ValueError, TypeError), match="periods"):
        zoo.GlitchPlant(zoo.make_plant("hyperbolic"), periods)


def test_glitch_plant_takes_any_iterable_of_periods():
    inner = zoo.make_plant("hyperbolic")
    assert zoo.GlitchPlant(inner, {4, 5}).periods == {4, 5}
    assert zoo.GlitchPlant(inner, np.arange(2)).periods == {0, 1}
    assert zoo.GlitchPlant(inner, range(0, 6, 3)).periods == {0, 3}
