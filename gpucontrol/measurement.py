"""Measurements: one control period's latency statistics, and how a reading becomes one.

:class:`Measurement` refuses what cannot be a measurement (a bool, a negative count, an
unknown key), naming the field and the rule; :func:`as_measurement` turns whatever a caller
passes to ``update`` (a number, a mapping, a Measurement, None) into one, and a reading that
is not usable (NaN, inf, negative, a period with no requests) into a hold, never an error:
the controllers hold their last output and say why.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucontrol._validate import is_bool
from gpucontrol.errors import ConfigurationError

__all__ = ["MAPPING_KEYS", "MEASUREMENT_KEYS", "Measurement", "as_measurement",
           "check_measurement", "measurement_from_mapping", "usable"]


@dataclass(frozen=True, init=False)
class Measurement:
    """One control period's latency statistics.

    The statistics may be given as ``mean``/``p99`` (the README's form) or ``mean_ms``/
    ``p99_ms``; both name the same fields.

    Parameters
    ----------
    mean_ms : float
        Mean per-batch inference latency over the period (ms); also accepted as ``mean``.
    p99_ms : float
        99th percentile of the per-batch latency (ms); NaN when not measured; also ``p99``.
    count : int
        Number of batches measured, >= 0; 0 means no requests, and the controllers then hold
        the actuation.
    restarting : bool
        The training process was restarting (MPS change) during the period.
    iteration_s : float
        Mean compute time of one training iteration in the period (s, sleep excluded), where
        the node measures it; NaN when unknown.
    mean : float, optional
        The README's name for ``mean_ms`` (give one of the two).
    p99 : float, optional
        The README's name for ``p99_ms``.

    Numbers of any real type (ints, numpy scalars) are stored as floats; a string, a bool or
    another non-number raises TypeError, a negative count ConfigurationError. NaN, inf and
    negative readings are kept: the controllers hold on them. A p99 below the mean is kept
    too: it is a real outcome, not a malformed one -- the node's Prometheus source
    interpolates the p99 inside its histogram bucket while the mean is exact (two batches of
    49.9 ms in the 10-50 ms bucket read as mean 49.9, p99 49.6), and a period whose slowest 1 %
    of batches is many times the rest has its mean above its p99. Each mode uses its own
    statistic (``mode="p99"`` the p99).

    Examples
    --------
    >>> Measurement(92.0, p99_ms=110.0)
    Measurement(mean_ms=92.0, p99_ms=110.0, count=1, restarting=False)
    >>> Measurement(mean=92, p99=110, count=40)
    Measurement(mean_ms=92.0, p99_ms=110.0, count=40, restarting=False)
    """

    mean_ms: float
    p99_ms: float
    count: int
    restarting: bool
    iteration_s: float = field(default=math.nan, repr=False, compare=False)

    def __init__(self, mean_ms: float | None = None, p99_ms: float | None = None,
                 count: int = 1, restarting: bool = False, *, mean: float | None = None,
                 p99: float | None = None, iteration_s: float = math.nan) -> None:
        if mean is not None and mean_ms is not None:
            raise TypeError("Measurement: give mean or mean_ms, not both")
        if p99 is not None and p99_ms is not None:
            raise TypeError("Measurement: give p99 or p99_ms, not both")
        m = mean if mean is not None else mean_ms
        if m is None:
            raise TypeError("Measurement needs the period's mean latency (mean= or mean_ms=)")
        q = p99 if p99 is not None else p99_ms
        object.__setattr__(self, "mean_ms", _reading("mean", m))
        object.__setattr__(self, "p99_ms", math.nan if q is None else _reading("p99", q))
        object.__setattr__(self, "count", _count(count))
        if not is_bool(restarting):
            raise TypeError(f"Measurement: restarting must be True or False, got {restarting!r}")
        object.__setattr__(self, "restarting", bool(restarting))
        object.__setattr__(self, "iteration_s", math.nan if iteration_s is None else
                           _reading("iteration_s", iteration_s))


def _reading(name: str, x: Any) -> float:
    """A statistic as a float (ints and numpy scalars too); NaN/inf/negative stay as they are:
    the controllers hold on them. Raises TypeError for what is not a number."""
    if type(x) is float:                 # (the usual case, per period: no ABC checks)
        return x
    if (isinstance(x, numbers.Real) and not isinstance(x, bool)) or (
            getattr(x, "ndim", None) == 0 and not isinstance(x, (str, bytes))):
        try:
            return float(x)
        except (TypeError, ValueError):
            pass
    unit = "s" if name == "iteration_s" else "ms"
    raise TypeError(f"Measurement: {name} must be a number ({unit}), "
                    f"got {type(x).__name__} {x!r}")


def _count(x: Any) -> int:
    """The batch count as an int (an integral float too); TypeError for what is not a whole
    number, ConfigurationError (a ValueError) for a negative one: no period measures fewer
    than no batches, and holding on it as "no requests" would hide the caller's bug."""
    if type(x) is int and x >= 0:        # (the usual case, per period: no ABC checks)
        return x
    if isinstance(x, bool) or not (isinstance(x, numbers.Integral) or (
            isinstance(x, float) and x.is_integer())):
        raise TypeError(f"Measurement: count must be a whole number of batches, got {x!r}")
    if x < 0:
        raise ConfigurationError(f"Measurement: count must be >= 0 (batches measured in the "
                                 f"period; 0: no requests), got {x!r}")
    return int(x)


#: Where each statistic is read from a mapping or an object, first key first. sysid's
#: ``measurement_value`` reads the same keys in the same order (sysid cannot import this).
MEASUREMENT_KEYS: dict[str, tuple[str, ...]] = {"mean": ("mean_ms", "mean"),
                                                "p99": ("p99_ms", "p99")}
#: Every key a mapping given to ``update`` may hold: :class:`Measurement`'s fields and names.
MAPPING_KEYS: tuple[str, ...] = ("mean", "mean_ms", "p99", "p99_ms", "count", "restarting",
                                 "iteration_s")


def measurement_from_mapping(x: Mapping[Any, Any], name: str = "measurement") -> Measurement:
    """A mapping with :class:`Measurement`'s keys (``{"mean": 95, "p99": 120, "count": 40}``)
    as a Measurement, checked as the constructor checks its arguments.

    A key that is not one of :data:`MAPPING_KEYS` raises (a misspelt ``"men"`` would
    otherwise leave the period without a mean and hold the loop silently), and so does a
    mapping without a mean unless its ``count`` is 0 (a period with no requests).

    Parameters
    ----------
    x : Mapping
        The period's statistics.
    name : str
        The argument's name, for the message.

    Returns
    -------
    Measurement
        The measurement.

    Raises
    ------
    TypeError
        An unknown key, no mean, or a value of the wrong type (a string, a bool).
    ConfigurationError
        A value out of its range (a negative count).

    Examples
    --------
    >>> measurement_from_mapping({"mean": 95, "p99": 120, "count": 40})
    Measurement(mean_ms=95.0, p99_ms=120.0, count=40, restarting=False)
    """
    unknown = [k for k in x if k not in MAPPING_KEYS]
    if unknown:
        raise TypeError(f"{name}: unknown key(s) {', '.join(map(repr, unknown))}; a mapping "
                        f"takes {', '.join(MAPPING_KEYS)}")
    count = x.get("count", 1)
    mean, mean_ms = x.get("mean"), x.get("mean_ms")
    if mean is None and mean_ms is None:
        if _count(count) != 0:
            raise TypeError(f"{name} needs the period's mean latency under 'mean' or "
                            f"'mean_ms' (ms), got keys {sorted(map(str, x))}")
        mean_ms = math.nan  # a period with no requests has no mean
    it = x.get("iteration_s")
    return Measurement(mean_ms, x.get("p99_ms"), count, x.get("restarting", False), mean=mean,
                       p99=x.get("p99"), iteration_s=math.nan if it is None else it)


def check_measurement(x: Any, name: str = "measurement") -> None:
    """Raise for inputs that are plainly not one period's measurement: strings and byte
    strings, booleans (``True`` is not 1 ms), sequences or arrays of several values (a 0-d
    numpy scalar is fine), and mappings :func:`measurement_from_mapping` refuses (unknown
    keys, no mean, values of the wrong type or range). Anything else that is unreadable
    (``None``, an object without latency fields) is held on.

    Parameters
    ----------
    x : Any
        The candidate measurement.
    name : str
        The argument's name, for the message.

    Returns
    -------
    None

    Raises
    ------
    TypeError
        ``x`` is not a measurement (the message names what it is).
    ConfigurationError
        A mapping's value is out of its range.
    """
    if type(x) is float or isinstance(x, Measurement):
        return
    if isinstance(x, (str, bytes, bytearray)) or is_bool(x):
        raise TypeError(f"{name} must be a latency in ms (float), a Measurement or a mapping "
                        f"or object with mean/mean_ms, got {type(x).__name__} {x!r}")
    if isinstance(x, Mapping):
        measurement_from_mapping(x, name)
        return
    ndim = getattr(x, "ndim", None)
    if (ndim is not None and ndim != 0) or isinstance(x, (list, tuple, set, frozenset)):
        n = len(x) if hasattr(x, "__len__") and ndim != 0 else "several"
        raise TypeError(f"{name} must be one period's value, not a sequence of {n} values "
                        f"(got {type(x).__name__}); call update once per period")


def as_measurement(x: Any) -> Measurement:
    """Coerce a float, a :class:`Measurement`, a mapping or any object with ``mean``/``mean_ms``,
    ``p99``/``p99_ms``, ``count`` (and optionally ``iteration_s``) into a Measurement. Never
    raises: anything unreadable becomes a zero-count measurement (which the controllers hold
    on); :func:`check_measurement` rejects what is not a measurement at all."""
    if isinstance(x, Measurement):
        return x
    if type(x) is float:
        return Measurement(x)
    try:
        if isinstance(x, numbers.Real) and not is_bool(x):
            return Measurement(float(x))
        if getattr(x, "ndim", None) == 0 and not is_bool(x):
            return Measurement(float(x))
        if isinstance(x, Mapping):
            return measurement_from_mapping(x)

        def read(statistic: str) -> float:
            for key in MEASUREMENT_KEYS[statistic]:
                v = getattr(x, key, None)
                if v is not None:
                    return float(v)
            return math.nan

        it = getattr(x, "iteration_s", None)
        return Measurement(read("mean"), read("p99"), int(getattr(x, "count", 1)),
                           bool(getattr(x, "restarting", False)),
                           iteration_s=math.nan if it is None else float(it))
    except Exception:
        return Measurement(math.nan, math.nan, 0)


def usable(value: float, max_ms: float = math.inf) -> bool:
    """True for a finite, non-negative float latency no larger than ``max_ms`` (the
    plausibility bound: a larger reading is a glitch and counts as a missing period)."""
    return isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= max_ms
