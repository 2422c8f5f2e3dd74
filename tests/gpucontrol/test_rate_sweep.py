"""The training's iteration time per share from a rate sweep: the model's ``iteration_times``,
the non-increasing law the controller reads, identification's sweep, and the daemon's file."""

import itertools
import json
import math

import numpy as np
import pytest

from gpucontrol import ConfigurationError, LatencyModelFamily, LinearLatencyModel, OperatingPoint
from gpucontrol.belief import Belief
from gpucontrol.node.model_file import load_model
from harness.cli import main
from harness.experiments import identify as ident


def _family(times=(), level_times=(2.0, 0.5)):
    pts = (OperatingPoint(40.0, LinearLatencyModel(-20.0, 60.0), iteration_s=level_times[0]),
           OperatingPoint(100.0, LinearLatencyModel(-10.0, 30.0), iteration_s=level_times[1]))
    return LatencyModelFamily(pts, (0.0, 1.0), times)


def test_sweep_times_join_the_levels_and_survive_the_document():
    fam = _family(((70.0, 0.8), (55.0, 1.2)))
    assert fam.iteration_times == ((55.0, 1.2), (70.0, 0.8))       # sorted by share
    assert fam.timed_pct() == (40.0, 55.0, 70.0, 100.0)
    assert fam.iteration_s(70.0) == pytest.approx(0.8)
    back = LatencyModelFamily.from_document(json.loads(fam.to_json()))
    assert back == fam


@pytest.mark.parametrize("times, words", [
    (((0.0, 1.0),), "iteration_times share"),
    (((150.0, 1.0),), "iteration_times share"),
    (((50.0, -1.0),), "iteration_times iteration_s"),
    (((50.0, math.nan),), "iteration_times iteration_s"),
    (((50.0, 1.0), (50.0, 0.9)), "measured twice"),
    ((50.0, 1.0), "pairs"),
])
def test_bad_sweep_times_are_refused_with_the_field(times, words):
    with pytest.raises(ConfigurationError, match=words):
        _family(times)


def test_the_law_is_non_increasing_and_keeps_real_steps():
    """Noise that makes a share look slower than a smaller one is averaged away (a training
    never runs slower on more of the GPU); a step of whole waves stays a step."""
    noisy = _family(((50.0, 1.3), (55.0, 1.45), (60.0, 1.25), (65.0, 0.62), (70.0, 0.6)))
    grid = np.linspace(40, 100, 121)
    law = [noisy.iteration_s(m) for m in grid]
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(law))
    assert noisy.iteration_s(55.0) < 1.45                       # pooled with its neighbours
    assert noisy.iteration_s(60.0) / noisy.iteration_s(65.0) > 1.8   # the wave step kept


def test_a_one_level_model_file_keeps_its_sweep(tmp_path):
    doc = {"gain": -10.0, "offset": 30.0, "mps_pct": 100.0, "iteration_s": 0.5,
           "sleep_span_s": [0.0, 1.0], "iteration_times": [[60.0, 1.1], [80.0, 0.7]]}
    (tmp_path / "m.json").write_text(json.dumps(doc))
    fam = load_model(tmp_path / "m.json")
    assert fam.iteration_times == ((60.0, 1.1), (80.0, 0.7))
    doc["iteration_times"] = [[60.0, 0.0]]
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="iteration_times iteration_s"):
        load_model(tmp_path / "m.json")


def test_rate_levels_are_the_knobs_shares_between_the_levels():
    assert ident.rate_levels((40, 100))[:3] == (43.0, 46.0, 49.0)
    sweep = ident.rate_levels((40, 70, 100))
    assert 70.0 not in sweep and 40.0 not in sweep and min(sweep) > 40 and max(sweep) < 100
    with pytest.raises(ValueError, match="rate_levels: 70 % also in mps_levels"):
        ident.identify(mps_levels=(40, 70, 100), periods=10, rate_levels=(70,))


