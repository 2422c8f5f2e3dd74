import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucontrol import (
    ConfigurationError,
    LinearLatencyModel,
    check_envelope,
    design_p,
    design_pi,
    is_stable,
    jury,
    robustness_plot,
    robustness_sweep,
    stable_gain_range,
)
from gpucontrol.design import Design

MODEL = LinearLatencyModel(gain=-12.0, offset=95.0)


def test_paper_p_range_is_exactly_zero_two():
    assert stable_gain_range(design_p(MODEL), MODEL) == (0.0, 2.0)


def test_one_period_delay_halves_range():
    lo, hi = stable_gain_range(design_p(MODEL), MODEL, delay_periods=1)
    assert (lo, hi) == (0.0, 1.0)
    # derivation: z^2 - z + g*detune; Jury gives 0 < g*detune < 1
    lo, hi = stable_gain_range(design_p(MODEL, detune=0.5), MODEL, delay_periods=1)
    assert hi == pytest.approx(2.0, abs=1e-12)


@pytest.mark.parametrize("detune,delay,expected_hi", [
    (1.0, 0, 2.0), (0.5, 0, 4.0), (0.8, 1, 1.25), (0.5, 1, 2.0),
    # z^3 - z^2 + c = 0 crosses the circle at c = (sqrt(5) - 1) / 2 (golden ratio conjugate)
    (0.5, 2, (math.sqrt(5) - 1) / 2 / 0.5),
])
def test_generic_crossing_search_matches_closed_forms(detune, delay, expected_hi):
    p = design_p(MODEL, detune=detune)
    generic = Design(model=MODEL, kp=p.kp)  # not a PDesign: forces the numerical path
    lo, hi = stable_gain_range(generic, MODEL, delay_periods=delay)
    assert lo == 0.0
    assert hi == pytest.approx(expected_hi, abs=1e-8)


@pytest.mark.parametrize("delay", [0, 1, 2])
def test_range_edges_agree_with_jury_and_poles(delay):
    d = design_pi(MODEL, 25, 0.2)
    lo, hi = stable_gain_range(d, MODEL, delay_periods=delay)
    for g in np.linspace(lo + 1e-3, hi - 1e-3, 15):
        assert jury(d.characteristic_polynomial(g, delay))
        assert np.max(np.abs(d.poles_at(g, delay))) < 1.0
    assert not jury(d.characteristic_polynomial(hi * 1.01, delay))


def test_unstable_nominal_is_reported():
    bad = Design(model=MODEL, kp=2.5 / MODEL.gain)
    with pytest.raises(ValueError, match="unstable at the nominal"):
        stable_gain_range(bad, MODEL)


@pytest.mark.parametrize("coeffs,expected", [
    ([1.0, -0.5], True), ([1.0, -1.0], False), ([1.0, 1.0], False), ([2.0, 0.0, 0.0], True),
    ([1.0, -1.0, 0.5], True), ([1.0, -1.0, 1.0], False), ([0.0, 0.0, 1.0, -0.2], True),
    ([1.0, -2.5, 2.0, -0.5], False),  # roots 1, 1, 0.5
])
def test_jury_known_cases(coeffs, expected):
    assert jury(coeffs) is expected


def test_jury_rejects_bad_input():
    with pytest.raises(ValueError):
        jury([])
    with pytest.raises(ValueError):
        jury([0.0, 0.0])
    with pytest.raises(ValueError):
        jury([1.0, math.nan])
    for not_real in ([True, False], ["1", "-0.5"], [1 + 0j, 0.5], [[1.0, 2.0], [3.0]]):
        with pytest.raises(ValueError, match="finite numbers"):
            jury(not_real)


@pytest.mark.parametrize("coeffs", [[0, 1], [5.0], [0.0, 0.0, -2.0], np.array([[0.0, 3.0]])])
def test_jury_refuses_a_constant_which_has_no_roots_to_judge(coeffs):
    with pytest.raises(ConfigurationError, match="degree >= 1"):
        jury(coeffs)


