"""The daemon's controller on plants shaped after the 2026-11-28 H200 run (docs/results/h200):
the node agent through a burst, with the model the run gave it (the H100-calibrated
simulated preset's lines, identified without iteration times) and a training whose
iterations took 0.2 s where the model assumes 0.5 s.

Two failures seen there, each reproduced on a small closed-loop plant here:

* sleep only (time-sliced): the latency's slope near sleep 0 was 2.7x the model line's, and the
  GPUColo paper's deadbeat loop on that line cycled between sleep 0 and 0.116 s, half the
  periods over the SLO;
* green context + MPS: the model's lines read as duty laws at the assumed 0.5 s went negative
  at the 0.2 s the node reported, one reading taught a load of 10^10, and the outer loop held
  100 %, the share where the inference is slowest, for the whole run.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from gpucontrol import TwoTierController
from gpucontrol.measurement import Measurement
from gpucontrol.models import LatencyModelFamily, LinearLatencyModel, OperatingPoint, duty_form
from gpucontrol.node.config import DaemonConfig
from gpucontrol.node.controller import make_controller

SLO = 30.0
T = 4.0
#: The model the run's daemon got for sleep only: the h100 preset's line, one per level.
SLEEP_LINE = {"gain": -36.690986471303304, "offset": 40.36495616490759}
#: ... and for green context + MPS (share %: gain ms/s, offset ms).
GREEN_LINES = {25.0: (-1.1022542749618047, 20.2253997900112),
               50.0: (-8.108578978394512, 24.76599367864482),
               75.0: (-31.272992615725943, 36.498562357947435),
               100.0: (-357.89265338057254, 169.92213354699464)}
#: What the H200 identified on green context + MPS: the line over sleeps 0-0.4 s and the
#: iteration time per share (identify_summary.md of that run).
H200 = {25.0: (-1.81, 17.67, 1.04), 50.0: (-6.05, 20.77, 0.48), 75.0: (-23.04, 27.08, 0.33),
        100.0: (-137.84, 59.81, 0.21)}


def _cfg(tmp_path, doc, **kw):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    return DaemonConfig(training_pids=(4242,), slo_ms=SLO, model=str(path), period_s=T,
                        sleep_method="hook", **kw)


def _loop(ctl, latency, iteration_s, periods, seed=0):
    """Closed loop: each period the plant's mean latency (0.3 ms noise) at the sleep and share
    applied during it; returns per period (latency, sleep, share, training iterations, the
    load the outer loop believes after it)."""
    rng = np.random.default_rng(seed)
    act = ctl.initial_actuation()
    rows = []
    for _ in range(periods):
        s, m = act.sleep_s, act.share_pct
        lat = latency(s, m) + rng.normal(0.0, 0.3)
        t = iteration_s(m)
        act = ctl.update(Measurement(mean_ms=lat, p99_ms=lat, count=100, restarting=False,
                                     iteration_s=t))
        rows.append((lat, s, m, T / (t + s), getattr(ctl.outer, "load", math.nan)))
    return np.array(rows)


def _time_sliced(s, m):
    """Fitted to the run's two operating points: 34.2 ms at sleep 0, 22.8 ms at 0.116 s."""
    d = 0.2 / (0.2 + s)
    return 3.1 + 31.1 * d


@pytest.mark.parametrize("held", [{"outer": "none"}, {"share_backend": "none"}])
@pytest.mark.parametrize("iteration_s", [None, 0.423])
def test_sleep_only_does_not_cycle_where_the_slope_is_steeper_than_the_line(iteration_s, held,
                                                                             tmp_path):
    """With the line alone, and with the preset's iteration time (0.423 s, the H100's
    time-sliced training) where the node reports 0.2 s; sleep only as ``--outer none`` (the
    share knob there but held) or as ``--share-backend none`` (no share knob at all)."""
    # the paper's loop on the same line cycles (the control experiment)
    paper = _loop(TwoTierController(LinearLatencyModel(**SLEEP_LINE), SLO, outer="none"),
                  _time_sliced, lambda m: 0.2, 40)
    assert np.mean(paper[10:, 0] > 1.05 * SLO) > 0.3
    doc = {"points": [{"mps_pct": 100.0, **SLEEP_LINE}], "sleep_span_s": [0.0, 0.4]}
    if iteration_s is not None:
        doc["points"][0]["iteration_s"] = iteration_s
    ctl = make_controller(_cfg(tmp_path, doc, **held), share_ok=False)
    assert ctl.outer.curves.retimes          # the law is the line's, read at the time
    rows = _loop(ctl, _time_sliced, lambda m: 0.2, 40)
    assert (rows[:, 2] == 100.0).all()                    # the share is held
    assert np.mean(rows[10:, 0] > 1.05 * SLO) <= 0.05
    assert np.std(np.diff(rows[20:, 1])) < 0.01          # the sleep settles
    assert abs(np.mean(rows[20:, 0]) - SLO) < 1.5


