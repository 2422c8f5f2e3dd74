"""Gain envelope and the nominal gain recommendation, checked against gpucontrol."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysid import fit_static, gain_envelope, recommend_nominal, white_noise, worst_pole_abs


def test_envelope_from_fits_and_labels():
    u = white_noise(30, 0.0, 1.0, seed=0)
    fits = {"mps20": fit_static(u, 60 - 4 * u), "mps80": fit_static(u, 90 - 12 * u)}
    env = gain_envelope(fits, nominal=-8.0)
    assert env.envelope == pytest.approx((0.5, 1.5))
    assert env.as_dict() == pytest.approx({"mps20": 0.5, "mps80": 1.5})
    assert "0.5..1.5" in str(env)


def test_default_nominal_is_the_recommended_one():
    env = gain_envelope([-4.0, -6.0, -12.0])
    assert env.nominal_gain == pytest.approx(-8.0)


@settings(max_examples=50)
@given(st.lists(st.floats(0.5, 50.0), min_size=1, max_size=8), st.floats(0.3, 1.5))
def test_recommendation_is_optimal_without_delay(mags, detune):
    gains = [-m for m in mags]
    c = recommend_nominal(gains, detune=detune)
    for factor in (0.9, 0.97, 1.03, 1.1):  # any other nominal is no better
        m0 = c.nominal_gain * factor
        env = (max(mags) / abs(m0), min(mags) / abs(m0))
        assert worst_pole_abs((env[1], env[0]), detune=detune) >= c.worst_pole_abs - 1e-12


def test_recommendation_with_delay_beats_the_midpoint():
    gains = [-4.0, -12.0]
    c = recommend_nominal(gains, delay_periods=1)
    mid = recommend_nominal(gains)  # delay-free optimum
    assert c.worst_pole_abs < worst_pole_abs(mid.envelope, delay_periods=1)
    assert c.stable and c.margin == pytest.approx(1 - c.worst_pole_abs)


def test_envelope_is_accepted_by_gpucontrol_check_envelope():
    gpucontrol = pytest.importorskip("gpucontrol")
    gains = [-9.0, -12.0, -19.0]
    c = recommend_nominal(gains)
    model = gpucontrol.LinearLatencyModel(gain=c.nominal_gain, offset=95.0)
    design = gpucontrol.design_p(model)
    env = gain_envelope(gains, nominal=c.nominal_gain)
    check = gpucontrol.check_envelope(design, model, env.envelope)
    assert check.stable
    # the pole magnitudes agree with python-control's view of the closed loop
    for g in env.ratios:
        poles = design.closed_loop(gain_ratio=g).poles()
        assert float(np.max(np.abs(poles))) <= c.worst_pole_abs + 1e-9


def test_worst_pole_matches_gpucontrol_with_delay():
    gpucontrol = pytest.importorskip("gpucontrol")
    model = gpucontrol.LinearLatencyModel(gain=-10.0, offset=95.0)
    design = gpucontrol.design_p(model, detune=0.8)
    env = (0.4, 1.1)
    expected = max(float(np.max(np.abs(design.poles_at(g, 1)))) for g in np.linspace(*env, 201))
    assert worst_pole_abs(env, detune=0.8, delay_periods=1) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("gains, msg", [
    ([], "at least one operating point"),
    ([-1.0, 2.0], "change sign"),
    ([0.0, -1.0], "uncontrollable"),
    ([float("nan")], "must be a finite number"),
])
def test_bad_gains(gains, msg):
    with pytest.raises(ValueError, match=msg):
        gain_envelope(gains)


def test_bad_nominal():
    with pytest.raises(ValueError, match="with the gains' sign"):
        gain_envelope([-1.0, -2.0], nominal=3.0)


@pytest.mark.parametrize("delay", [0, 1, 3])
@pytest.mark.parametrize("detune", [0.5, 1.0, 1.5])
def test_p_loop_polynomial_is_the_core_designs(delay, detune):
    """sysid's P-loop polynomial is the core's general one for design_p (one definition each
    side of the wall, pinned together here)."""
    from gpucontrol import LinearLatencyModel, design_p
    from sysid.variation import _p_loop_polynomial

    design = design_p(LinearLatencyModel(-12.0, 95.0), detune=detune)
    for g in (0.3, 1.0, 1.7):
        np.testing.assert_allclose(_p_loop_polynomial(g, detune, delay),
                                   design.characteristic_polynomial(g, delay), atol=1e-12)


@pytest.mark.parametrize("gains", [-4.0, "abc", None])
def test_gains_that_are_not_a_collection_are_refused(gains):
    with pytest.raises(ValueError, match="gains must be a sequence or a mapping"):
        gain_envelope(gains)
