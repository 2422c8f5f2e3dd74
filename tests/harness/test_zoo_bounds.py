"""The restart-paying references beside the training-vs-oracle figure
(:mod:`harness.experiments.zoo_bounds`): short traces, one seed, well under a second each."""

import numpy as np
import pytest

from harness.experiments import zoo_bounds as zb
from harness.sim import zoo

LOADS = zoo.load_trace(120, seed=0)


@pytest.mark.parametrize("name", ["ours", "hyperbolic", "mixture", "random"])
def test_hindsight_sits_between_the_references_and_the_per_period_oracle(name):
    shares, R, oracle = zb.rate_table(name, 0, LOADS)
    held_all_day = R.sum(axis=0).max() / oracle.sum()
    h = zb.hindsight(name, 0, LOADS)
    c, moves = zb.causal(name, 0, LOADS)
    assert shares[0] == 20.0 and shares[-1] == 100.0 and R.shape == (len(LOADS), 81)
    assert h <= 1.0 + 1e-12
    assert h >= held_all_day - 1e-12
    assert h > c > 0.5
    assert moves >= 1


def test_the_table_is_the_oracle_held_to_each_share():
    _, base, slo = zb._plant("mixture", 1)
    shares, R, oracle = zb.rate_table("mixture", 1, LOADS[:5])
    for k, q in enumerate(LOADS[:5]):
        assert oracle[k] == zoo.oracle_rate(base, slo, q)
        for i in (0, 30, 80):
            assert R[k, i] == zoo.oracle_rate(base, slo, q, levels_pct=(shares[i],))


@pytest.mark.parametrize("name", ["hyperbolic", "queue"])
def test_without_restarts_hindsight_is_the_per_period_oracle(name):
    assert zb.hindsight(name, 0, LOADS, restart_s=0.0) == pytest.approx(1.0, rel=1e-9)


def test_hindsight_falls_with_the_restart():
    h = [zb.hindsight("hyperbolic", 0, LOADS, restart_s=c) for c in (0.0, 4.0, 10.0, 30.0)]
    assert h[0] > h[1] > h[2] >= h[3]


@pytest.mark.parametrize("name", ["hyperbolic", "random"])
def test_the_causal_rule_moves_less_when_a_move_costs_more(name):
    cheap = zb.causal(name, 0, LOADS, restart_s=2.0)[1]
    dear = zb.causal(name, 0, LOADS, restart_s=30.0)[1]
    assert cheap > dear >= 1


def test_hindsight_path_by_hand():
    # share 0 trains 1 it/s for two periods, then half that; share 1 the other way round
    R = np.array([[1.0, 0.5], [1.0, 0.5], [0.5, 1.0], [0.5, 1.0]])
    # staying on either trains 12; switching to share 1 at period 2 loses 2 s of it: 14
    assert zb.hindsight_path_value(R, 2.0, 4.0) == pytest.approx(4 + 4 + 1 * (4 - 2) + 4)
    # a 6-s restart costs more than the switch gains: hold a share all day
    assert zb.hindsight_path_value(R, 6.0, 4.0) == pytest.approx(12.0)
    assert zb.hindsight_path_value(R, 0.0, 4.0) == pytest.approx(16.0)


def test_causal_path_by_hand():
    # share 100 trains twice share 50's rate: the regret grows 4 s a period and passes the
    # 10-s restart after the third; the restart then takes the next two periods and 2 s of the
    # sixth
    R = np.tile([1.0, 2.0], (6, 1))
    total, moves = zb.causal_path(R, np.array([50.0, 100.0]), 10.0, 4.0, start=50.0, min_hold=1)
    assert moves == 1
    assert total == pytest.approx(3 * 4 + 0 + 0 + 2 * 2)
    # a gap that closes resets the regret: no move
    R2 = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 1.0]] * 4)
    assert zb.causal_path(R2, np.array([50.0, 100.0]), 10.0, 4.0, start=50.0,
                          min_hold=1)[1] == 0


def test_forecast_path_by_hand():
    # share 100 trains twice share 50's rate at every load: over 3 periods the gain (12
    # iterations) does not pay the 10-s restart at 2 it/s (20); over 10 periods it does (40 > 20)
    R = np.tile([1.0, 2.0], (6, 1))
    shares = np.array([50.0, 100.0])

    def rates_at(q):
        return np.tile([1.0, 2.0], (len(q), 1))

    kw = {"start": 50.0, "min_hold": 1}
    assert zb.forecast_path(R, np.ones(6), shares, rates_at, 10.0, 4.0, horizon=3,
                            **kw) == (pytest.approx(24.0), 0)
    # it moves after period 0; the restart takes periods 1 and 2 and 2 s of period 3
    total, moves = zb.forecast_path(R, np.ones(6), shares, rates_at, 10.0, 4.0, horizon=10,
                                    **kw)
    assert moves == 1 and total == pytest.approx(4 + 0 + 0 + 2 * 2 + 8 + 8)


