"""Static and ARX fits on systems whose truth is known."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysid import IdData, fit_arx, fit_static, select_order, validate, white_noise


def arx_data(n=600, a=(-1.2, 0.4), b=(0.8, 0.3), nk=1, c=5.0, noise=0.05, seed=0):
    """y(k) + a1 y(k-1) + a2 y(k-2) = b1 u(k-nk) + b2 u(k-nk-1) + c + e(k)."""
    rng = np.random.default_rng(seed)
    u = white_noise(n, 0.0, 1.0, seed=seed + 100)
    y = np.zeros(n)
    for k in range(n):
        acc = c + noise * rng.standard_normal()
        for i, ai in enumerate(a, 1):
            acc -= ai * (y[k - i] if k - i >= 0 else 0.0)
        for j, bj in enumerate(b):
            acc += bj * (u[k - nk - j] if k - nk - j >= 0 else 0.0)
        y[k] = acc
    return IdData(u, y, period_s=4.0)


# ---- static ---------------------------------------------------------------------------------
@settings(max_examples=50)
@given(gain=st.floats(-50, 50).filter(lambda g: abs(g) > 1e-3), offset=st.floats(-200, 200),
       seed=st.integers(0, 10_000))
def test_static_recovers_exact_line(gain, offset, seed):
    u = white_noise(20, 0.0, 1.0, seed=seed)
    f = fit_static(u, gain * u + offset)
    assert f.gain == pytest.approx(gain, abs=1e-9 * max(1, abs(gain)))
    assert f.offset == pytest.approx(offset, abs=1e-8 * max(1, abs(offset), abs(gain)))
    assert f.r2 == pytest.approx(1.0, abs=1e-9)


def test_static_noisy_ci_and_stderr_are_calibrated():
    rng = np.random.default_rng(0)
    u = white_noise(50, 0.0, 1.0, seed=1)
    hits, ses, gains = 0, [], []
    for _ in range(400):
        f = fit_static(u, 90.0 - 12.0 * u + rng.normal(0, 1.0, u.size))
        (lo, hi), _ = f.ci95
        hits += lo <= -12.0 <= hi
        ses.append(f.stderr[0])
        gains.append(f.gain)
    assert 0.92 <= hits / 400 <= 0.98
    assert np.mean(ses) == pytest.approx(np.std(gains), rel=0.1)


def test_static_predict_and_duck_typing():
    f = fit_static([0.0, 1.0, 2.0], [95.0, 83.0, 71.0])
    np.testing.assert_allclose(f.predict([0.5]), [89.0], atol=1e-9)
    assert "R²" in str(f)


@pytest.mark.parametrize("u, y, msg", [
    ([1.0, 2.0, 3.0], [1.0, 2.0], "mismatched lengths"),
    ([1.0, 2.0, float("nan")], [1.0, 2.0, 3.0], "u contains NaN"),
    ([0.5, 0.5, 0.5, 0.5], [1.0, 2.0, 3.0, 4.0], "u is constant"),
    ([1.0, 2.0], [1.0, 2.0], "too short"),
    ([], [], "u is too short: 0 sample.s., need at least 3"),   # the fit's minimum, not 1
])
def test_static_bad_input(u, y, msg):
    with pytest.raises(ValueError, match=msg):
        fit_static(u, y)


# ---- ARX ------------------------------------------------------------------------------------
def test_arx_recovers_parameters_within_their_stderr():
    d = arx_data()
    f = fit_arx(d, 2, 2, 1)
    truth = np.array([-1.2, 0.4, 0.8, 0.3, 5.0])
    z = np.abs(f.params - truth) / f.stderr
    assert np.all(z < 4.0), z
    assert f.static_gain == pytest.approx((0.8 + 0.3) / (1 - 1.2 + 0.4), rel=0.02)
    assert f.offset == pytest.approx(5.0 / 0.2, rel=0.02)
    assert f.gain == f.static_gain


def test_arx_covariance_matches_monte_carlo_spread():
    est = np.array([fit_arx(arx_data(n=300, seed=s), 2, 2, 1).params for s in range(150)])
    se = fit_arx(arx_data(n=300, seed=999), 2, 2, 1).stderr
    np.testing.assert_allclose(est.std(axis=0), se, rtol=0.3)


def test_arx_validation_free_run_and_one_step():
    d = arx_data(n=800, noise=0.02)
    tr, va = d.split(0.6)
    f = fit_arx(tr, 2, 2, 1, validation=va)
    assert f.validated_on == "validation"
    assert f.r2 > 0.95 and f.fit_pct > 80
    v = validate(f, va)
    assert v.start == f.max_lag == 2
    np.testing.assert_array_equal(v.yhat[:2], va.y[:2])
    one_step = f.predict(va)
    assert np.std(va.y[2:] - one_step[2:]) == pytest.approx(0.02, rel=0.2)
    # an under-parameterised model simulates worse
    assert fit_arx(tr, 1, 1, 1, validation=va).fit_pct < f.fit_pct - 10


def test_arx_static_special_case_equals_fit_static():
    u = white_noise(100, 0.0, 1.0, seed=4)
    y = 95.0 - 12.0 * u + np.random.default_rng(4).normal(0, 0.5, 100)
    a = fit_arx(IdData(u, y), na=0, nb=1, nk=0)
    s = fit_static(u, y)
    assert a.gain == pytest.approx(s.gain, rel=1e-10)
    assert a.offset == pytest.approx(s.offset, rel=1e-10)
    assert a.r2 == pytest.approx(s.r2, rel=1e-10)


def test_arx_tf_coefficients_reproduce_simulation():
    from scipy.signal import dlsim

    d = arx_data(noise=0.0, c=0.0)
    f = fit_arx(d, 2, 2, 1, offset=False)
    num, den = f.tf_coefficients()
    # zero initial state, as the record started
    _, ys = dlsim((np.trim_zeros(num, "f"), den, 1.0), d.u)
    np.testing.assert_allclose(ys.ravel(), d.y, atol=1e-8)
    np.testing.assert_allclose(f.simulate(d.u, d.y[:2]), d.y, atol=1e-8)


def test_aic_fpe_definitions():
    f = fit_arx(arx_data(), 2, 2, 1)
    d, n = f.n_params, f.n_used
    assert f.aic == pytest.approx(n * math.log(f.loss) + 2 * d)
    assert f.fpe == pytest.approx(f.loss * (1 + d / n) / (1 - d / n))


@pytest.mark.parametrize("criterion", ["aic", "fpe", "validation"])
def test_order_selection_rejects_too_simple_models(criterion):
    d = arx_data(n=1000, noise=0.05, seed=3)
    tr, va = d.split(0.7)
    sel = select_order(tr, na=range(4), nb=range(1, 4), nk=(0, 1, 2), criterion=criterion,
                       validation=va)
    assert len(sel.table) == 4 * 3 * 3
    # AIC/FPE may keep a superfluous term (they overfit by design), never drop a needed one
    assert sel.best.na >= 2 and sel.best.nk <= 1 and sel.best.nk + sel.best.nb >= 3
    rows = {(r["na"], r["nb"], r["nk"]): r for r in sel.table}
    true_aic = rows[(2, 2, 1)]["aic"]
    assert true_aic - min(r["aic"] for r in sel.table) < 4.0
    assert all(r["aic"] > true_aic + 100 for r in sel.table if r["na"] < 2)


def test_order_selection_finds_true_order_with_low_noise():
    d = arx_data(n=600, noise=0.001, seed=5)
    sel = select_order(d, na=range(3), nb=range(1, 3), nk=(0, 1, 2))
    assert (sel.best.na, sel.best.nb, sel.best.nk) == (2, 2, 1)


@pytest.mark.parametrize("kwargs, msg", [
    ({"na": -1}, "na must be an integer >= 0"),
    ({"nb": 0}, "nb must be an integer >= 1"),
    ({"nk": 1.5}, "nk must be an integer"),
])
def test_arx_bad_orders(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        fit_arx(arx_data(n=50), **{"na": 1, "nb": 1, "nk": 1, **kwargs})


def test_arx_bad_records():
    with pytest.raises(ValueError, match="too short for the order na=4, nb=4, nk=1"):
        fit_arx(arx_data(n=12), 4, 4, 1)
    with pytest.raises(ValueError, match="u is constant"):
        fit_arx(IdData(np.ones(50), np.arange(50.0)), 1, 1, 1)
    with pytest.raises(ValueError, match="must be an IdData"):
        fit_arx(np.ones(10), 1, 1, 1)
    with pytest.raises(ValueError, match="not exciting enough"):
        fit_arx(IdData(np.tile([0.0, 1.0], 30), np.arange(60.0)), 0, 3, 0)
    with pytest.raises(ValueError, match="criterion must be one of"):
        select_order(arx_data(n=50), criterion="bic")
    with pytest.raises(ValueError, match="needs a validation record"):
        select_order(arx_data(n=50), criterion="validation")


def _record(n=80, seed=0):
    u = white_noise(n, 0.0, 1.0, seed=seed)
    y = np.zeros(n)
    for k in range(1, n):
        y[k] = 0.5 * y[k - 1] + 2.0 * u[k - 1] + 1.0
    return IdData(u, y)


@pytest.mark.parametrize("kw", [{"na": 3}, {"nb": 2}, {"nk": 1}, {"na": "01"}])
def test_select_order_needs_sequences_of_orders(kw):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=f"{name} must be a sequence of integers"):
        select_order(_record(), **kw)


def test_select_order_refuses_a_negative_order():
    with pytest.raises(ValueError, match="na entry must be an integer >= 0"):
        select_order(_record(), na=[-1, 1])


def test_simulate_needs_an_input():
    with pytest.raises(ValueError, match="u is too short"):
        fit_arx(_record(), 1, 1, 1).simulate([])


@pytest.mark.parametrize("offset", ["no", 1, None])
def test_offset_must_be_a_bool(offset):
    d = _record()
    with pytest.raises(ValueError, match="offset must be True or False"):
        fit_arx(d, offset=offset)
    with pytest.raises(ValueError, match="offset must be True or False"):
        select_order(d, na=[1], nb=[1], nk=[1], offset=offset)


@pytest.mark.parametrize("u", [["1", "2", "3"], [True, False, True], [1 + 0j, 2, 3]])
def test_non_numeric_inputs_are_refused(u):
    with pytest.raises(ValueError, match="u must be a sequence of numbers, got"):
        fit_static(u, [1.0, 2.0, 4.0])


def test_arx_on_a_constant_output_says_the_output_is_constant():
    u = white_noise(40, 0.0, 1.0, seed=0)
    with pytest.raises(ValueError, match="y is constant"):
        fit_arx(IdData(u, np.full(40, 90.0)))


def test_static_fit_of_huge_values_is_scaled_not_overflowed():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = fit_static([1e200, 2e200, 3e200], [1.0, 2.0, 3.5])
        g = fit_static([1.0, 2.0, 3.0], [1.0, 2.0, 3.5])
    assert f.gain == pytest.approx(g.gain * 1e-200)
    assert f.stderr[0] == pytest.approx(g.stderr[0] * 1e-200) and f.stderr[0] > 0
    assert f.ci95[0][0] < f.gain < f.ci95[0][1]
    assert (f.offset, f.stderr[1], f.rmse, f.r2) == pytest.approx(
        (g.offset, g.stderr[1], g.rmse, g.r2))


@pytest.mark.parametrize("seed", range(5))
def test_static_fit_of_a_small_excitation_around_1e6_keeps_its_digits(seed):
    # u = 1e6 + an excitation of 1e-3: the fit on the uncentred columns [u, 1] (nearly
    # parallel) lost 1e-8 to 1e-7 of the gain and all of its standard error (0 or 0.0006 for
    # 0.025; for other draws np.linalg.inv raised "Singular matrix"); the reference is
    # linregress on the centred input, of the very same floats
    from scipy.stats import linregress

    rng = np.random.default_rng(seed)
    e = rng.uniform(-1e-3, 1e-3, 50)
    u = 1e6 + e
    y = 7.0 + 3.0 * e + rng.normal(0.0, 1e-4, 50)
    f = fit_static(u, y)
    ref = linregress(u - u.mean(), y)
    assert f.gain == pytest.approx(ref.slope, rel=1e-10)
    assert f.stderr[0] == pytest.approx(ref.stderr, rel=1e-8)
    assert f.offset == pytest.approx(ref.intercept - ref.slope * u.mean(), rel=1e-10)
    assert f.r2 == pytest.approx(ref.rvalue ** 2, rel=1e-10)
    assert f.ci95[0][0] < ref.slope < f.ci95[0][1]


def _exact_least_squares(phi, target):
    """The least-squares solution, ``inv(Phi' Phi)`` and the SSR of the very same floats, in
    exact rational arithmetic (the normal equations, solved by Gauss-Jordan)."""
    from fractions import Fraction

    rows = [[Fraction(float(v)) for v in r] for r in phi]
    t = [Fraction(float(v)) for v in target]
    d = len(rows[0])
    m = [[sum(r[i] * r[j] for r in rows) for j in range(d)]
         + [Fraction(int(i == j)) for j in range(d)]
         + [sum(r[i] * tk for r, tk in zip(rows, t))] for i in range(d)]
    for col in range(d):
        piv = next(k for k in range(col, d) if m[k][col] != 0)
        m[col], m[piv] = m[piv], m[col]
        m[col] = [v / m[col][col] for v in m[col]]
        for k in range(d):
            if k != col and m[k][col] != 0:
                m[k] = [a - m[k][col] * b for a, b in zip(m[k], m[col])]
    theta = [m[i][2 * d] for i in range(d)]
    ssr = sum((tk - sum(r[i] * theta[i] for i in range(d))) ** 2 for r, tk in zip(rows, t))
    return theta, [[m[i][d + j] for j in range(d)] for i in range(d)], ssr


@pytest.mark.parametrize("excitation, tol", [(1.0, 1e-10), (1e-3, 1e-6)])
@pytest.mark.parametrize("seed", range(3))
def test_arx_fit_of_an_input_around_1e6_keeps_its_digits(seed, excitation, tol):
    # u = 1e6 + white noise: the regressors [-y(k-1), u(k-1), 1] are nearly parallel
    # (condition number 1e13), and the covariance from the normal equations, inv(Phi' Phi),
    # lost 1e-4 to 2e-3 of the standard errors (lstsq 1e-8 of c); with an excitation of 1e-3
    # the record was refused as "linearly dependent". The reference is the exact rational
    # least-squares fit of the very same floats.
    from sysid.fit import _arx_matrix

    rng = np.random.default_rng(seed)
    n = 300
    u = 1e6 + excitation * rng.standard_normal(n)
    y = np.empty(n)
    y[0] = 4e6
    for k in range(1, n):
        y[k] = 0.5 * y[k - 1] + 2.0 * u[k - 1] + 1.0 + 0.01 * excitation * rng.standard_normal()
    f = fit_arx(IdData(u, y), na=1, nb=1, nk=1)
    phi = _arx_matrix(u, y, 1, 1, 1, 1, True)
    theta, inv, ssr = _exact_least_squares(phi, y[1:])
    sigma2 = ssr / (n - 1 - 3)
    np.testing.assert_allclose(f.stderr, [math.sqrt(sigma2 * inv[i][i]) for i in range(3)],
                               rtol=tol)
    np.testing.assert_allclose(f.cov, [[float(sigma2 * v) for v in r] for r in inv], rtol=tol)
    np.testing.assert_allclose(f.params[:2], [float(v) for v in theta[:2]], rtol=tol / 100)
    assert f.c == pytest.approx(float(theta[2]), rel=tol)
    assert f.sigma2 == pytest.approx(float(sigma2), rel=1e-10)


def test_static_fit_that_cannot_be_represented_is_refused():
    with pytest.raises(ValueError, match="overflows"):
        fit_static([1.0, 2.0, 3.0], [1e300, -1e308, 1e308])


def test_a_record_too_short_to_validate_on_names_the_structure_not_nan_scores():
    """It read "too short for the order of ARX(na=2, nb=2, nk=1): static gain ..., fit nan%
    (estimation), R² nan, AIC ...: 3 sample(s)": the model's text, its unset scores included."""
    rng = np.random.default_rng(0)
    u = rng.uniform(size=100)
    d = IdData(u, np.r_[0.0, u[:-1]] + rng.normal(0.0, 0.1, 100))
    msg = (r"^record too short for ARX\(na=2, nb=2, nk=1\): 3 sample\(s\), need at least 4 "
           r"\(the first 2 are initial conditions\)$")
    with pytest.raises(ValueError, match=msg):
        fit_arx(d, 2, 2, 1, validation=d[:3])
    with pytest.raises(ValueError, match=msg):
        validate(fit_arx(d, 2, 2, 1), d[:3])
