"""Small validators shared by the configuration dataclasses.

Every invalid configuration raises :class:`~gpucontrol.errors.ConfigurationError` (a
``ValueError``) naming the field and the allowed range, so a caller can tell at once what to
fix. Each function takes the field's name first, then its value, then the allowed range.

``sysid/_checks.py`` mirrors the scalar checks for sysid, which cannot import gpucontrol: a
function with the same name there takes the same arguments and words its message the same way,
raising a plain ``ValueError``.
"""

from __future__ import annotations

import difflib
import math
import numbers
import sys
from typing import Any

from gpucontrol.errors import ConfigurationError


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
    """Return ``value`` as a float, or raise if it is not a finite real number (a string or a
    bool is not one, even when ``float()`` would take it; nor an int past the float range)."""
    if isinstance(value, (str, bytes, bytearray)) or is_bool(value):
        raise ConfigurationError(f"{name} must be a finite number, got {value!r} "
                                 f"({type(value).__name__})")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be a finite number, got {value!r}") from None
    except OverflowError:   # an int (or a Fraction) past the float range: 10 ** 400
        raise ConfigurationError(f"{name} must be a finite number (within +-{_FLOAT_MAX:.4g}), "
                                 f"got {shown(value)}") from None
    if not math.isfinite(v):
        raise ConfigurationError(f"{name} must be a finite number, got {value!r}")
    return v


def in_range(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
             hi_open: bool = False) -> float:
    """Return ``value`` as a float inside ``[lo, hi]`` (ends open where asked) or raise."""
    # an int is compared as it is (exactly, however large: 10 ** 400 is out of [0, 1], not
    # an overflow); one inside an infinite range but past the float range fails in finite()
    v: float = int(value) if isinstance(value, numbers.Integral) and not is_bool(value) \
        else finite(name, value)
    lo_ok = v > lo if lo_open else v >= lo
    hi_ok = v < hi if hi_open else v <= hi
    if not (lo_ok and hi_ok):
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise ConfigurationError(f"{name} must be in {left}{lo:g}, {hi:g}{right}, "
                                 f"got {shown(value)}")
    return finite(name, value)


def positive(name: str, value: Any) -> float:
    """Return ``value`` as a float > 0, or raise."""
    v = finite(name, value)
    if v <= 0:
        raise ConfigurationError(f"{name} must be > 0, got {value!r}")
    return v


def int_at_least(name: str, value: Any, lo: int) -> int:
    """Return ``value`` as an int >= ``lo`` (integral floats and numpy integers accepted; bool
    not), or raise."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) or (
            isinstance(value, float) and value.is_integer())):
        raise ConfigurationError(f"{name} must be an integer >= {lo}, got {value!r}")
    v = int(value)
    if v < lo:
        raise ConfigurationError(f"{name} must be an integer >= {lo}, got {shown(value)}")
    return v


def bounds(name: str, value: Any, lo: float, hi: float) -> tuple[float, float]:
    """Validate one ``(low, high)`` pair argument with ``lo <= low < high <= hi``."""
    try:
        a, b = value
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be a (low, high) pair within [{lo:g}, {hi:g}], "
                                 f"got {value!r}") from None
    a = finite(f"{name}[0]", a)
    b = finite(f"{name}[1]", b)
    if not (lo <= a < b <= hi):
        raise ConfigurationError(
            f"{name} must satisfy {lo:g} <= low < high <= {hi:g}, got {value!r}")
    return a, b


def flag(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (Python's or numpy's), or raise: a string such as
    ``'no'`` is truthy and would silently mean True."""
    if is_bool(value):
        return bool(value)
    raise ConfigurationError(f"{name} must be True or False, got {value!r}")


def choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed`` (a string), or raise (an array too: its
    ``in`` would compare element by element)."""
    if not (isinstance(value, str) and value in allowed):
        raise ConfigurationError(
            f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def known_keys(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    """Raise if the mapping ``value`` has a key not in ``allowed`` (the first one named, with
    the nearest allowed key when one is close: a misspelt key would otherwise be dropped)."""
    for key in value:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigurationError(f"{name}: unknown key {key!r}{hint}; the keys are "
                                     f"{', '.join(allowed)}")
