"""Input checks shared by the sysid modules.

Every check raises :class:`ValueError` naming the offending argument and what is wrong with
it, so a bad record never turns into a silent garbage fit.

The scalar checks mirror :mod:`gpucontrol._validate` (sysid cannot import gpucontrol): a
function with the same name takes the same arguments (the argument's name first, then its
value, then the allowed range) and words its message the same way; only the exception class
differs (``ValueError`` here, ``gpucontrol.errors.ConfigurationError``, a ``ValueError``
subclass, there). :func:`vector`, :func:`pair`, :func:`not_constant`, :func:`low_high`,
:func:`random_seed` and :func:`int_values` are sysid's own.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np


def _numeric(name: str, value: Any) -> None:
    """Raise unless ``value``'s elements are real numbers: ``float()`` would take the strings
    ``"1"`` and the bools ``True``, and drop a complex number's imaginary part."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):
        return  # ragged and such: the float conversion below says so
    kind = raw.dtype.kind
    if kind in "iuf":
        return
    if kind == "O" and all(isinstance(v, numbers.Real) and not is_bool(v)
                           for v in raw.ravel().tolist()):
        return
    what = {"b": "bool", "U": "str", "S": "bytes", "c": "complex"}.get(kind, str(raw.dtype))
    if kind == "O":
        what = "non-numeric"
    raise ValueError(f"{name} must be a sequence of numbers, got {what} values")


def vector(name: str, value: Any, *, min_len: int = 1) -> np.ndarray:
    """``value`` as a 1-D float array of finite numbers with at least ``min_len`` samples
    (strings, bools and complex numbers refused, even where ``float()`` would take them)."""
    _numeric(name, value)
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a sequence of numbers, got {type(value).__name__}") \
            from None
    except OverflowError:   # an int past the float range: 10 ** 400
        raise ValueError(f"{name} contains a number past the float range "
                         f"(+-{_FLOAT_MAX:.4g})") from None
    if a.ndim == 2 and 1 in a.shape:
        a = a.ravel()
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if a.size < min_len:
        raise ValueError(f"{name} is too short: {a.size} sample(s), need at least {min_len}")
    bad = ~np.isfinite(a)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} contains NaN or infinite values ({int(bad.sum())} of "
                         f"{a.size}; first at index {i})")
    return a


def pair(u: Any, y: Any, *, min_len: int = 1, names: tuple[str, str] = ("u", "y")
         ) -> tuple[np.ndarray, np.ndarray]:
    """Two vectors of equal length (at least ``min_len``)."""
    a = vector(names[0], u, min_len=0)   # (an empty one is judged by the record's minimum)
    b = vector(names[1], y, min_len=0)
    if a.size != b.size:
        raise ValueError(f"{names[0]} and {names[1]} have mismatched lengths: "
                         f"{a.size} != {b.size}")
    if a.size < min_len:
        raise ValueError(f"{names[0]} is too short: {a.size} sample(s), need at least {min_len}")
    return a, b


def not_constant(name: str, a: np.ndarray) -> None:
    """Raise if ``a`` does not vary: a constant input makes the gain unidentifiable."""
    scale = max(float(np.max(np.abs(a))), 1.0)
    if float(np.ptp(a)) <= 1e-12 * scale:
        raise ValueError(f"{name} is constant ({a[0]:g}): the gain is unidentifiable; "
                         "excite the system with a varying input")


def output_varies(y: np.ndarray) -> None:
    """Raise if the output ``y`` does not vary: there are no dynamics to fit (a model of a
    dynamic plant, ARX or NARX, needs the input to move the output)."""
    if float(np.ptp(y)) <= 1e-12 * max(float(np.max(np.abs(y))), 1.0):
        raise ValueError(f"y is constant ({y[0]:g}): the output does not respond to the "
                         "input, so there are no dynamics to fit (use fit_static, which gives "
                         "gain 0, or check the measurement)")


