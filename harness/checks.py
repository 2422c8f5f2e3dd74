"""Argument checks of the harness's Python API (the plants, the loop runner, the records).

Each raises ``ValueError`` (``TypeError`` for a value that is not a number at all) naming the
argument and the allowed range, and never changes a value: a plant that clamped a sleep of
-1 s to 0, or read an MPS of NaN as "keep the last one", hid the caller's bug.

>>> number("sleep_s", 0.5, 0.0, None)
0.5
>>> number("mps_pct", 500, 1.0, 100.0)
Traceback (most recent call last):
...
ValueError: mps_pct must be a number in [1, 100], got 500
>>> integer("seed", 1.5, 0)
Traceback (most recent call last):
...
ValueError: seed must be an integer in [0, inf), got 1.5
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = ["integer", "interval", "number", "numbers_in"]


def interval(lo: float | None, hi: float | None, *, lo_open: bool = False,
             hi_open: bool = False) -> str:
    """The range as text, e.g. ``[0, inf)`` or ``(0, 100]`` (None: unbounded)."""
    left = "(" if lo_open or lo is None else "["
    right = ")" if hi_open or hi is None else "]"
    a = "-inf" if lo is None else f"{lo:g}"
    b = "inf" if hi is None else f"{hi:g}"
    return f"{left}{a}, {b}{right}"


def _inside(x: Any, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> Any:
    ok = np.isfinite(x)
    if lo is not None:
        ok &= (x > lo) if lo_open else (x >= lo)
    if hi is not None:
        ok &= (x < hi) if hi_open else (x <= hi)
    return ok


def number(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
           lo_open: bool = False, hi_open: bool = False) -> float:
    """``value`` as a float, finite and in the range, or raise.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : Any
        A real number (not a bool, not text).
    lo, hi : float or None
        The bounds (None: unbounded on that side).
    lo_open, hi_open : bool
        Whether the bound itself is excluded.

    Returns
    -------
    float
        The value.
    """
    rng = interval(lo, hi, lo_open=lo_open, hi_open=hi_open)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number in {rng}, got {value!r}")
    v = float(value)
    if not _inside(v, lo, hi, lo_open, hi_open):
        raise ValueError(f"{name} must be a number in {rng}, got {value!r}")
    return v


def numbers_in(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
               lo_open: bool = False, hi_open: bool = False) -> np.ndarray:
    """``value`` (a number or an array of them) as a float array, every element finite and
    in the range, or raise naming the first that is not.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : array_like
        Real numbers.
    lo, hi, lo_open, hi_open
        The range, as for :func:`number`.

    Returns
    -------
    numpy.ndarray
        The values, as floats (the input's shape).
    """
    rng = interval(lo, hi, lo_open=lo_open, hi_open=hi_open)
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be numbers in {rng}, got {value!r}") from None
    if isinstance(value, (bool, np.bool_)) or np.asarray(value).dtype == bool:
        raise TypeError(f"{name} must be numbers in {rng}, got {value!r}")
    ok = _inside(a, lo, hi, lo_open, hi_open)
    if not np.all(ok):
        bad = a[~ok].flat[0] if a.ndim else a
        raise ValueError(f"{name} must be in {rng}, got {float(bad)!r}")
    return a


def integer(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int in ``[lo, hi]`` (an integral float is accepted; a bool, a
    fraction, NaN or text is not), or raise.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : Any
        A whole number.
    lo, hi : int or None
        The inclusive bounds (None: unbounded on that side).

    Returns
    -------
    int
        The value.
    """
    rng = interval(lo, hi)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an integer in {rng}, got {value!r}")
    if isinstance(value, numbers.Integral):
        v = int(value)
    else:
        f = float(value)
        if not (math.isfinite(f) and f.is_integer()):
            raise ValueError(f"{name} must be an integer in {rng}, got {value!r}")
        v = int(f)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} must be an integer in {rng}, got {value!r}")
    return v
