"""fit_duty_law: one law for additive and time-sliced interference, fitted on the duty."""

import math

import numpy as np
import pytest

from sysid import DutyLaw, fit_duty_law

T = 0.25
SLEEPS = np.linspace(0.0, 1.0, 40)
D = T / (T + SLEEPS)


def test_an_additive_plant_gives_no_bend():
    law = fit_duty_law(SLEEPS, 60.0 + 40.0 * D, T)
    assert (law.c, law.a, law.b) == pytest.approx((60.0, 40.0, 0.0), abs=1e-3)
    assert law.rms_log < 1e-6 and law.n == 40


def test_a_time_sliced_plant_is_hyperbolic_in_the_duty():
    # the inference's service rate falls linearly as the training runs more: 1/l linear in d
    y = 1.0 / (0.05 - 0.045 * D)
    law = fit_duty_law(SLEEPS, y, T)
    assert law.c == pytest.approx(20.0, rel=1e-3) and law.b == pytest.approx(0.9, abs=1e-3)
    assert law.a == pytest.approx(0.0, abs=1e-2)
    assert law.latency(D) == pytest.approx(y, rel=1e-4)
    # the line in the duty misses it by tens of percent
    a, c = np.polyfit(D, y, 1)
    assert np.sqrt(np.mean(np.log(np.maximum(c + a * D, 1e-9) / y) ** 2)) > 0.2


def test_noise_leaves_the_law_close():
    rng = np.random.default_rng(0)
    y = (30.0 + 10.0 * D) / (1.0 - 0.6 * D) * np.exp(rng.normal(0.0, 0.02, D.size))
    law = fit_duty_law(SLEEPS, y, T)
    truth = DutyLaw(30.0, 10.0, 0.6, 0.0, 40)
    grid = np.linspace(D.min(), 1.0, 50)
    assert law.latency(grid) == pytest.approx(truth.latency(grid), rel=0.03)
    assert law.rms_log == pytest.approx(0.02, rel=0.3)


@pytest.mark.parametrize("sleep, latency, tau, msg", [
    ([0.0, 0.1], [50.0, 40.0], T, "too short"),
    ([0.0, 0.1, 0.2], [50.0, 0.0, 40.0], T, "latency_ms > 0"),
    ([0.0, -0.1, 0.2], [50.0, 45.0, 40.0], T, "sleep_s must be >= 0"),
    ([0.1, 0.1, 0.1], [50.0, 45.0, 40.0], T, "one duty only"),
    ([0.0, 0.1, 0.2], [50.0, 45.0, 40.0], 0.0, "iteration_s"),
    ([0.0, 0.1, math.nan], [50.0, 45.0, 40.0], T, "sleep_s"),
])
def test_bad_records_are_refused_naming_the_field(sleep, latency, tau, msg):
    with pytest.raises(ValueError, match=msg):
        fit_duty_law(sleep, latency, tau)
