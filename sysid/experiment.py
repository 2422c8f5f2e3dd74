"""Drive a plant with an excitation signal and record an :class:`~sysid.data.IdData`.

Any plant works, by duck typing (sysid imports nothing from the rest of the project):

* an object with ``step(actuation, period_s)`` — a harness ``Plant`` — which is given an
  actuation with ``sleep_s`` and ``mps_pct`` attributes for each period and returns the
  period's measurement (a float, or an object/mapping with ``mean_ms``/``mean``,
  ``p99_ms``/``p99`` and ``count``: see :func:`measurement_value`);
* or a plain callable ``u -> y``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import finite, int_at_least, is_bool, positive, vector
from .data import IdData

__all__ = ["ExcitationActuation", "measurement_value", "run_experiment"]


@dataclass(frozen=True)
class ExcitationActuation:
    """What the runner applies in one period: the fields a harness plant reads from
    ``gpucontrol.Actuation``.

    Parameters
    ----------
    sleep_s : float
        Training sleep interval for the period (s).
    mps_pct : float
        Training MPS percentage.
    mps_changed : bool
        The training processes must (re)start at ``mps_pct``.
    saturated : bool
        Always False (an excitation is not a controller output).
    reason : str
        What set the actuation.
    """

    sleep_s: float
    mps_pct: float = 100.0
    mps_changed: bool = False
    saturated: bool = False
    reason: str = "sysid excitation"


#: Where each statistic is read from a mapping or an object, first key first: the same keys,
#: in the same order, as ``gpucontrol.measurement.MEASUREMENT_KEYS`` (sysid cannot import it).
_KEYS = {"mean": ("mean_ms", "mean"), "p99": ("p99_ms", "p99")}


def measurement_value(m: Any, statistic: str = "mean") -> float:
    """One latency statistic of a plant's per-period measurement, as a float.

    Reads a measurement the way ``gpucontrol.measurement.as_measurement`` does (a number, or
    a mapping or object with ``mean_ms``/``mean``, ``p99_ms``/``p99`` and ``count``), so a
    harness ``PeriodResult`` or a ``gpucontrol.Measurement`` works by duck typing. Unlike the
    controller's reader, which must never raise, this one raises on a measurement it cannot
    read, so that an experiment does not silently record garbage.

    Parameters
    ----------
    m : float, mapping or object
        The measurement.
    statistic : {"mean", "p99"}
        Which statistic to read.

    Returns
    -------
    float
        The statistic; NaN when the period measured no requests (``count`` 0, where a
        controller holds) or the value is not a number.

    Raises
    ------
    ValueError
        If ``statistic`` is unknown, ``m`` has none of the statistic's keys (or, a mapping,
        both), or its ``count`` is not a whole number >= 0.
    TypeError
        If ``m`` is a string, a bool, or a sequence or array (several values, or one value
        in a list): not one period's measurement.

    Examples
    --------
    >>> measurement_value({"mean_ms": 90.0, "p99_ms": 120.0}, "p99")
    120.0
    >>> measurement_value({"mean_ms": 90.0, "count": 0})
    nan
    >>> measurement_value([90.0])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: cannot read a 'mean' latency from a list measurement [90.0] ...
    """
    if statistic not in _KEYS:
        raise ValueError(f"statistic must be 'mean' or 'p99', got {statistic!r}")
    expected = f"expected a number or one of {', '.join(_KEYS[statistic])}"
    if isinstance(m, (int, float, np.number)) and not is_bool(m):
        return float(m)
    if getattr(m, "ndim", None) == 0 and np.asarray(m).dtype.kind in "iuf":
        return float(m)
    # A string, a bool, a sequence or an array is not one period's measurement (a list or a
    # str even has a count() method that would pass for the count field).
    if isinstance(m, (str, bytes, bytearray, Sequence, np.ndarray)) or is_bool(m):
        raise TypeError(f"cannot read a {statistic!r} latency from a {type(m).__name__} "
                        f"measurement {m!r:.60} ({expected}; one value per period)")
    get = m.get if isinstance(m, Mapping) else (lambda k, d=None: getattr(m, k, d))
    count = get("count", 1)
    if is_bool(count) or not (isinstance(count, numbers.Integral) or (
            isinstance(count, (float, np.floating)) and float(count).is_integer())):
        raise ValueError(f"cannot read a {type(m).__name__} measurement: its count must be a "
                         f"whole number of requests, got {count!r:.60}")
    if int(count) < 0:
        raise ValueError(f"cannot read a {type(m).__name__} measurement: its count must be "
                         f">= 0 (0: no requests), got {count!r:.60}")
    if int(count) == 0:
        return math.nan
    if isinstance(m, Mapping) and all(m.get(k) is not None for k in _KEYS[statistic]):
        raise ValueError(f"cannot read a mapping measurement: give "
                         f"{' or '.join(_KEYS[statistic])}, not both")
    for key in _KEYS[statistic]:
        v = get(key, None)
        if v is not None:
            try:
                return float(v)
            except (TypeError, ValueError):
                return math.nan
    raise ValueError(f"cannot read a {statistic!r} latency from a {type(m).__name__} "
                     f"measurement ({expected})")


#: Metadata keys run_experiment records itself; ``meta`` may not override them.
_RECORDED = ("statistic", "mps_pct", "warmup", "dropped")


def run_experiment(plant: Any, u, *, period_s: float = 4.0, mps_pct: float | None = None,
                   statistic: str = "mean", warmup: int = 0, on_invalid: str = "raise",
                   actuation: Callable[[float], Any] | None = None,
                   meta: Mapping[str, Any] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> IdData:
    """Apply ``u[k]`` for one period each and record the plant's response.

    Parameters
    ----------
    plant : Plant-like or callable
        ``plant.step(actuation, period_s) -> measurement`` or ``plant(u) -> y``.
    u : array_like
        The excitation (e.g. :func:`sysid.white_noise` on the sleep interval, s).
    period_s : float
        Control/sampling period (s), passed to ``step`` and recorded.
    mps_pct : float, optional
        Training MPS percentage to hold during the experiment; the first actuation then sets
        ``mps_changed=True`` so that the plant applies it (use ``warmup`` to skip the
        restart). Default: the plant's current ``mps_pct`` if it has one (not None), else 100.
    statistic : {"mean", "p99"}
        Which latency statistic of a period is the output.
    warmup : int
        Periods to run at ``u[0]`` before recording (settling, MPS restart).
    on_invalid : {"raise", "drop"}
        What to do with periods that yield no finite output (no requests, restart downtime):
        raise ValueError naming the period, or drop them (fine for static fits; it breaks
        the time alignment dynamic models rely on).
    actuation : callable, optional
        ``u_k -> actuation`` object for Plant-like plants (default: :class:`ExcitationActuation`).
    meta : mapping, optional
        Extra metadata for the record (string keys), merged with what the runner records;
        it may not contain the keys the runner sets (``statistic``, ``mps_pct``, ``warmup``,
        ``dropped``).
    progress : callable, optional
        ``progress(done, total)`` after each recorded period.

    Returns
    -------
    IdData
        The inputs applied and the outputs measured, with ``statistic``, ``mps_pct``,
        ``warmup`` and ``dropped`` in its metadata.

    Examples
    --------
    >>> from sysid import white_noise
    >>> d = run_experiment(lambda s: 95.0 - 12.0 * s, white_noise(20, 0.0, 1.0, seed=0))
    >>> len(d), round(float(d.y[0] + 12.0 * d.u[0]), 9)
    (20, 95.0)
    """
    uu = vector("u", u, min_len=1)
    T = positive("period_s", period_s)
    if meta is not None and not isinstance(meta, Mapping):
        raise ValueError(f"meta must be a mapping (e.g. a dict) or None, got "
                        f"{type(meta).__name__} {meta!r:.60}")
    clash = sorted(set(meta or {}) & set(_RECORDED))
    if clash:
        raise ValueError(f"meta must not set {', '.join(map(repr, clash))}: run_experiment "
                         "records these itself (pass statistic=/mps_pct=/warmup= instead)")
    warmup = int_at_least("warmup", warmup, 0)
    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    measurement_value(0.0, statistic)  # validates the statistic name
    has_step = callable(getattr(plant, "step", None))
    if not has_step and not callable(plant):
        raise ValueError("plant must have step(actuation, period_s) or be a callable u -> y")
    if mps_pct is None:
        current = getattr(plant, "mps_pct", None)  # None: not started yet
        mps = 100.0 if current is None else finite("plant.mps_pct", current)
        set_mps = False
    else:
        mps = finite("mps_pct", mps_pct)
        set_mps = True
    if not 0 < mps <= 100:
        raise ValueError(f"mps_pct must be in (0, 100], got {mps!r}")

    first = [set_mps]

    def apply(x: float) -> float:
        if not has_step:
            return measurement_value(plant(float(x)), statistic)
        if actuation is not None:
            act = actuation(float(x))
        else:
            act = ExcitationActuation(sleep_s=float(x), mps_pct=mps, mps_changed=first[0])
        first[0] = False
        return measurement_value(plant.step(act, T), statistic)

    for _ in range(warmup):
        apply(uu[0])
    ys = np.empty(uu.size)
    for k, x in enumerate(uu):
        ys[k] = apply(x)
        if progress is not None:
            progress(k + 1, uu.size)
    bad = _invalid(ys, statistic, on_invalid)
    info = {"statistic": statistic, "mps_pct": mps, "warmup": warmup,
            "dropped": int(bad.sum())}
    return IdData(uu[~bad], ys[~bad], period_s=T, meta={**dict(meta or {}), **info})


def _invalid(ys: np.ndarray, statistic: str, on_invalid: str) -> np.ndarray:
    """The periods without a finite reading, to drop; raise if there are any and
    ``on_invalid`` is ``"raise"``, or if there is nothing else."""
    bad = ~np.isfinite(ys)
    if bad.any() and on_invalid == "raise":
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"the plant returned no finite {statistic} latency in "
                         f"{int(bad.sum())} period(s) (first: period {i}); pass "
                         "on_invalid='drop' to discard them or add warmup periods")
    if bad.all():   # an empty record would only say "u is too short: 0 sample(s)"
        raise ValueError(f"the plant returned no finite {statistic} latency in any of the "
                         f"{ys.size} period(s): nothing to record (is the inference serving "
                         "requests?)")
    return bad
