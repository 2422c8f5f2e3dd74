"""Range checks of the cluster simulator's configuration fields.

Every field of :class:`~harness.cluster.config.SimConfig`, :class:`~harness.cluster.config.GpuType`,
:class:`~harness.cluster.policies.PlantParams`, :class:`~harness.cluster.policies.ControlParams`
and :class:`~harness.cluster.synthetic.SyntheticConfig` is refused, with a ``ValueError`` that
names it and its range, when it is not a finite number in that range (a wrong type, NaN and
infinity included) instead of running with it: a NaN GPU memory made the engine look for a
GPU slot forever, a zero GPU speed left every job unfinished.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["check_int", "check_number"]


def _interval(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    left = "(" if lo_open or lo is None else "["
    right = ")" if hi_open or hi is None else "]"
    return (f"{left}{'-inf' if lo is None else f'{lo:g}'}, "
            f"{'inf' if hi is None else f'{hi:g}'}{right}")


def check_number(name: str, value: object, lo: float | None = None, hi: float | None = None,
                 *, lo_open: bool = False, hi_open: bool = False) -> None:
    """Refuse ``value`` unless it is a finite real number in the range.

    Parameters
    ----------
    name : str
        The field's name, for the message.
    value : object
        The value.
    lo, hi : float or None
        The bounds (None: unbounded on that side).
    lo_open, hi_open : bool
        Whether the bound itself is excluded.

    Raises
    ------
    ValueError
        Naming the field, its range and the value.
    """
    rng = _interval(lo, hi, lo_open, hi_open)
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and math.isfinite(float(value)))
    if ok:
        x = float(value)  # type: ignore[arg-type]
        ok = not ((lo is not None and (x < lo or (lo_open and x == lo)))
                  or (hi is not None and (x > hi or (hi_open and x == hi))))
    if not ok:
        raise ValueError(f"{name} must be a number in {rng}, got {value!r}")


def check_int(name: str, value: object, lo: int | None = None, hi: int | None = None) -> None:
    """Refuse ``value`` unless it is an integer in ``[lo, hi]``.

    Parameters
    ----------
    name : str
        The field's name, for the message.
    value : object
        The value.
    lo, hi : int or None
        The inclusive bounds (None: unbounded on that side).

    Raises
    ------
    ValueError
        Naming the field, its range and the value.
    """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if ok:
        x = int(value)  # type: ignore[call-overload]
        ok = (lo is None or x >= lo) and (hi is None or x <= hi)
    if not ok:
        raise ValueError(f"{name} must be an integer in {_interval(lo, hi, False, False)}, "
                         f"got {value!r}")
