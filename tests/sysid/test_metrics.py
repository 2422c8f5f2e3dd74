"""The one R² of sysid, and the measurement reader's agreement with the controller's."""

import math

import numpy as np
import pytest

from sysid import fit_piecewise_linear, fit_saturating, fit_static, measurement_value, r2


def test_r2_constant_y_exact_is_one_else_minus_inf():
    assert r2([3.0, 3.0, 3.0], [3.0, 3.0, 3.0]) == 1.0
    assert r2([0.1] * 5, [0.1 + 1e-15] * 5) == 1.0          # rounding is still exact
    assert r2([3.0, 3.0, 3.0], [3.0, 3.1, 3.0]) == -math.inf


def test_every_fit_reports_the_same_r2():
    x = np.array([10.0, 20.0, 30.0, 40.0, 60.0, 80.0])
    y = np.array([70.0, 41.0, 33.0, 30.0, 29.0, 27.5])
    s = fit_static(x, y)
    assert s.r2 == pytest.approx(r2(y, s.predict(x)), rel=1e-12)
    p = fit_piecewise_linear(x, y)
    assert p.r2 == pytest.approx(r2(y, p.predict(x)), rel=1e-12)
    a = fit_saturating(x, y)
    assert a.r2 == pytest.approx(r2(y, a.predict(x)), rel=1e-12)
    flat = fit_static(x, np.full(x.size, 5.0))                # constant y, exact fit
    assert flat.r2 == 1.0 and fit_piecewise_linear(x, np.full(x.size, 5.0)).r2 == 1.0


@pytest.mark.parametrize("m", [
    92.5,
    {"mean_ms": 92.5, "p99_ms": 120.0, "count": 3},
    {"mean": 92.5, "p99": 120.0},
    {"mean_ms": 92.5, "count": 0},
    {"mean_ms": "x"},
])
def test_measurement_value_reads_what_the_controller_reads(m):
    from gpucontrol.controllers import as_measurement

    c = as_measurement(m)
    stats = [("mean", c.mean_ms), ("p99", c.p99_ms)]
    if isinstance(m, float):  # a plain number is the output whichever statistic is asked for
        stats = stats[:1]
    for stat, core in stats:
        if c.count <= 0 or not math.isfinite(core):
            try:
                v = measurement_value(m, stat)
            except ValueError:       # sysid raises where it finds no key at all
                continue
            assert math.isnan(v)
        else:
            assert measurement_value(m, stat) == core


@pytest.mark.parametrize("m", [{"mean_ms": 92.5, "mean": 1.0}, {"mean": 92.5, "count": -3}])
def test_what_the_controller_refuses_sysid_refuses(m):
    from gpucontrol import TwoTierController
    from gpucontrol.models import LinearLatencyModel

    with pytest.raises(ValueError):
        measurement_value(m)
    with pytest.raises((TypeError, ValueError)):
        TwoTierController(LinearLatencyModel(-12.0, 95.0), 90.0).update(m)


def test_measurement_value_accepts_a_core_measurement():
    from gpucontrol import Measurement

    assert measurement_value(Measurement(90.0, 130.0), "p99") == 130.0
    assert math.isnan(measurement_value(Measurement(90.0, count=0)))
