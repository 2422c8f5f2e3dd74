"""The zoo's load and references: a synthetic production-like load, its scenario, the
per-period static oracle, and the white-noise record a user identifies a sleep model from
(re-exported by :mod:`harness.sim.zoo`)."""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from harness.checks import integer, number, numbers_in
from harness.sim.protocol import LoadEvent, Scenario

__all__ = ["level_rates", "load_scenario", "load_trace", "oracle_rate", "white_noise_record"]

#: The latency statistics an SLO can bound.
STATISTICS = ("mean", "p99")


def _statistic(statistic: Any) -> str:
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    return str(statistic)


def _steps(steps: Any, periods: int) -> list[tuple[int, float]]:
    """``load_trace``'s steps, checked: ``(period, factor)`` pairs, the period inside the
    trace (a negative one would count from its end), the factor a finite number > 0."""
    out = []
    for st in steps:
        if isinstance(st, (str, bytes)) or not hasattr(st, "__len__") or len(st) != 2:
            raise ValueError(f"steps must be (period, factor) pairs, got {st!r}")
        out.append((integer("steps period", st[0], 0, max(periods - 1, 0)),
                    number("steps factor", st[1], 0.0, 20.0, lo_open=True)))
    return out


def load_trace(periods: int, *, seed: int = 0, swing: float = 0.12, jitter: float = 0.02,
               steps: tuple[tuple[int, float], ...] = ()) -> np.ndarray:
    """A synthetic production-like load factor per period (1 = nominal).

    Parameters
    ----------
    periods : int
        Number of periods.
    seed : int
        Random seed.
    swing : float
        Amplitude of the slow (one cycle per run) swing.
    jitter : float
        Standard deviation of the AR(1) (coefficient 0.9) fast component.
    steps : tuple of (int, float)
        ``(period, factor)``: from that period on the load is multiplied by ``factor``.

    Returns
    -------
    numpy.ndarray
        The load factor of each period.
    """
    periods = integer("periods", periods, 0, 10**7)
    rng = np.random.default_rng(integer("seed", seed, 0))
    swing = number("swing", swing, 0.0, 1.0)
    jitter = number("jitter", jitter, 0.0, 1.0)
    checked = _steps(steps, periods)
    k = np.arange(periods)
    slow = 1.0 + swing * np.sin(2 * np.pi * k / max(periods, 1) - np.pi / 2)
    e = np.zeros(periods)
    for i in range(1, periods):
        e[i] = 0.9 * e[i - 1] + jitter * math.sqrt(1 - 0.81) * rng.standard_normal()
    q = slow + e
    for at, f in checked:
        q[at:] *= f
    return np.clip(q, 0.3, 5.0)


def load_scenario(loads: Any, period_s: float = 4.0) -> Scenario:
    """The load factors as ``set_load(load=...)`` events, one per period where it changes.

    Parameters
    ----------
    loads : array_like
        Load factor of each period.
    period_s : float
        Control period (s).

    Returns
    -------
    Scenario
        Events at ``k * period_s``.
    """
    period_s = number("period_s", period_s, 0.0, None, lo_open=True)
    ev, last = [], None
    for k, q in enumerate(np.ravel(numbers_in("loads", loads, 0.0, None, lo_open=True))):
        v = round(float(q), 4)
        if v != last:
            ev.append(LoadEvent.at(k * period_s, load=v))
            last = v
    return Scenario.of(*ev)


#: Per plant (held weakly: a freed plant's entries go with it, and a new plant that takes over
#: its ``id`` does not read them), the oracle's rate per (load, SLO, statistic, levels).
_ORACLE_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple[float, float, str, tuple[float, ...]],
                                                   float]] = weakref.WeakKeyDictionary()