def is_bool(value: Any) -> bool:
    """Whether ``value`` is a Python or numpy bool."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy"
                                       and type(value).__name__ in ("bool", "bool_"))


#: The largest float; an int past it has no float (``float(10 ** 400)`` raises OverflowError).
_FLOAT_MAX = sys.float_info.max


def shown(value: Any) -> str:
    """``repr(value)`` for a message, but an int past the float range as its size (its repr
    is hundreds of digits long, and past 4300 digits ``repr`` itself raises ValueError)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT_MAX:
        return f"an int of about {'-' if value < 0 else ''}10**{math.log10(abs(value)):.0f}"
    return repr(value)


def finite(name: str, value: Any) -> float:
    """``value`` as a float, or raise if it is not a finite real number (a string or a bool
    is not one, even when ``float()`` would take it; nor an int past the float range)."""
    if isinstance(value, (str, bytes, bytearray)) or is_bool(value):
        raise ValueError(f"{name} must be a finite number, got {value!r} "
                         f"({type(value).__name__})")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number, got {value!r}") from None
    except OverflowError:   # an int (or a Fraction) past the float range: 10 ** 400
        raise ValueError(f"{name} must be a finite number (within +-{_FLOAT_MAX:.4g}), "
                         f"got {shown(value)}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return v


def positive(name: str, value: Any) -> float:
    """``value`` as a float > 0, or raise."""
    v = finite(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def in_range(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
             hi_open: bool = False) -> float:
    """``value`` as a float inside ``[lo, hi]`` (ends open where asked), or raise."""
    # an int is compared as it is (exactly, however large: 10 ** 400 is out of [0, 1], not
    # an overflow); one inside an infinite range but past the float range fails in finite()
    v: float = int(value) if isinstance(value, numbers.Integral) and not is_bool(value) \
        else finite(name, value)
    lo_ok = v > lo if lo_open else v >= lo
    hi_ok = v < hi if hi_open else v <= hi
    if not (lo_ok and hi_ok):
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise ValueError(f"{name} must be in {left}{lo:g}, {hi:g}{right}, got {shown(value)}")
    return finite(name, value)


def int_at_least(name: str, value: Any, lo: int) -> int:
    """``value`` as an int >= ``lo`` (integral floats and numpy integers accepted; bool not)."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) or (
            isinstance(value, float) and value.is_integer())):
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    v = int(value)
    if v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {shown(value)}")
    return v


def flag(name: str, value: Any) -> bool:
    """``value`` if it is a bool (Python's or numpy's), or raise: a string such as ``'no'``
    is truthy and would silently mean True."""
    if is_bool(value):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r}")


def low_high(low: Any, high: Any) -> tuple[float, float]:
    """Two separate arguments ``low`` and ``high`` as floats with ``low < high``.

    (:func:`gpucontrol._validate.bounds` checks one ``(low, high)`` *pair* argument against
    an allowed range; this checks two arguments against each other, hence the other name.)
    """
    lo, hi = finite("low", low), finite("high", high)
    if not lo < hi:
        raise ValueError(f"low must be < high, got low={low!r}, high={high!r}")
    if not math.isfinite(hi - lo):
        raise ValueError(f"high - low must be a finite number, got low={low!r}, "
                         f"high={high!r}")
    return lo, hi


def random_seed(name: str, value: Any) -> int | None:
    """``value`` as a random seed: None or an integer >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be None or an integer >= 0, got {value!r}")
    v = int(value)
    if v < 0:
        raise ValueError(f"{name} must be None or an integer >= 0, got {shown(value)}")
    return v


def int_values(name: str, value: Any, lo: int) -> tuple[int, ...]:
    """``value`` as a tuple of integers >= ``lo`` (any iterable: a range, a list), or raise."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Iterable):
        raise ValueError(f"{name} must be a sequence of integers >= {lo} (e.g. a range or a "
                         f"list), got {value!r}")
    return tuple(int_at_least(f"{name} entry", v, lo) for v in value)