def test_jury_agrees_with_roots_on_many_random_polynomials():
    rng = np.random.default_rng(1234)
    agree = checked = 0
    for _ in range(3000):
        n = int(rng.integers(1, 8))
        roots = rng.uniform(0.0, 1.25, n // 2) * np.exp(1j * rng.uniform(0, np.pi, n // 2))
        real = rng.uniform(-1.25, 1.25, n - 2 * (n // 2))
        poly = np.real(np.poly(np.r_[roots, roots.conj(), real])) * rng.uniform(0.2, 5.0)
        mags = np.abs(np.roots(poly))
        if np.any(np.abs(mags - 1.0) < 1e-6):
            continue  # too close to the circle for either method to be the judge
        checked += 1
        agree += jury(poly) == bool(np.all(mags < 1.0))
    assert checked > 2900
    assert agree == checked


@settings(max_examples=300)
@given(st.lists(st.floats(-3, 3, allow_nan=False), min_size=1, max_size=6))
def test_jury_property_vs_roots(tail):
    poly = np.r_[1.0, tail]
    mags = np.abs(np.roots(poly))
    if np.any(np.abs(mags - 1.0) < 1e-6):
        return
    assert jury(poly) == bool(np.all(mags < 1.0))


def test_robustness_sweep_rows():
    table = robustness_sweep(design_p(MODEL), MODEL, [0.5, 1.0, 1.5, 2.2])
    rec = table.to_records()
    assert [r["stable"] for r in rec] == [True, True, True, False]
    assert rec[1]["settling_periods"] == 1.0 and rec[1]["overshoot_pct"] == 0.0
    assert rec[0]["overshoot_pct"] == 0.0  # pole 0.5: monotone
    assert rec[2]["overshoot_pct"] == pytest.approx(50.0, abs=1e-9)  # pole -0.5
    # pole 0.5 settles to 2 % after k periods with 0.5**k <= 0.02 -> k = 6
    assert rec[0]["settling_periods"] == 6.0
    assert all(abs(r["steady_state_error"]) < 1e-12 for r in rec[:3])
    assert math.isnan(rec[3]["steady_state_error"])
    assert rec[3]["max_pole_abs"] == pytest.approx(1.2, abs=1e-12)


def test_robustness_table_repr_is_one_line_saying_what_it_holds():
    # the dataclass repr printed every row with its poles: 3.7k characters for the default
    # sweep, in a notebook cell
    from gpucontrol.stability import RobustnessRow, RobustnessTable

    text = repr(robustness_sweep(design_p(MODEL), MODEL))
    assert text == ("RobustnessTable(25 gain ratios 0.1..2.5, delay_periods=0: 19 stable "
                    "(0.1..1.9), slowest settling 38 periods)")
    assert repr(robustness_sweep(design_p(MODEL), MODEL, [2.5, 3.0], delay_periods=1)) == \
        "RobustnessTable(2 gain ratios 2.5..3, delay_periods=1: none stable)"
    assert repr(RobustnessTable(())) == "RobustnessTable(no rows, delay_periods=0)"
    rows = tuple(RobustnessRow(g, (), ok, 3.0, 0.0, 0.0)
                 for g, ok in ((0.5, True), (1.0, False), (1.5, True)))
    assert repr(RobustnessTable(rows)) == (
        "RobustnessTable(3 gain ratios 0.5..1.5, delay_periods=0: 2 stable (0.5..1.5, "
        "unstable ones between), slowest settling 3 periods)")


def test_robustness_plot_draws(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from gpucontrol import robustness_plot

    fig = robustness_plot(robustness_sweep(design_p(MODEL), MODEL, [0.2, 1.0, 2.1]))
    out = tmp_path / "r.png"
    fig.savefig(out)
    assert out.stat().st_size > 1000


def test_check_envelope():
    p = design_p(MODEL)
    ok = check_envelope(p, MODEL, (0.3, 1.9))
    assert ok.stable and ok.margin_high == pytest.approx(2 / 1.9)
    assert ok.worst_settling_periods == pytest.approx(38.0)  # pole -0.9: 0.9**k <= 0.02
    assert not check_envelope(p, MODEL, (0.5, 2.4)).stable
    assert "STABLE" in str(ok)
    with pytest.raises(ValueError, match="envelope"):
        check_envelope(p, MODEL, (2.0, 1.0))


def test_different_nominal_model_rebases():
    p = design_p(MODEL)
    other = LinearLatencyModel(-6.0, 95.0)  # gains measured against a half-as-steep nominal
    assert stable_gain_range(p, other) == pytest.approx((0.0, 4.0), abs=1e-9)


@pytest.mark.parametrize("detune", [1.0, 0.5, 0.3])
@pytest.mark.parametrize("delay", [0, 1, 2, 3, 5])
def test_p_range_has_a_closed_form_for_every_delay(detune, delay):
    # the P loop's stable set is (0, 2 sin(pi / (2 (2d + 1))) / detune) for every delay, also
    # where the detune is too aggressive for the delay (a deadbeat P with two periods of
    # delay): one delay used to answer with the range and the next to raise
    p = design_p(MODEL, detune=detune)
    lo, hi = stable_gain_range(p, MODEL, delay_periods=delay)
    assert lo == 0.0
    assert hi == pytest.approx(2 * math.sin(math.pi / (2 * (2 * delay + 1))) / detune,
                               rel=1e-12)
    generic = Design(model=MODEL, kp=p.kp)
    if is_stable(generic, 1.0, delay):  # the crossing search agrees where it answers
        assert stable_gain_range(generic, MODEL, delay_periods=delay)[1] == \
            pytest.approx(hi, rel=1e-8)
    for g in (hi * 0.99, hi * 1.01):
        assert is_stable(p, g, delay) is (g < hi)


@pytest.mark.parametrize("coeffs", [[[1.0, 2.0], [3.0, 4.0]], np.ones((2, 3))])
def test_jury_refuses_a_table_of_coefficients(coeffs):
    # it used to flatten [[1, 2], [3, 4]] into z**3 + 2 z**2 + 3 z + 4 and judge that
    with pytest.raises(ConfigurationError, match="one polynomial"):
        jury(coeffs)
    assert jury(np.array([[1.0, -0.5]])) is True  # a single row (python-control's num[0])


@pytest.mark.parametrize("table", [None, [1.0, 2.0], {"rows": ()}])
def test_robustness_plot_names_what_it_needs(table):
    with pytest.raises(TypeError, match="robustness_sweep"):
        robustness_plot(table)


def test_an_unstable_design_under_a_delay_is_refused_naming_the_delay():
    # a PI stable without delay but not with three periods: the message said only "unstable
    # at the nominal gain", which reads as a wrong design rather than a delay it cannot take
    from gpucontrol import design_pi

    pi = design_pi(MODEL)
    assert stable_gain_range(pi, MODEL)[1] > 1
    with pytest.raises(ValueError, match=r"gain ratio 1\) with delay_periods=3"):
        stable_gain_range(pi, MODEL, delay_periods=3)
