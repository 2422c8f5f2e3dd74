"""The default controller on plants it was not built on (short zoo runs, seconds each).

Each plant is identified the way a user would (60 periods of white-noise sleep, a static fit)
and then controlled under a synthetic production-like load. The bounds are looser than the
benchmark targets (benchmarks/control_quality.py reports those) because these runs are short.
"""

import numpy as np
import pytest

from gpucontrol import LinearLatencyModel, TwoTierController
from harness.sim import zoo
from harness.sim.protocol import run_loop
from sysid import fit_static

SLO = {"ours": 90.0, "hyperbolic": 80.0, "mixture": 8.0, "delayed": 80.0, "queue": 60.0,
       "h100": 30.0}


def _plants(shortfall):
    """Every zoo plant; on "h100" (the H100 preset, steep MPS corner) the measured shortfall
    is expected (strict: a fix turns it into a failure to remove the mark)."""
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=shortfall))
            if n == "h100" else n for n in zoo.PLANTS]


def _model(name, seed, statistic="mean"):
    u, y = zoo.white_noise_record(zoo.make_plant(name, seed=seed + 100), 60, seed=seed,
                                  statistic=statistic)
    f = fit_static(u, y)
    return LinearLatencyModel(f.gain, f.offset)


def _run(name, periods, *, seed=0, mode="mean", loads=None, plant=None, **kw):
    slo = SLO[name] * (1.15 if mode == "p99" else 1.0)
    ctl = TwoTierController(_model(name, seed, mode), slo, mode=mode, **kw)
    plant = plant if plant is not None else zoo.make_plant(name, seed=seed)
    loads = zoo.load_trace(periods, seed=seed) if loads is None else loads
    rec = run_loop(ctl, plant, periods, zoo.load_scenario(loads))
    lat = rec.col("latency_ms" if mode == "mean" else "p99_ms")
    if name == "delayed":
        lat = np.r_[lat[1:], np.nan]
    ok = np.isfinite(lat) & (lat < 1e6)
    base = plant
    while isinstance(base, (zoo.DelayedPlant, zoo.GlitchPlant, zoo.NoIterationPlant)):
        base = base.inner
    oracle = sum(zoo.oracle_rate(base, slo, q, mode) * 4.0 for q in loads)
    return {"over": float(np.mean(lat[ok] > 1.05 * slo)),
            "efficiency": float(rec.col("training_iterations").sum() / oracle),
            "changes": int(rec.col("mps_changed").sum()), "rec": rec}


@pytest.mark.parametrize("name", _plants(
    "h100: 14 % of periods over 1.05 SLO, 0.71 of the oracle (2026-11-27): after an MPS move "
    "the inner loop creeps ~0.01 s a period, its gain far below the plant's local one"))
def test_default_controller_holds_the_slo_and_trains_on_every_zoo_plant(name):
    r = _run(name, 300)
    assert r["over"] <= 0.04
    assert r["efficiency"] >= 0.82
    assert r["changes"] <= 12     # the short trace swings ±12 % in 300 periods: moves track it


@pytest.mark.parametrize("name", _plants(
    "h100: 14 % of periods over 1.05 SLO without iteration times (2026-11-27)"))
def test_without_an_iteration_time_the_default_still_holds_the_slo(name):
    """A node without the iteration hook, or a harness that passes only the latency readings:
    the outer loop predicts with an assumed 0.5 s and beta 1. It trains less
    (BENCHMARKS.md: 0.86-0.93 of the oracle on the trace against 0.92-0.95) but holds the SLO."""
    r = _run(name, 300, plant=zoo.NoIterationPlant(zoo.make_plant(name, seed=0)))
    assert r["over"] <= 0.04
    assert r["efficiency"] >= 0.75


def test_an_iteration_time_given_at_start_is_not_learnt_from():
    """``iteration_time_s`` with no readings is the same at every share: read as measured it
    taught beta = 0, which stopped every upward move (0.56 of the oracle on "ours", the
    latency 6 % under the SLO). Only measured times teach beta."""
    plant = zoo.make_plant("ours", seed=0)
    t0 = float(plant.iteration_s(100.0))
    r = _run("ours", 300, plant=zoo.NoIterationPlant(plant), iteration_time_s=t0)
    assert r["efficiency"] >= 0.8
    lat = r["rec"].col("latency_ms")[100:]
    assert abs(np.nanmedian(lat) / SLO["ours"] - 1.0) <= 0.03