def test_the_forecast_moves_ahead_of_a_rising_load():
    # share 100's rate is the load, share 50's is 1: 100 is the better share past load 1,
    # half-way through the ramp. With an 8-s restart the trend moves in time to pay it back
    # (within 2.2 iterations of hindsight's 177.1); a flat forecast (window 2) waits until
    # the gain at today's load pays, the rent-or-buy rule until the gap has cost the restart
    loads = np.linspace(0.5, 1.5, 41)
    shares = np.array([50.0, 100.0])

    def rates_at(q):
        return np.column_stack([np.ones(len(q)), q])

    R = rates_at(loads)
    kw = {"horizon": 10, "start": 50.0, "min_hold": 1}
    trend, moves = zb.forecast_path(R, loads, shares, rates_at, 8.0, 4.0, **kw)
    flat, flat_moves = zb.forecast_path(R, loads, shares, rates_at, 8.0, 4.0, window=2, **kw)
    late, late_moves = zb.causal_path(R, shares, 8.0, 4.0, start=50.0, min_hold=1)
    assert moves == flat_moves == late_moves == 1
    assert zb.hindsight_path_value(R, 8.0, 4.0) >= trend > flat + 5 > late + 5


@pytest.mark.parametrize("name", ["hyperbolic", "random"])
def test_the_forecast_sits_under_hindsight(name):
    f, moves = zb.forecast(name, 0, LOADS)
    assert 0.5 < f <= zb.hindsight(name, 0, LOADS) + 1e-9
    assert moves >= 1


def test_lookahead_path_by_hand():
    # share 100 trains twice share 50's rate: over 3 periods known ahead the gain (12
    # iterations) does not pay the 10-s restart at 2 it/s; over the 7 left it does (28 > 20).
    # It moves after period 0; the restart takes periods 1, 2 and 2 s of period 3
    R = np.tile([1.0, 2.0], (8, 1))
    shares = np.array([50.0, 100.0])
    kw = {"start": 50.0, "min_hold": 1}
    assert zb.lookahead_path(R, shares, 10.0, 4.0, horizon=3, **kw) == (pytest.approx(32.0), 0)
    assert zb.lookahead_path(R, shares, 10.0, 4.0, horizon=10, **kw) == (
        pytest.approx(4 + 0 + 0 + 2 * 2 + 4 * 8), 1)


def test_foresight_of_the_whole_ramp_is_hindsight():
    # share 100's rate is the load, share 50's is 1, the restart 8 s: one period of foresight
    # never pays a restart longer than the period; foresight of the ramp's rest moves at the
    # hindsight path's point (within the recursion's charge of the restart, 0.1 iteration)
    loads = np.linspace(0.5, 1.5, 41)
    shares = np.array([50.0, 100.0])
    R = np.column_stack([np.ones(41), loads])
    kw = {"start": 50.0, "min_hold": 1}
    assert zb.lookahead_path(R, shares, 8.0, 4.0, horizon=1, **kw) == (pytest.approx(164.0), 0)
    short, _ = zb.lookahead_path(R, shares, 8.0, 4.0, horizon=10, **kw)
    whole, moves = zb.lookahead_path(R, shares, 8.0, 4.0, horizon=41, **kw)
    best = zb.hindsight_path_value(R, 8.0, 4.0)
    assert moves == 1 and best - 0.2 < whole <= best and short < whole - 1


@pytest.mark.parametrize("name", ["hyperbolic", "random"])
def test_foresight_sits_under_hindsight_and_pays(name):
    whole, _ = zb.lookahead(name, 0, LOADS, horizon=len(LOADS))
    assert zb.lookahead(name, 0, LOADS, horizon=1)[0] < whole <= zb.hindsight(name, 0, LOADS)


@pytest.mark.parametrize(("kw", "field"), [({"horizon": 0}, "horizon"),
                                           ({"window": 1}, "window"),
                                           ({"min_hold": 0}, "min_hold")])
def test_the_forecast_refuses_a_bad_setting(kw, field):
    with pytest.raises(ValueError, match=field):
        zb.forecast("hyperbolic", 0, LOADS[:20], **kw)
    if field != "window":
        with pytest.raises(ValueError, match=field):
            zb.lookahead("hyperbolic", 0, LOADS[:20], **kw)


@pytest.mark.parametrize(("kw", "field"), [
    ({"name": "nope"}, "name"),
    ({"seed": -1}, "seed"),
    ({"loads": []}, "loads"),
    ({"loads": [1.0, np.nan]}, "loads"),
    ({"loads": np.ones((3, 2))}, "loads"),
    ({"mode": "p50"}, "mode"),
    ({"levels": (0.0, 50.0)}, "levels"),
    ({"levels": (101.0,)}, "levels"),
    ({"restart_s": -1.0}, "restart_s"),
    ({"period_s": 0.0}, "period_s"),
    ({"start": 55.5}, "start"),
    ({"min_hold": 0}, "min_hold"),
])
def test_bad_input_names_its_field(kw, field):
    args = {"name": "hyperbolic", "seed": 0, "loads": LOADS[:20], **kw}
    with pytest.raises(ValueError, match=field):
        zb.causal(**args)
    with pytest.raises(ValueError, match=field):
        zb.forecast(**args)
    with pytest.raises(ValueError, match=field):
        zb.lookahead(**args)
    if field not in ("start", "min_hold"):
        with pytest.raises(ValueError, match=field):
            zb.hindsight(**args)
