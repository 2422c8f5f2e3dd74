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
