"""The knobs refuse bad settings with a message naming their own field and its range."""

import math

import pytest

from gpucontrol import ConfigurationError
from gpucontrol.knobs import ShareKnob, SleepKnob


@pytest.mark.parametrize("kwargs,message", [
    ({"bounds_s": (1.0, 0.5)}, r"^bounds_s must satisfy 0 <= low < high <= 3600"),
    ({"bounds_s": (-1.0, 1.0)}, r"^bounds_s must satisfy"),
    ({"initial_s": 2.0}, r"^initial_s must be in \[0, 1\]"),
    ({"bounds_s": (0.0, 0.5), "initial_s": 0.6}, r"^initial_s must be in \[0, 0.5\]"),
    ({"run_quantum_s": 0.0}, r"^run_quantum_s must be in"),
])
def test_sleep_knob_errors_name_its_own_fields(kwargs, message):
    # SleepKnob(initial_s=2.0) said "initial_sleep_s must be ...", and bad bounds_s
    # "sleep_bounds_s": names SleepKnob does not have
    with pytest.raises(ConfigurationError, match=message):
        SleepKnob(**kwargs)


@pytest.mark.parametrize("pct", ["80", math.nan, None])
def test_share_knob_snap_refuses_a_non_number(pct):
    # snap("80") raised numpy/float's bare ValueError, snap(nan) "cannot convert float NaN
    # to integer"
    with pytest.raises(ConfigurationError, match=r"^pct must be a finite number"):
        ShareKnob().snap(pct)
    with pytest.raises(ConfigurationError, match=r"^pct must be a finite number"):
        ShareKnob.green((25, 50, 75, 100)).snap(pct, down=True)


@pytest.mark.parametrize("most", [0, 1, -5, 2.5, True])
def test_share_knob_candidates_needs_room_for_both_bounds(most):
    # candidates(0) or (1) returned both bounds: more than "at most most of them"
    with pytest.raises(ConfigurationError, match=r"^most must be an integer >= 2"):
        ShareKnob().candidates(most)


def test_share_knob_candidates_stay_within_most():
    knob = ShareKnob(bounds_pct=(10.0, 100.0))
    for most in (2, 3, 10, 50, 200):
        c = knob.candidates(most)
        assert c[0] == 10.0 and c[-1] == 100.0 and len(c) <= most
    assert knob.candidates(2) == (10.0, 100.0)


@pytest.mark.parametrize("call,message", [
    (lambda k: k.sleep_for(0.5, 0.0), r"^duty must be in \(0, 1\], got 0.0"),
    (lambda k: k.sleep_for(0.5, -0.2), r"^duty must be in \(0, 1\]"),
    (lambda k: k.sleep_for(0.5, 1.5), r"^duty must be in \(0, 1\]"),
    (lambda k: k.sleep_for(0.5, math.nan), r"^duty must be a finite number"),
    (lambda k: k.sleep_for(0.0, 0.5), r"^iteration_s must be > 0"),
    (lambda k: k.sleep_for(-0.5, 0.5), r"^iteration_s must be > 0"),
    (lambda k: k.sleep_for(math.nan, 0.5), r"^iteration_s must be a finite number"),
    (lambda k: k.sleep_for(math.inf, 0.5), r"^iteration_s must be a finite number"),
    (lambda k: k.duty(0.5, -0.1), r"^sleep_s must be in \[0, 3600\], got -0.1"),
    (lambda k: k.duty(0.5, math.nan), r"^sleep_s must be a finite number"),
    (lambda k: k.duty(0.5, math.inf), r"^sleep_s must be a finite number"),
    (lambda k: k.duty(0.0, 0.5), r"^iteration_s must be > 0"),
    (lambda k: k.duty(math.nan, 0.5), r"^iteration_s must be a finite number"),
])
def test_sleep_knob_duty_and_sleep_for_refuse_values_outside_their_range(call, message):
    # sleep_for(0.5, nan) returned a NaN sleep, sleep_for(0.5, 1.5) a clipped one and
    # duty(0.5, -0.1) a duty above 1, all silently
    with pytest.raises(ConfigurationError, match=message):
        call(SleepKnob((0.0, 2.0)))


def test_sleep_knob_duty_and_sleep_for_in_range():
    k = SleepKnob((0.0, 2.0))
    assert k.sleep_for(0.5, 1.0) == 0.0               # full duty: no sleep
    assert k.sleep_for(0.5, 1e-12) == 2.0             # a tiny duty: the longest sleep
    assert k.sleep_for(0.5, 0.5) == pytest.approx(0.5)
    assert k.duty(0.5, 0.0) == 1.0 and k.duty(0.5, 3600.0) > 0.0
    # a duty cycler's time constant is its run quantum: the iteration time is not read
    q = SleepKnob((0.0, 2.0), run_quantum_s=0.03)
    assert q.sleep_for(math.nan, 0.5) == pytest.approx(0.03)
    assert q.duty(math.nan, 0.03) == pytest.approx(0.5)
