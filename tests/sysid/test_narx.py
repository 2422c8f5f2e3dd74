"""sysidentpy FROLS adapter on a small NARX system with known structure."""

import numpy as np
import pytest

from sysid import IdData, fit_arx, fit_narx, resid, validate

pytest.importorskip("sysidentpy")


def narx_system(n=600, noise=0.01, seed=0):
    """y(k) = 0.2 y(k-1) + 0.1 y(k-1) u(k-1) + 0.9 u(k-2) + e(k) (sysidentpy's example)."""
    rng = np.random.default_rng(seed)
    u = rng.uniform(-1, 1, n)
    y = np.zeros(n)
    for k in range(2, n):
        y[k] = 0.2 * y[k - 1] + 0.1 * y[k - 1] * u[k - 1] + 0.9 * u[k - 2] \
            + noise * rng.standard_normal()
    return IdData(u, y, period_s=1.0)


@pytest.fixture(scope="module")
def fitted():
    d = narx_system()
    tr, va = d.split(0.75)
    return fit_narx(tr, ylag=2, xlag=2, degree=2, n_terms=3, validation=va), va


def test_structure_and_parameters(fitted):
    f, _ = fitted
    terms = {t: p for t, p, _ in f.terms}
    assert set(terms) == {"x1(k-2)", "y(k-1)", "x1(k-1)y(k-1)"}
    assert terms["x1(k-2)"] == pytest.approx(0.9, abs=0.01)
    assert terms["y(k-1)"] == pytest.approx(0.2, abs=0.01)
    assert terms["x1(k-1)y(k-1)"] == pytest.approx(0.1, abs=0.01)
    assert type(f.model.estimator).__name__ == "LeastSquares"


def test_scores_exclude_the_copied_initial_conditions(fitted):
    f, va = fitted
    assert f.validated_on == "validation" and f.max_lag == 2
    v = validate(f, va)
    assert v.start == 2
    np.testing.assert_array_equal(v.yhat[:2], va.y[:2])  # copied from y ...
    assert f.r2 == pytest.approx(v.r2)  # ... and excluded from the score
    assert f.r2 > 0.99 and f.fit_pct > 90


def test_free_run_ignores_outputs_beyond_initial_conditions(fitted):
    f, va = fitted
    a = f.simulate(va.u, va.y)
    b = f.simulate(va.u, va.y[:2])
    np.testing.assert_array_equal(a, b)


def test_information_criterion_order_selection():
    d = narx_system(noise=0.005, seed=1)
    f = fit_narx(d, ylag=2, xlag=2, degree=2, info_criteria="bic")
    assert {"x1(k-2)", "y(k-1)", "x1(k-1)y(k-1)"} <= {t for t, _, _ in f.terms}
    assert len(f.terms) <= 6


def test_direct_feedthrough_nk0():
    rng = np.random.default_rng(2)
    u = rng.uniform(0, 1, 300)
    y = np.zeros(300)
    for k in range(1, 300):
        y[k] = 0.5 * y[k - 1] - 12.0 * u[k] + 3.0 * u[k] ** 2 + 50.0
    f = fit_narx(IdData(u, y), ylag=1, xlag=1, degree=2, nk=0, n_terms=4)
    assert f.r2 > 0.9999
    terms = {t: p for t, p, _ in f.terms}
    assert terms["x1(k-1)"] == pytest.approx(-12.0, abs=1e-6)  # x1(k-1) is u(k) here


def test_residuals_are_white_for_the_right_structure(fitted):
    f, va = fitted
    assert resid(f, va, max_lag=15).white


@pytest.mark.parametrize("kwargs, msg", [
    ({"ylag": 0}, "ylag must be an integer >= 1"),
    ({"degree": 0}, "degree must be"),
    ({"info_criteria": "cv"}, "info_criteria must be"),
    ({"n_terms": 100}, "exceeds the 15 candidate"),
])
def test_bad_arguments(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        fit_narx(narx_system(n=100), **kwargs)


def test_bad_records():
    with pytest.raises(ValueError, match="too short"):
        fit_narx(narx_system(n=12))
    with pytest.raises(ValueError, match="u is constant"):
        fit_narx(IdData(np.zeros(100), np.arange(100.0)))
    # a constant output is the estimation record's fault, named as fit_arx names it (it was
    # fitted, then refused as "validation output is constant")
    u = np.random.default_rng(0).uniform(0, 1, 100)
    with pytest.raises(ValueError, match=r"^y is constant \(5\): the output does not respond"):
        fit_narx(IdData(u, np.full(100, 5.0)))
    with pytest.raises(ValueError, match=r"^y is constant \(5\)"):
        fit_arx(IdData(u, np.full(100, 5.0)))
