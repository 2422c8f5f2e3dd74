"""The reading noise the outer loop measures (now, steadily, at each share) and the set point
a decision predicts every share at."""

import math

import numpy as np
import pytest

from gpucontrol.noise import CAP2, Aim, ReadingNoise


def _diffs(rng, sigma, n):
    """|differences| of successive readings with Gaussian noise ``sigma`` (log)."""
    y = sigma * rng.standard_normal(n + 1)
    return np.abs(np.diff(y))


def test_the_steady_noise_is_steadier_than_the_noise_now():
    """The median of 256 differences swings about half as much as the median of 64 over the
    same readings, and both read the noise itself."""
    rng = np.random.default_rng(0)
    rn = ReadingNoise(100.0)
    now, steady = [], []
    for d in _diffs(rng, 0.03, 20_000):
        rn.add(float(d))
        if len(rn.steady) == 256:
            now.append(math.sqrt(rn.var))
            steady.append(rn.sigmas(0, 0)[0])
    assert np.mean(now) == pytest.approx(0.03, rel=0.05)
    assert np.mean(steady) == pytest.approx(0.03, rel=0.05)
    assert np.std(steady) < 0.65 * np.std(now)


def test_readings_past_the_cap_are_not_taken_as_the_steady_noise():
    """Differences read while the noise now is at its cap (readings no plant gives) reach the
    noise now, not the steady one nor the share's own."""
    rng = np.random.default_rng(1)
    rn = ReadingNoise(100.0)
    for d in _diffs(rng, 0.02, 300):
        rn.add(float(d))
    quiet = rn.sigmas(0, 300)[0]
    for _ in range(100):
        rn.add(5.0)
    assert rn.var == CAP2
    assert rn.sigmas(0, 400) == (pytest.approx(quiet, rel=0.3), {})
    assert rn.here_loud() is None


def test_a_louder_share_is_predicted_at_its_own_noise_and_remembered_when_left():
    """A share whose readings are significantly noisier than the steady noise (variance over
    LOUD times) is predicted at its own once 32 differences say so; when the loop leaves it,
    that is remembered, fading back to the steady noise over the memory. A share as noisy as
    the rest is not singled out."""
    rng = np.random.default_rng(2)
    rn = ReadingNoise(100.0)
    for d in _diffs(rng, 0.02, 400):          # share 1, as noisy as any
        rn.add(float(d))
    rn.leave(1, 400)
    assert rn.loud == {}
    for d in _diffs(rng, 0.02, 40):           # share 3, the same noise
        rn.add(float(d))
    assert rn.sigmas(3, 440)[1] == {}
    rn.leave(3, 440)
    for d in _diffs(rng, 0.06, 31):           # share 2: three times the noise
        rn.add(float(d))
    assert rn.here_loud() is None             # (31 differences: not yet)
    rn.add(float(_diffs(rng, 0.06, 1)[0]))
    steady, own = rn.sigmas(2, 472)
    assert list(own) == [2]                   # (the others at the steady noise)
    assert own[2] == pytest.approx(0.06, rel=0.35)
    assert steady < 0.03
    rn.leave(2, 472)                          # back to share 1
    for d in _diffs(rng, 0.02, 40):
        rn.add(float(d))
    (steady, at_once), later = rn.sigmas(1, 512), rn.sigmas(1, 512 + 300)[1][2]
    at_once = at_once[2]
    assert at_once > 1.5 * steady
    assert later == pytest.approx(steady, rel=0.1)   # (0.99 ** 340: 3 % of the way left)


def test_the_aim_law():
    """At the SLO for a quiet reading, a few % under it for a p99's noise, at most twice the
    tolerance under it."""
    aim = Aim(80.0, 0.5, 0.05, 2.33)
    assert aim(0.005) == 80.0
    assert aim(0.04) == pytest.approx(80.0 * 1.05 * math.exp(-2.33 * 0.04 * math.sqrt(4 / 3)))
    assert aim(1.0) == pytest.approx(80.0 * 0.9)