def _h200(s, m):
    g, o, t = H200[m]
    c, A = duty_form(LinearLatencyModel(g, o), t, (0.0, 0.4))
    return c + A * t / (t + s)


def _oracle_rate():
    """The most training any share sustains at the SLO (iterations per period)."""
    best = 0.0
    for m, (_, _, t) in H200.items():
        ss = np.linspace(0.0, 1.0, 2001)
        ok = [s for s in ss if _h200(s, m) <= SLO]
        if ok:
            best = max(best, T / (t + min(ok)))
    return best


def test_a_model_without_iteration_times_is_read_at_the_times_the_node_reports(tmp_path):
    doc = {"points": [{"mps_pct": m, "gain": g, "offset": o} for m, (g, o) in
                      GREEN_LINES.items()], "sleep_span_s": [0.0, 0.4]}
    ctl = make_controller(_cfg(tmp_path, doc, share_backend="green-context",
                               green_shares=(25.0, 50.0, 75.0), outer_every=1),
                          share_ok=True)
    rows = _loop(ctl, _h200, lambda m: H200[m][2], 60, seed=1)
    loads = rows[:, 4]
    assert all(0.1 < q < 10.0 for q in loads), max(loads)
    assert (rows[20:, 2] < 100.0).all()          # off the whole device within 20 periods
    assert np.mean(rows[20:, 0] > 1.05 * SLO) <= 0.05
    assert np.mean(rows[20:, 3]) >= 0.9 * _oracle_rate()


@pytest.mark.parametrize("tau", [0.1, 0.2, 0.5, 1.0])
def test_the_retimed_law_is_the_line_at_that_time(tau, tmp_path):
    doc = {"points": [{"mps_pct": m, "gain": g, "offset": o} for m, (g, o) in
                      GREEN_LINES.items()], "sleep_span_s": [0.0, 0.4]}
    ctl = make_controller(_cfg(tmp_path, doc, share_backend="green-context",
                               green_shares=(25.0, 50.0, 75.0)), share_ok=True)
    cv = ctl.outer.curves
    assert cv.retimes
    cv.retime(np.full(len(cv.m), tau))
    for i, m in enumerate(cv.m):
        c, A = duty_form(LinearLatencyModel(*GREEN_LINES[float(m)]), tau, (0.0, 0.4))
        assert math.isclose(cv.c[i], c) and math.isclose(cv.A[i], A)
        assert math.isclose(ctl.outer.curves.duty_gain(i, tau), A)


def test_a_reading_where_the_law_predicts_no_latency_teaches_nothing():
    """A line read as a duty law can go negative past its span (c < 0 at a long sleep):
    such a reading leaves the load where it was instead of teaching 10^10."""
    fam = LatencyModelFamily((OperatingPoint(100.0, LinearLatencyModel(*GREEN_LINES[100.0]),
                                             iteration_s=0.5),), (0.0, 0.4))
    ctl = TwoTierController(fam, SLO)
    cv, outer = ctl.outer.curves, ctl.outer
    i = outer.i
    d = 0.5 / (0.5 + 1.0)
    assert cv.c[i] + cv.A[i] * d < 0                # at sleep 1 s the law is negative
    for _ in range(12):
        outer.update(20.0, 1.0, math.nan)
    assert outer.load == 1.0
    for _ in range(12):                             # where it holds, readings teach
        outer.update(20.0, 0.4, math.nan)
    assert 0.05 < outer.load < 1.0


@pytest.mark.parametrize("kw, share", [
    ({"outer": "none"}, 100.0),
    ({"fixed_mps": 60.0}, 60.0),
    ({"fixed_mps": 60.0, "share_backend": "green-context", "green_shares": (25.0, 50.0)},
     50.0),
])
def test_a_held_share_is_the_default_controller_on_that_level(kw, share, tmp_path):
    doc = {"points": [{"mps_pct": 50.0, "gain": -20.0, "offset": 60.0},
                      {"mps_pct": 100.0, "gain": -40.0, "offset": 80.0}]}
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    cfg = DaemonConfig(training_cmd=sys.executable, slo_ms=SLO, model=str(path), **kw)
    ctl = make_controller(cfg, share_ok=True)
    assert ctl.outer_strategy == "throughput" and ctl.share.levels_pct == (share,)
    assert ctl.share_pct == share and ctl.design.detune == 0.5
    for _ in range(30):                          # never moves, whatever it reads
        assert ctl.update(Measurement(mean_ms=90.0, p99_ms=90.0, count=10,
                                      restarting=False)).share_pct == share
