"""Mudi's piecewise-linear model, the saturating model and the cross-validated choice."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sysid import (
    PiecewiseFit,
    SaturatingFit,
    fit_piecewise_linear,
    fit_saturating,
    loo_errors,
    select_latency_model,
)
from sysid.piecewise import curvature_cutoff

SHARES = np.arange(10.0, 100.0, 10.0)  # Mudi profiles GPU% 10..90 in steps of 10


def knee(x, x0=40.0, y0=100.0, k1=-2.0, k2=-0.2):
    return np.where(x <= x0, y0 + k1 * (x - x0), y0 + k2 * (x - x0))


@pytest.mark.parametrize("method", ["curvature", "optimal"])
@pytest.mark.parametrize("x0", [30.0, 40.0, 60.0])
def test_exact_knee_is_recovered(method, x0):
    y = knee(SHARES, x0=x0)
    f = fit_piecewise_linear(SHARES, y, method=method)
    assert f.x0 == pytest.approx(x0, abs=1e-6)
    assert (f.k1, f.k2, f.y0) == pytest.approx((-2.0, -0.2, 100.0), abs=1e-6)
    assert f.r2 == pytest.approx(1.0, abs=1e-12)
    assert f.method == method


def test_optimal_breakpoint_between_samples():
    x = np.linspace(10, 90, 17)
    f = fit_piecewise_linear(x, knee(x, x0=42.5), method="optimal")
    assert f.x0 == pytest.approx(42.5, abs=1e-3)
    # the curvature method can only pick a sample: it lands on a neighbour
    assert fit_piecewise_linear(x, knee(x, x0=42.5)).x0 in (40.0, 45.0)


def test_curvature_cutoff_ignores_axis_units():
    y = knee(SHARES)
    assert curvature_cutoff(SHARES, y) == curvature_cutoff(SHARES, 1000 * y) == 3


def test_order_of_samples_does_not_matter():
    rng = np.random.default_rng(0)
    perm = rng.permutation(SHARES.size)
    a = fit_piecewise_linear(SHARES, knee(SHARES))
    b = fit_piecewise_linear(SHARES[perm], knee(SHARES)[perm])
    assert (a.x0, a.k1, a.k2) == pytest.approx((b.x0, b.k1, b.k2))


@settings(max_examples=80)
@given(slo=st.floats(60.0, 180.0), margin=st.sampled_from([0.0, 0.1]))
def test_min_share_is_the_inverse(slo, margin):
    f = PiecewiseFit(k1=-2.0, k2=-0.2, x0=40.0, y0=100.0, r2=1.0, x_range=(10.0, 90.0))
    x = f.min_share(slo)
    if x is None:
        assert f.predict(90.0) > slo
        return
    assert f.predict(x) <= slo + 1e-9
    if x > 10.0:
        assert f.predict(x - 1e-6) > slo - 1e-9  # nothing smaller meets it
    xm = f.min_share(slo, margin=margin)
    assert xm == pytest.approx(min(x * (1 + margin), 90.0))


def test_min_share_bounds_and_infeasible():
    f = PiecewiseFit(k1=-2.0, k2=-0.2, x0=40.0, y0=100.0, r2=1.0, x_range=(10.0, 90.0))
    assert f.min_share(200.0) == 10.0  # every share meets a loose SLO
    assert f.min_share(80.0) is None  # 90 % of the GPU is not enough
    assert f.min_share(80.0, bounds=(1.0, 200.0)) == pytest.approx(140.0)  # extrapolated
    with pytest.raises(ValueError, match="bounds must satisfy"):
        f.min_share(90.0, bounds=(50.0, 10.0))


@settings(max_examples=40)
@given(a=st.floats(1.0, 50.0), b=st.floats(10.0, 2000.0))
def test_saturating_exact_and_inverse(a, b):
    f = fit_saturating(SHARES, a + b / SHARES)
    assert (f.a, f.b) == pytest.approx((a, b), rel=1e-7, abs=1e-7)
    slo = a + b / 50.0
    assert f.min_share(slo) == pytest.approx(50.0, rel=1e-6)


def test_saturating_infeasible_below_floor():
    f = SaturatingFit(a=10.0, b=400.0, r2=1.0, x_range=(10.0, 90.0))
    assert f.min_share(9.0) is None
    assert f.min_share(15.0) == pytest.approx(80.0)
    assert f.min_share(14.0) is None  # needs 100 %, beyond the profiled 90 %
    assert f.min_share(14.0, bounds=(1.0, 100.0)) == pytest.approx(100.0)
    assert f.min_share(500.0) == 10.0


@settings(max_examples=8)
@given(seed=st.integers(0, 1000))
def test_selection_picks_the_generating_model(seed):
    rng = np.random.default_rng(seed)
    noise = 1 + rng.normal(0, 0.005, SHARES.size)
    assert select_latency_model(SHARES, knee(SHARES) * noise).winner.startswith("piecewise")
    sat = select_latency_model(SHARES, (8 + 600 / SHARES) * noise)
    assert sat.winner == "saturating"
    assert sat.fit is sat.fits["saturating"]
    assert "wins" in str(sat)


def test_loo_error_matches_manual_computation():
    y = 8 + 600 / SHARES
    y = y * (1 + 0.01 * np.sin(SHARES))
    errs = loo_errors(SHARES, y, "saturating")
    i = 4
    keep = np.arange(9) != i
    f = fit_saturating(SHARES[keep], y[keep])
    assert errs[i] == pytest.approx(100 * abs(y[i] - f.predict(SHARES[i])) / y[i])


def test_tolerance_prefers_first_candidate():
    y = knee(SHARES) * (1 + 0.003 * np.cos(SHARES))
    cmp = select_latency_model(SHARES, y, candidates=("piecewise", "piecewise-optimal"),
                               tolerance=0.99)
    assert cmp.winner == "piecewise"


@pytest.mark.parametrize("call, msg", [
    (lambda: fit_piecewise_linear([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]), "too short"),
    (lambda: fit_piecewise_linear([1.0, 1.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0]), "3 distinct"),
    (lambda: fit_piecewise_linear(SHARES, SHARES[:-1]), "mismatched lengths"),
    (lambda: fit_piecewise_linear(SHARES, knee(SHARES), method="spline"), "method must be"),
    (lambda: fit_saturating([0.0, 10.0, 20.0], [1.0, 2.0, 3.0]), "must be > 0"),
    (lambda: select_latency_model(SHARES, knee(SHARES), candidates=("mlp",)), "candidates"),
    (lambda: select_latency_model([10.0, 20.0, 30.0], [3.0, 2.0, 1.0],
                                  candidates=("piecewise",)), "no candidate model"),
])
def test_bad_input(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


@settings(max_examples=30)
@given(st.lists(st.floats(1.0, 100.0), min_size=4, max_size=12, unique=True),
       st.integers(0, 10_000))
def test_fit_never_returns_garbage_on_valid_input(xs, seed):
    x = np.array(xs)
    assume(np.unique(np.round(x, 6)).size >= 3)
    y = 10 + 500 / x + np.random.default_rng(seed).normal(0, 0.1, x.size)
    for m in ("curvature", "optimal"):
        f = fit_piecewise_linear(x, y, method=m)
        assert np.all(np.isfinite([f.k1, f.k2, f.x0, f.y0, f.r2]))
        assert x.min() <= f.x0 <= x.max()


@pytest.mark.parametrize("margin", [np.nan, np.inf, -0.1, "0.1", None, True, [0.1]])
@pytest.mark.parametrize("slo", [120.0, 80.0])  # a share meets it / none does
def test_min_share_refuses_a_bad_margin(margin, slo):
    f = PiecewiseFit(k1=-2.0, k2=-0.2, x0=40.0, y0=100.0, r2=1.0, x_range=(10.0, 90.0))
    g = SaturatingFit(a=80.0, b=400.0, r2=1.0, x_range=(10.0, 90.0))
    for fit in (f, g):
        with pytest.raises(ValueError, match=r"margin must be (in \[0, inf\)|a finite number)"):
            fit.min_share(slo, margin=margin)


@pytest.mark.parametrize("model", [3, None, "linear"])
def test_loo_errors_model_must_be_a_name_or_a_callable(model):
    with pytest.raises(ValueError, match="model must be one of"):
        loo_errors(SHARES, knee(SHARES), model)
