"""Excitation signals: bounds, lengths, hold, reproducibility, bad arguments."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysid import multi_level, prbs, white_noise

bounds_st = st.tuples(st.floats(-1e3, 1e3), st.floats(1e-3, 1e3)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=60)
@given(n=st.integers(1, 500), lh=bounds_st, hold=st.integers(1, 7), seed=st.integers(0, 2**32 - 1))
def test_all_signals_stay_within_bounds(n, lh, hold, seed):
    lo, hi = lh
    for s in (prbs(n, lo, hi, hold=hold, seed=seed), white_noise(n, lo, hi, seed=seed, hold=hold),
              multi_level(n, lo, hi, levels=4, hold=hold, seed=seed)):
        assert s.shape == (n,)
        assert np.all(s >= lo) and np.all(s <= hi)


def test_prbs_is_two_level_and_balanced():
    s = prbs(1023, 0.0, 1.0, seed=3)  # one full period of a 10-bit m-sequence
    assert set(np.unique(s)) == {0.0, 1.0}
    assert int(s.sum()) == 512  # an m-sequence has one more 1 than 0s


def test_prbs_autocorrelation_is_impulse_like():
    s = prbs(511, -1.0, 1.0, seed=0)  # full 9-bit period, +-1 levels
    circ = [float(np.dot(s, np.roll(s, k))) / s.size for k in range(1, 20)]
    np.testing.assert_allclose(circ, -1.0 / 511, atol=1e-12)


def test_hold_repeats_values():
    s = prbs(20, 0.0, 1.0, hold=4, seed=1)
    assert np.all(s.reshape(5, 4) == s.reshape(5, 4)[:, :1])
    w = white_noise(9, 0.0, 1.0, seed=1, hold=3)
    assert np.all(w.reshape(3, 3) == w.reshape(3, 3)[:, :1])


@pytest.mark.parametrize("gen", [prbs, white_noise])
def test_seed_reproducible(gen):
    np.testing.assert_array_equal(gen(50, 0.0, 2.0, seed=7), gen(50, 0.0, 2.0, seed=7))


def test_white_noise_is_roughly_uniform_and_white():
    s = white_noise(20000, 0.0, 1.0, seed=0)
    assert abs(s.mean() - 0.5) < 0.01
    assert abs(s.var() - 1 / 12) < 0.003
    c = s - s.mean()
    r1 = float(c[:-1] @ c[1:]) / float(c @ c)
    assert abs(r1) < 3 / np.sqrt(s.size)


def test_multi_level_explicit_levels():
    s = multi_level(300, 0.0, 1.0, levels=[0.2, 0.8], seed=0)
    assert set(np.unique(s)) == {0.2, 0.8}


@pytest.mark.parametrize("call, msg", [
    (lambda: prbs(10, 1.0, 1.0), "low must be < high"),
    (lambda: prbs(0, 0.0, 1.0), "n must be"),
    (lambda: white_noise(10, 0.0, float("nan")), "high must be a finite number"),
    (lambda: white_noise(10, 0.0, 1.0, hold=0), "hold must be"),
    (lambda: multi_level(10, 0.0, 1.0, levels=1), "levels must be"),
    (lambda: multi_level(10, 0.0, 1.0, levels=[0.5, 2.0]), "within"),
])
def test_bad_arguments(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


@pytest.mark.parametrize("gen", [white_noise, prbs, multi_level])
@pytest.mark.parametrize("seed", [-1, 1.5, "a", True])
def test_bad_seed_names_the_parameter(gen, seed):
    with pytest.raises(ValueError, match="seed must be None or an integer >= 0"):
        gen(8, 0.0, 1.0, seed=seed)


def test_integer_like_seeds_still_work():
    assert np.array_equal(white_noise(5, 0.0, 1.0, seed=np.int64(3)),
                          white_noise(5, 0.0, 1.0, seed=3))


@pytest.mark.parametrize("gen", [white_noise, prbs, multi_level])
def test_span_that_overflows_is_refused(gen):
    with pytest.raises(ValueError, match="high - low must be a finite number"):
        gen(3, -1e308, 1e308)


@pytest.mark.parametrize("levels", [3.0, "3", True, None])
def test_levels_scalar_that_is_not_an_int_asks_for_a_sequence(levels):
    with pytest.raises(ValueError, match="levels must be an int >= 2 or a sequence of numbers"):
        multi_level(8, 0.0, 1.0, levels=levels)


def test_levels_as_strings_are_refused():
    with pytest.raises(ValueError, match="levels must be an int >= 2 or a sequence"):
        multi_level(8, 0.0, 1.0, levels=["0", "1"])
