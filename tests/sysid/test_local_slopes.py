"""sysid.local_slopes: the range of local slopes across the excited span."""

import numpy as np
import pytest

from sysid import local_slopes


def test_duty_law_local_slope_near_zero_is_several_times_the_fit():
    rng = np.random.default_rng(0)
    s = rng.uniform(0.0, 1.0, 60)
    y = 60.0 + 40.0 * 0.2 / (0.2 + s) + rng.normal(0, 0.3, s.size)
    with pytest.warns(UserWarning, match="stable ratio"):
        r = local_slopes(s, y, stable_ratio=2.0)
    assert 0.1 < r.iteration_s < 0.4
    assert r.ratio_range[1] > 4.0 and r.ratio_range[0] < 0.5
    assert r.warning is not None and r.gain < 0


def test_linear_data_report_ratio_one_and_no_warning():
    s = np.linspace(0.0, 1.0, 40)
    r = local_slopes(s, 95.0 - 12.0 * s, stable_ratio=2.0)
    assert r.ratio_range[0] == pytest.approx(1.0, abs=0.05)
    assert r.ratio_range[1] == pytest.approx(1.0, abs=0.05)
    assert r.warning is None


@pytest.mark.parametrize("u,y,match", [([0, 1, 2], [1, 2, 3], "at least"),
                                       ([1.0] * 8, list(range(8)), "constant|vary"),
                                       ([-1, 0, 1, 2, 3, 4], [1, 2, 3, 4, 5, 6], ">= 0")])
def test_bad_input(u, y, match):
    with pytest.raises(ValueError, match=match):
        local_slopes(u, y)


@pytest.mark.parametrize("ratio", [np.nan, np.inf, "2", -1.0, 0.0, True])
def test_bad_stable_ratio_is_refused(ratio):
    s = np.linspace(0.0, 1.0, 40)
    with pytest.raises(ValueError, match="stable_ratio must be"):
        local_slopes(s, 95.0 - 12.0 * s, stable_ratio=ratio)


def test_warn_must_be_a_bool():
    s = np.linspace(0.0, 1.0, 40)
    with pytest.raises(ValueError, match="warn must be True or False"):
        local_slopes(s, 95.0 - 12.0 * s, warn="no")
