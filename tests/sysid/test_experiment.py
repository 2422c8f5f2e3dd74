"""The experiment runner against a callable and a Plant-like object (duck typing)."""

import math
from dataclasses import dataclass

import numpy as np
import pytest

from sysid import (
    ExcitationActuation,
    fit_static,
    measurement_value,
    run_experiment,
    white_noise,
)


@dataclass
class Period:
    mean_ms: float
    p99_ms: float
    count: int = 1


class FakePlant:
    """Plant-like: step(actuation, period_s) -> object with mean_ms/p99_ms."""

    def __init__(self, restart_periods=0):
        self.mps_pct = 50.0
        self.calls = []
        self.restart_left = 0
        self.restart_periods = restart_periods

    def step(self, act, period_s):
        self.calls.append((act.sleep_s, act.mps_pct, act.mps_changed, period_s))
        if self.mps_pct is None:  # first actuation starts the processes
            self.mps_pct = act.mps_pct
        if act.mps_changed:
            self.mps_pct = act.mps_pct
            self.restart_left = self.restart_periods
        if self.restart_left:
            self.restart_left -= 1
            return Period(math.nan, math.nan, 0)
        lat = 95.0 - 12.0 * act.sleep_s + 0.1 * self.mps_pct
        return Period(lat, lat * 1.2)


def test_callable_plant():
    d = run_experiment(lambda s: 90.0 - 10.0 * s, [0.1, 0.5, 0.9], period_s=2.0)
    np.testing.assert_allclose(d.y, [89.0, 85.0, 81.0])
    assert d.period_s == 2.0 and d.meta["statistic"] == "mean"


def test_plant_like_object_mean_and_p99():
    u = white_noise(30, 0.0, 1.0, seed=0)
    plant = FakePlant()
    d = run_experiment(plant, u, period_s=4.0, meta={"plant": "fake"})
    f = fit_static(d.u, d.y)
    assert f.gain == pytest.approx(-12.0) and f.offset == pytest.approx(100.0)
    assert all(c[3] == 4.0 and c[1] == 50.0 and not c[2] for c in plant.calls)
    assert d.meta["plant"] == "fake" and d.meta["mps_pct"] == 50.0
    p = run_experiment(FakePlant(), u, statistic="p99")
    np.testing.assert_allclose(p.y, 1.2 * d.y)


def test_mps_level_is_set_once_and_warmup_skips_restart():
    plant = FakePlant(restart_periods=2)
    u = white_noise(10, 0.0, 1.0, seed=1)
    d = run_experiment(plant, u, mps_pct=80.0, warmup=2)
    assert len(d) == 10 and np.all(np.isfinite(d.y))
    assert [c[2] for c in plant.calls] == [True] + [False] * 11
    assert plant.mps_pct == 80.0


def test_invalid_periods_raise_or_drop():
    u = white_noise(10, 0.0, 1.0, seed=1)
    with pytest.raises(ValueError, match="no finite mean latency in 2 period"):
        run_experiment(FakePlant(restart_periods=2), u, mps_pct=80.0)
    d = run_experiment(FakePlant(restart_periods=2), u, mps_pct=80.0, on_invalid="drop")
    assert len(d) == 8 and d.meta["dropped"] == 2
    np.testing.assert_array_equal(d.u, u[2:])


def test_custom_actuation_factory_and_progress():
    seen, ticks = [], []

    class P:
        def step(self, act, period_s):
            seen.append(act)
            return {"mean_ms": 10.0 + act.sleep_s}

    run_experiment(P(), [0.0, 1.0], actuation=lambda s: ExcitationActuation(s, 30.0),
                   progress=lambda k, n: ticks.append((k, n)))
    assert [a.mps_pct for a in seen] == [30.0, 30.0]
    assert ticks == [(1, 2), (2, 2)]


@pytest.mark.parametrize("kwargs, msg", [
    ({"plant": 42}, "plant must have step"),
    ({"statistic": "p50"}, "statistic must be"),
    ({"on_invalid": "skip"}, "on_invalid must be"),
    ({"mps_pct": 0.0}, r"mps_pct must be in \(0, 100\]"),
    ({"u": []}, "u is too short"),
    ({"meta": [1]}, "meta must be a mapping"),
    ({"meta": {"statistic": "p99"}}, "meta must not set 'statistic'"),
    ({"meta": {"mps_pct": 50, "dropped": 0}}, "meta must not set 'dropped', 'mps_pct'"),
])
def test_bad_arguments(kwargs, msg):
    args = {"plant": lambda s: s, "u": [0.1, 0.2], **kwargs}
    with pytest.raises(ValueError, match=msg):
        run_experiment(args.pop("plant"), args.pop("u"), **args)


def test_unreadable_measurement():
    with pytest.raises(ValueError, match="cannot read a 'mean' latency"):
        run_experiment(lambda s: object(), [0.1])


def test_plant_without_a_current_mps_gets_100():
    plant = FakePlant()
    plant.mps_pct = None  # not started yet, as a fresh simulated plant
    d = run_experiment(plant, [0.2, 0.4])
    assert d.meta["mps_pct"] == 100.0
    assert plant.calls[0][1] == 100.0


@pytest.mark.parametrize("m", ["90", b"90", [5.0], (90.0,), np.array([90.0]), True])
def test_measurement_that_is_not_one_value_is_refused(m):
    with pytest.raises(TypeError, match="cannot read a 'mean' latency from a"):
        measurement_value(m)


@pytest.mark.parametrize("count", ["a", 1.5, None, True])
def test_measurement_count_must_be_whole(count):
    with pytest.raises(ValueError, match="count must be a whole number"):
        measurement_value({"mean_ms": 90.0, "count": count})


def test_measurement_numbers_still_read():
    assert measurement_value(np.float32(2.5)) == 2.5
    assert measurement_value(np.array(3.0)) == 3.0
    assert measurement_value({"mean": 90.0, "count": 3.0}) == 90.0


def test_plant_returning_a_list_is_refused_not_dropped():
    with pytest.raises(TypeError, match="from a list measurement"):
        run_experiment(lambda x: [95 - 12 * x], [0.1, 0.2, 0.3], on_invalid="drop")


def test_meta_is_kept_next_to_what_is_recorded():
    d = run_experiment(lambda s: s, [0.1, 0.2], statistic="p99", meta={"plant": "sim"})
    assert d.meta["statistic"] == "p99" and d.meta["plant"] == "sim"


def test_dropping_every_period_says_so():
    """on_invalid='drop' with no finite reading at all said "u is too short: 0 sample(s)"."""
    with pytest.raises(ValueError, match=r"^the plant returned no finite mean latency in any "
                                         r"of the 3 period\(s\): nothing to record"):
        run_experiment(lambda s: float("nan"), [0.1, 0.2, 0.3], on_invalid="drop")
    d = run_experiment(lambda s: float("nan") if s < 0.15 else 9.0, [0.1, 0.2, 0.3],
                       on_invalid="drop")
    assert d.u.tolist() == [0.2, 0.3] and d.meta["dropped"] == 1
