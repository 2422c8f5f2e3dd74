"""Excitation signals for identification experiments.

Every generator returns a float array of length ``n`` whose values lie within the actuator
bounds ``[low, high]``; ``hold`` repeats each drawn value for that many samples (useful when
the actuator or the plant is slower than the sampling period); ``seed`` makes the signal
reproducible (``None`` draws fresh entropy).

The GPUColo paper (Chen et al., ICDCS 2024), Sec. V-A, excites the plant with "pseudo-random
digital white noise" on the sleep interval, one value per control period: :func:`white_noise`
(uniform amplitudes) or :func:`multi_level` (a few discrete levels) reproduce that; :func:`prbs`
is the classic two-level maximum-length sequence, the best choice when the plant is close to
linear and only the gain and dynamics are wanted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ._checks import int_at_least, low_high, random_seed, vector

__all__ = ["multi_level", "prbs", "white_noise"]


def _hold(values: np.ndarray, n: int, hold: int) -> np.ndarray:
    return np.repeat(values, hold)[:n].astype(float)


def prbs(n: int, low: float, high: float, hold: int = 1, seed: int | None = None
         ) -> np.ndarray:
    """Pseudo-random binary sequence switching between ``low`` and ``high``.

    Built on :func:`scipy.signal.max_len_seq`: the register length is the smallest (>= 2)
    whose period ``2**nbits - 1`` covers ``ceil(n / hold)`` values, and ``seed`` picks the
    register's (non-zero) initial state, i.e. the phase of the sequence.

    Parameters
    ----------
    n : int
        Number of samples (>= 1).
    low, high : float
        The two levels (``low < high``), e.g. the sleep-interval bounds in seconds.
    hold : int
        Samples per drawn bit (>= 1).
    seed : int, optional
        Seed for the initial register state.

    Returns
    -------
    ndarray
        ``n`` float samples within ``[low, high]``.

    Examples
    --------
    >>> s = prbs(30, 0.0, 1.0, seed=1)
    >>> s.shape, sorted(set(s.tolist()))
    ((30,), [0.0, 1.0])
    >>> h = prbs(12, 0.1, 0.5, hold=3, seed=2)
    >>> bool(np.all(h[:3] == h[0]) and np.all(h[3:6] == h[3]))
    True
    """
    from scipy.signal import max_len_seq

    n = int_at_least("n", n, 1)
    hold = int_at_least("hold", hold, 1)
    lo, hi = low_high(low, high)
    m = math.ceil(n / hold)
    nbits = max(2, math.ceil(math.log2(m + 1)))
    if nbits > 32:
        raise ValueError(f"n / hold = {m} is too long for a maximum-length sequence "
                         "(at most 2**32 - 1 bits)")
    rng = np.random.default_rng(random_seed("seed", seed))
    state = rng.integers(0, 2, size=nbits)
    if not state.any():
        state[rng.integers(nbits)] = 1
    bits, _ = max_len_seq(nbits, state=state, length=m)
    return _hold(np.where(bits > 0, hi, lo), n, hold)


def white_noise(n: int, low: float, high: float, seed: int | None = None, hold: int = 1
                ) -> np.ndarray:
    """Uniform pseudo-random white noise in ``[low, high]`` (the GPUColo paper's excitation).

    Parameters
    ----------
    n : int
        Number of samples (>= 1).
    low, high : float
        Amplitude range (``low < high``), e.g. the sleep-interval bounds in seconds.
    seed : int, optional
        Seed of the random generator: an integer >= 0, or None for fresh entropy.
    hold : int
        Samples per drawn value (>= 1).

    Returns
    -------
    ndarray
        ``n`` float samples within ``[low, high]``.

    Examples
    --------
    >>> s = white_noise(100, 0.0, 1.0, seed=0)
    >>> bool(s.min() >= 0.0 and s.max() <= 1.0), s.shape
    (True, (100,))
    """
    n = int_at_least("n", n, 1)
    hold = int_at_least("hold", hold, 1)
    lo, hi = low_high(low, high)
    rng = np.random.default_rng(random_seed("seed", seed))
    return _hold(rng.uniform(lo, hi, size=math.ceil(n / hold)), n, hold)


def multi_level(n: int, low: float, high: float, levels: int | Sequence[float] = 5,
                hold: int = 1, seed: int | None = None) -> np.ndarray:
    """Pseudo-random multi-level ("digital") white noise.

    ``levels`` is either a number of equally spaced levels from ``low`` to ``high`` (>= 2) or
    an explicit sequence of levels, each within ``[low, high]``. Values are drawn uniformly
    from the levels, so a static nonlinearity is sampled at every level, which two-level
    PRBS cannot reveal.

    Parameters
    ----------
    n : int
        Number of samples (>= 1).
    low, high : float
        Actuator range (``low < high``).
    levels : int or sequence of float
        Number of equally spaced levels (>= 2), or the levels themselves.
    hold : int
        Samples per drawn value (>= 1).
    seed : int, optional
        Seed of the random generator: an integer >= 0, or None for fresh entropy.

    Returns
    -------
    ndarray
        ``n`` float samples within ``[low, high]``.

    Examples
    --------
    >>> s = multi_level(200, 0.0, 1.0, levels=3, seed=0)
    >>> sorted(set(s.tolist()))
    [0.0, 0.5, 1.0]
    """
    n = int_at_least("n", n, 1)
    hold = int_at_least("hold", hold, 1)
    lo, hi = low_high(low, high)
    if isinstance(levels, (int, np.integer)) and not isinstance(levels, bool):
        k = int_at_least("levels", levels, 2)
        grid = np.linspace(lo, hi, k)
    elif np.ndim(levels) == 0:  # 3.0, "3", True, None: neither a count nor a sequence
        raise ValueError(f"levels must be an int >= 2 or a sequence of numbers, "
                         f"got {levels!r}")
    else:
        try:
            grid = np.unique(vector("levels", levels))
        except ValueError as exc:
            if "NaN or infinite" in str(exc):
                raise ValueError(f"levels must hold at least two distinct finite values, "
                                 f"got {levels!r}") from None
            raise ValueError(f"levels must be an int >= 2 or a sequence of numbers, "
                             f"got {levels!r}") from None
        if grid.size < 2:
            raise ValueError(f"levels must hold at least two distinct finite values, "
                             f"got {levels!r}")
        if grid[0] < lo or grid[-1] > hi:
            raise ValueError(f"levels must lie within [low, high] = [{lo:g}, {hi:g}], "
                             f"got {grid.tolist()}")
    rng = np.random.default_rng(random_seed("seed", seed))
    return _hold(rng.choice(grid, size=math.ceil(n / hold)), n, hold)
