"""The training's iteration time from iterations counted per period (sysid.fit_iteration_time)."""

import numpy as np
import pytest

from sysid import fit_iteration_time, white_noise


def test_recovers_the_iteration_time_from_whole_iteration_counts():
    """A 1.7 s iteration counted in whole iterations per 4 s period (one or two): the time
    balance recovers it where averaging ``T / n - s`` per period is biased by the rounding."""
    rng = np.random.default_rng(0)
    t, T = 1.7, 4.0
    s = white_noise(200, 0.0, 1.0, seed=1)
    progress = np.cumsum(T / (t + s))                       # iterations done by each period end
    counts = np.diff(np.floor(np.r_[rng.uniform(0, 1), progress]))
    fit = fit_iteration_time(s, counts, T, sleep_factor=1.0)
    assert fit.iteration_s == pytest.approx(t, rel=0.03)
    naive = np.median(T / counts[counts > 0] - s[counts > 0])
    assert abs(naive - t) > abs(fit.iteration_s - t)


def test_fits_a_duty_cyclers_sleep_factor():
    t, q, T = 0.2, 0.05, 4.0                               # run quantum q: b = t / q
    s = white_noise(60, 0.0, 0.1, seed=2)
    fit = fit_iteration_time(s, T / (t + (t / q) * s), T)
    assert (fit.iteration_s, fit.sleep_factor) == pytest.approx((t, t / q), rel=1e-9)
    assert fit.rate(0.0) == pytest.approx(1 / t)


@pytest.mark.parametrize(("kw", "match"), [
    ({"sleep_s": [0.1, 0.2], "iterations": [1.0]}, "length"),
    ({"sleep_s": [0.1, 0.2], "iterations": [0.0, 3.0]}, "at least 2"),
    ({"sleep_s": [0.1, 0.2], "iterations": [1.0, 1.0], "period_s": 0.0}, "period_s"),
    ({"sleep_s": [0.1, 0.1], "iterations": [100.0, 100.0], "period_s": 1.0,
      "sleep_factor": 1.0}, "positive"),
    ({"sleep_s": [0.1, 0.1], "iterations": [1.0, 2.0]}, "vary"),
    # three equal sleeps: the singular system solved to rounding gave b = -8, not an error
    ({"sleep_s": [0.1, 0.1, 0.1], "iterations": [3.0, 4.0, 5.0]}, "vary"),
    ({"sleep_s": [0.7] * 4, "iterations": [3.0, 4.0, 5.0, 6.0]}, "vary"),
    # the periods without a count are left out first: the ones counted slept alike
    ({"sleep_s": [0.2, 0.1, 0.1, 0.1], "iterations": [0.0, 3.0, 4.0, 5.0]}, "vary"),
])
def test_refuses_what_it_cannot_fit(kw, match):
    with pytest.raises(ValueError, match=match):
        fit_iteration_time(**kw)