def test_identification_with_a_sweep_sees_the_h100s_wave_steps(tmp_path):
    """The H100 preset's training runs its blocks in whole waves: between two shares 3 %
    apart its speed jumps, which a power law through three levels cannot know."""
    levels = (40, 70, 100)
    swept = ident.identify(preset="h100", mps_levels=levels, periods=20,
                           rate_levels=ident.rate_levels(levels), out_dir=tmp_path)
    plain = ident.identify(preset="h100", mps_levels=levels, periods=20)
    with_sweep, without = ident.family_of(swept), ident.family_of(plain)
    jumps = [with_sweep.iteration_s(m) / with_sweep.iteration_s(m + 3) for m in range(43, 95, 3)]
    smooth = [without.iteration_s(m) / without.iteration_s(m + 3) for m in range(43, 95, 3)]
    assert max(jumps) > 1.2 > max(smooth)
    names = {f.name for f in swept.files}
    assert {"identify_rate.png", "model.json"} <= names
    doc = json.loads((tmp_path / "model.json").read_text())
    assert [m for m, _ in doc["iteration_times"]] == list(ident.rate_levels(levels))


def test_the_command_sweeps_only_when_asked(tmp_path):
    args = ["identify", "--mps", "60,100", "--periods", "10", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert "iteration_times" not in json.loads((tmp_path / "a/identify/model.json").read_text())
    assert not (tmp_path / "a/identify/identify_rate.png").exists()
    assert main([*args, "--rate-sweep", "--out", str(tmp_path / "b")]) == 0
    doc = json.loads((tmp_path / "b/identify/model.json").read_text())
    assert len(doc["iteration_times"]) == len(ident.rate_levels((60, 100)))
    assert (tmp_path / "b/identify/identify_rate.png").exists()


def test_five_surprises_of_one_sign_reopen_the_belief_and_mixed_ones_do_not():
    log_m = np.log([40.0, 70.0, 100.0])
    b = Belief(log_m, log_m, sigma0=0.3, sigma_anchor=0.01, length=0.5, load=True,
                drift=0.0, forget=1.0)
    r = 1e-4                       # the load is unknown (variance 1): 3 is beyond 2 sigma
    assert [b.surprised(1, 3.0, r) for _ in range(4)] == [0.0] * 4 and b.surprising
    v = b.surprised(1, 3.0, r)
    assert v == pytest.approx(9.0) and not b.surprising     # the innovation's square, reset
    assert [b.surprised(1, y, r) for y in (3.0, -3.0) * 4] == [0.0] * 8
    assert b.surprised(1, 0.0, r) == 0.0 and not b.surprising   # an expected reading


def test_a_reopening_raises_the_loads_variance_and_to_prior_forgets_everything():
    """Five surprises say the belief is wrong: the load's variance goes up by the innovation's
    square, and what the shares' corrections learnt stays. ``to_prior`` forgets every reading:
    every correction back to its prior (the identification's misfits included), no tie left to
    the load, the load anything again."""
    log_m = np.log([40.0, 70.0, 100.0])
    b = Belief(log_m, log_m[1:], sigma0=0.3, sigma_anchor=0.01, length=0.5, load=True,
               drift=0.01, forget=100.0)
    b.widen(np.array([0.0, 0.0, 0.04]))
    prior = b.P.copy()
    for i, y in ((0, 0.2), (2, -0.1), (1, 0.0)) * 10:
        b.step(4)
        b.observe(i, y, 1e-4)
    learnt, load_var = b.delta.copy(), b.P[0, 0]
    assert abs(learnt[0] - 0.2) < 0.05 and abs(learnt[2] + 0.1) < 0.05
    b.reopen(1, 0.5)
    assert b.P[0, 0] == pytest.approx(load_var + 0.5)
    assert np.array_equal(b.delta, learnt)
    b.to_prior()
    assert np.all(b.x == 0.0) and np.array_equal(b.P, prior) and not b.surprising