@pytest.mark.parametrize("name", ["hyperbolic", "mixture"])
def test_default_controller_does_not_churn_at_steady_load(name):
    r = _run(name, 350, loads=np.ones(350))
    late = r["rec"].col("mps_changed")[100:].sum()
    assert late <= 1          # 250 periods = 10 outer evaluations


def test_a_glitch_never_moves_mps():
    plant = zoo.GlitchPlant(zoo.make_plant("hyperbolic", seed=0), periods=[60, 140])
    r = _run("hyperbolic", 200, plant=plant, loads=np.ones(200))
    rec = r["rec"]
    for k in (60, 140):
        assert rec[k]["reason"].startswith("hold") and not rec[k]["mps_changed"]
        assert rec[k]["next_mps_pct"] == rec[k]["mps_pct"]


def test_p99_mode_holds_a_tail_the_sleep_cannot_move():
    r = _run("mixture", 300, mode="p99")
    assert r["over"] <= 0.04
    assert r["efficiency"] >= 0.75


def test_paper_mode_is_kept_and_worse_on_the_hyperbolic_plant():
    paper = _run("hyperbolic", 300, outer="paper")
    default = _run("hyperbolic", 300)
    assert paper["over"] > default["over"]


@pytest.mark.parametrize("name", ["mixture", "delayed"])
def test_a_restart_free_share_decided_every_period_averages_its_readings(name):
    """A restart-free share may be decided every period (``outer_every=1``), but on the last
    eight readings at the current level: on one period's reading the loop chased the noise
    (hundreds of changes, 3.6-5.9 % of periods over 1.05 SLO on these two plants in the
    benchmark). Same seed, same plant, each way."""
    def run(min_window):
        plant = zoo.make_plant(name, seed=0, restart_s=0.0)
        slo = SLO[name]
        ctl = TwoTierController(_model(name, 0), slo, restart_s=0.0, outer_every=1)
        ctl.outer.min_window = min_window
        loads = zoo.load_trace(300, seed=0)
        rec = run_loop(ctl, plant, 300, zoo.load_scenario(loads))
        lat = rec.col("latency_ms")
        lat = np.r_[lat[1:], np.nan] if name == "delayed" else lat
        ok = np.isfinite(lat)
        return int(rec.col("mps_changed").sum()), float(np.mean(lat[ok] > 1.05 * slo))

    assert TwoTierController(_model(name, 0), SLO[name], restart_s=0.0,
                             outer_every=1).outer.min_window == 8
    one_changes, one_over = run(1)
    changes, over = run(8)
    assert changes <= one_changes / 3
    # (the restart-free feedforward now also keeps the one-reading loop near the SLO, so
    # "not worse" allows a period in a hundred: 2 periods over against 1 in one run)
    assert over <= 0.03 and over <= one_over + 0.01


@pytest.mark.parametrize("name", _plants(
    "h100: 3.2 % of periods over 1.05 SLO on four partitions, seed 0 (2026-11-27)"))
def test_four_green_context_partitions_hold_the_slo(name):
    """Four restart-free partitions (25/50/75/100, the green-context example of docs/daemon.md),
    decided every period, 600 periods, two seeds. Before, on "ours" and "mixture", a move
    up a whole partition overshot (the learnt slope under-predicted it), the failed level's
    ceiling was lifted by the headroom the move back down made, and the inner loop's gain had
    been cut to 1/8 by the plant's own alternation: 2.7-6.5 % of periods over 1.05 SLO."""
    for seed in (0, 1):
        plant = zoo.make_plant(name, seed=seed, restart_s=0.0)
        r = _run(name, 600, seed=seed, plant=plant, restart_s=0.0, outer_every=1,
                 mps_levels_pct=(25, 50, 75, 100))
        assert set(np.unique(r["rec"].col("mps_pct"))) <= {25.0, 50.0, 75.0, 100.0}
        assert r["over"] <= 0.025
        assert r["efficiency"] >= 0.9