def oracle_rate(plant: Any, slo_ms: float, load: float, statistic: str = "mean",
                levels_pct: Any = None) -> float:
    """The per-period static oracle: the best training rate (iterations/s) on a sleep x MPS
    grid whose noise-free ``statistic`` latency at ``load`` meets ``slo_ms`` (0 if none).

    Parameters
    ----------
    plant : zoo plant
        Any plant of :func:`make_plant`.
    slo_ms : float
        The SLO (ms).
    load : float
        Load factor.
    statistic : {"mean", "p99"}
        Which latency the SLO bounds.
    levels_pct : sequence of float, optional
        Only these MPS levels (e.g. green-context partitions ``(25, 50, 75, 100)``), each in
        (0, 100]; default every whole percent from 1 to 100.

    Returns
    -------
    float
        Iterations per second.
    """
    slo_ms = number("slo_ms", slo_ms, 0.0, None, lo_open=True)
    load = number("load", load, 0.0, None, lo_open=True)
    statistic = _statistic(statistic)
    if levels_pct is None:
        levels: tuple[float, ...] = tuple(np.arange(1.0, 101.0))
    else:
        levels = tuple(sorted({float(v) for v in levels_pct}))
        if not levels or not all(math.isfinite(v) and 0.0 < v <= 100.0 for v in levels):
            raise ValueError(f"levels_pct must be MPS levels in (0, 100], got {levels_pct!r}")
    key = (round(float(load), 3), float(slo_ms), statistic, levels)
    cache = _ORACLE_CACHE.setdefault(plant, {})
    if key not in cache:
        cache[key] = float(level_rates(plant, slo_ms, key[0], statistic, levels).max())
    return cache[key]


def level_rates(plant: Any, slo_ms: float, load: float, statistic: str,
                levels: tuple[float, ...]) -> np.ndarray:
    """Per share level, the best training rate (iterations/s) on the oracle's sleep grid
    (0..1 s, 201 points) whose noise-free ``statistic`` latency at ``load`` meets ``slo_ms``;
    0 where no sleep does. :func:`oracle_rate` is their maximum."""
    S, M = np.meshgrid(np.linspace(0.0, 1.0, 201), np.array(levels, float))
    lat = np.asarray(plant.expected_latency_ms(S, M, load, statistic))
    tp = np.asarray(plant.expected_training_throughput(S, M, load))
    return np.where(lat <= slo_ms, tp, -np.inf).max(axis=1).clip(min=0.0)


def white_noise_record(plant: Any, periods: int = 60, *, seed: int = 0, mps_pct: float = 100.0,
                       sleep_bounds_s: tuple[float, float] = (0.0, 1.0),
                       statistic: str = "mean") -> tuple[np.ndarray, np.ndarray]:
    """What a user records to identify the sleep model: ``periods`` periods of white-noise
    sleep within ``sleep_bounds_s`` at a fixed MPS (one warm-up period first).

    Parameters
    ----------
    plant : Plant
        The plant (stepped in place).
    periods : int
        Periods recorded.
    seed : int
        Seed of the excitation.
    mps_pct : float
        Training MPS held.
    sleep_bounds_s : (float, float)
        Excitation range.
    statistic : {"mean", "p99"}
        Which reading is recorded.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Sleep applied and latency measured, periods with no reading dropped. A
        :class:`DelayedPlant` is identified through its inner plant: the reporting delay is in
        the runtime path, not in the identification log.
    """
    from gpucontrol import Actuation
    from harness.sim.zoo import DelayedPlant

    periods = integer("periods", periods, 1)
    seed = integer("seed", seed, 0)
    statistic = _statistic(statistic)
    lo, hi = (numbers_in("sleep_bounds_s", sleep_bounds_s, 0.0, None).tolist()
              if np.shape(sleep_bounds_s) == (2,) else (-1.0, -1.0))
    if not 0.0 <= lo <= hi:
        raise ValueError(f"sleep_bounds_s must be (low, high) sleeps in s, 0 <= low <= high, "
                         f"got {sleep_bounds_s!r}")
    if isinstance(plant, DelayedPlant):
        plant = plant.inner      # the delay is in the runtime reporting path, not the log
    rng = np.random.default_rng(seed + 7919)
    u = rng.uniform(lo, hi, periods)
    plant.step(Actuation(float(u[0]), mps_pct), 4.0)
    y = np.empty(periods)
    for k in range(periods):
        r = plant.step(Actuation(float(u[k]), mps_pct), 4.0)
        y[k] = r.mean_ms if statistic == "mean" else r.p99_ms
    ok = np.isfinite(y)
    return u[ok], y[ok]
