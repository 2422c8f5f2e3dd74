"""Wrong types and values at the library's boundary: a clear error naming the parameter, or a
documented conversion -- never a silent change of meaning or an internal error."""

import math

import numpy as np
import pytest

from gpucontrol import (
    ConfigurationError,
    LatencyModelFamily,
    LinearLatencyModel,
    Measurement,
    OperatingPoint,
    TwoTierController,
    check_envelope,
    design_p,
    design_pi,
    is_stable,
    jury,
    robustness_sweep,
    stable_gain_range,
)

M = LinearLatencyModel(-12.0, 95.0)


@pytest.mark.parametrize("m", [Measurement(mean=95), Measurement(mean=np.float32(95.0)),
                               Measurement(mean=95.0, p99=np.int64(100), count=np.int32(10)),
                               Measurement(95, count=10.0)])
def test_measurements_of_any_real_type_are_acted_on(m):
    assert type(m.mean_ms) is float and type(m.count) is int
    act = TwoTierController(M, slo_ms=90.0).update(m)
    assert act.reason == "inner" and act.sleep_s > 0


@pytest.mark.parametrize("kw, field", [({"mean": "95"}, "mean"),
                                       ({"mean": 95.0, "p99": "x"}, "p99"),
                                       ({"mean": 95.0, "count": "a"}, "count"),
                                       ({"mean": 95.0, "count": 2.5}, "count"),
                                       ({"mean": 95.0, "iteration_s": "x"}, "iteration_s"),
                                       ({"mean": 95.0, "restarting": "no"}, "restarting")])
def test_a_measurement_field_that_is_not_a_number_is_a_type_error(kw, field):
    with pytest.raises(TypeError, match=field):
        Measurement(**kw)


def test_nan_and_negative_readings_are_still_held_not_refused():
    ctl = TwoTierController(M, slo_ms=90.0)
    assert ctl.update(Measurement(mean=math.nan)).reason == "hold: unusable latency"
    assert ctl.update(Measurement(mean=-1)).reason == "hold: unusable latency"


@pytest.mark.parametrize("make, name", [
    (lambda: LinearLatencyModel("-12", 95.0), "gain"),
    (lambda: LinearLatencyModel(-12.0, True), "offset"),
    (lambda: TwoTierController(M, slo_ms="90"), "slo_ms"),
    (lambda: TwoTierController(M, 90.0, adaptive="yes"), "adaptive"),
    (lambda: TwoTierController(M, 90.0, gain_schedule="no"), "gain_schedule"),
    (lambda: TwoTierController(M, 90.0, plausible_max_ms=10.0), "plausible_max_ms"),
    (lambda: TwoTierController(M, 90.0, plausible_max_ms=150.0), "plausible_max_ms"),
    (lambda: TwoTierController(M, 90.0, inner_period_s=1e-9), "inner_period_s"),
    (lambda: TwoTierController(M, 90.0, inner_period_s=1e12), "inner_period_s"),
    (lambda: OperatingPoint(float("nan"), M), "mps_pct"),
    (lambda: OperatingPoint(80.0, M, batch=-1), "batch"),
    (lambda: LatencyModelFamily((OperatingPoint(80, M), OperatingPoint(80.0, M))), "points"),
    (lambda: jury(["a"]), "coefficients"),
])
def test_bad_values_are_refused_naming_the_parameter(make, name):
    with pytest.raises(ConfigurationError, match=name):
        make()


def test_numpy_bools_and_plain_bools_are_flags():
    assert TwoTierController(M, 90.0, adaptive=np.bool_(True)).adaptive is True
    assert TwoTierController(M, 90.0, plausible_max_ms=180.0).plausible_max_ms == 180.0


@pytest.mark.parametrize("make, name", [
    (lambda: design_p(None), "model"),
    (lambda: design_pi("x"), "model"),
    (lambda: stable_gain_range("x", M), "design"),
    (lambda: stable_gain_range(design_p(M), "x"), "model"),
    (lambda: is_stable([]), "design"),
    (lambda: robustness_sweep(None), "design"),
    (lambda: check_envelope(design_p(M), model=3.0), "model"),
    (lambda: LatencyModelFamily((M,)), "points"),
    (lambda: OperatingPoint(80.0, "model"), "model"),
])
def test_wrong_types_are_type_errors_naming_the_argument(make, name):
    with pytest.raises(TypeError, match=name):
        make()


def test_a_flat_fit_gives_no_gain_and_no_model():
    from sysid import fit_static

    u = np.random.default_rng(0).uniform(0.0, 1.0, 50)
    flat = fit_static(u, np.full(50, 90.0))
    assert flat.gain == 0.0 and flat.ci95[0] == (0.0, 0.0) and flat.r2 == 1.0
    with pytest.raises(ConfigurationError, match="confidence interval"):
        LinearLatencyModel.from_fit(flat)
    noisy = fit_static(u, 90.0 + np.random.default_rng(1).normal(0.0, 1.0, 50))
    assert noisy.ci95[0][0] < 0.0 < noisy.ci95[0][1]
    with pytest.raises(ConfigurationError, match="confidence interval"):
        LinearLatencyModel.from_fit(noisy)
    good = fit_static(u, 95.0 - 12.0 * u + np.random.default_rng(2).normal(0.0, 1.0, 50))
    assert LinearLatencyModel.from_fit(good).gain == pytest.approx(-12.0, abs=2.0)
