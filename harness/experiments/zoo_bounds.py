"""Reference bounds for the zoo's closed loops when every share change pays a restart.

:func:`harness.experiments.zoo_control.run` measures training against the *per-period oracle*
(:func:`harness.sim.zoo.oracle_rate`): the best rate on a sleep x share grid meeting the SLO
at each period's load, the share resized for free every period. With MPS restarts (each change
stops the training for the plant's ``restart_s``) no policy reaches that oracle, so a figure
against it needs references that pay the same restarts:

* :func:`hindsight` -- the best share path for the whole trace, known in advance, paying every
  restart (dynamic programming over share levels x periods): what a policy that knows the
  day's load could reach;
* :func:`causal` -- a rent-or-buy policy that knows the plant and reads each period's load
  exactly, but not the future: what knowing the plant, without forecasting, reaches;
* :func:`forecast` -- the same knowledge and a forecast: the load's linear trend over the last
  periods, carried over a horizon; the policy moves when the horizon's forecast training at
  another share, less the restart, beats staying. What a trend forecast adds to knowing the
  plant (on the zoo's trace, one hump a day: it sees the rise and the fall, not the turn).
* :func:`lookahead` -- the same knowledge and the next ``horizon`` periods' load known
  exactly: each period it plans the best share path over that horizon (the hindsight
  recursion, from the share it holds) and takes the plan's first step. From no foresight to
  the whole day, it measures how far ahead a policy must know the load to reach a figure.

Both are figures on the plant's noise-free expectations (``expected_latency_ms`` and
``expected_training_throughput``), the same ones the oracle uses; the SLO is
:func:`harness.sim.zoo.slo_ms` (x1.15 in p99 mode, as ``zoo_control.run`` sets it).
``benchmarks/control_quality.py`` prints them beside the training-vs-oracle row.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.sim import zoo
from harness.sim.zoo_load import level_rates

__all__ = ["SHARES", "T", "causal", "causal_path", "forecast", "forecast_path", "hindsight",
           "hindsight_path_value", "lookahead", "lookahead_path", "rate_table"]

#: The share levels (%) of the references: every whole percent from 20 to 100.
SHARES = tuple(float(m) for m in range(20, 101))
#: The control period (s), as in :mod:`harness.experiments.zoo_control`.
T = 4.0
_MODES = ("mean", "p99")


@functools.cache
def _plant(name: str, seed: int) -> tuple[Any, Any, float]:
    """The zoo plant ``name`` of seed ``seed`` unwrapped to its physics, with its SLO.

    Cached: the same object for every call, so :func:`harness.sim.zoo.oracle_rate`'s cache
    (keyed on the plant's ``id``) is hit, and no other plant can take over a freed ``id``.
    """
    plant = zoo.make_plant(name, seed=seed)
    base = plant
    while isinstance(base, (zoo.DelayedPlant, zoo.GlitchPlant, zoo.NoIterationPlant)):
        base = base.inner
    return plant, base, float(zoo.slo_ms(name, plant))


@functools.lru_cache(maxsize=1 << 16)
def _row(name: str, seed: int, mode: str, load: float, shares: tuple[float, ...]
         ) -> np.ndarray:
    """The static best rate (iterations/s) at each share of ``shares`` at ``load``: the
    sleep grid's best training meeting the SLO, 0 where no sleep meets it -- what
    ``oracle_rate(levels_pct=(m,))`` gives for each ``m``, over all shares at once
    (:func:`harness.sim.zoo_load.level_rates`, the oracle's own grid)."""
    _, base, slo = _plant(name, seed)
    slo *= 1.15 if mode == "p99" else 1.0
    out = level_rates(base, slo, load, mode, shares)
    out.flags.writeable = False
    return out


def _check(name: str, seed: int, loads: Any, mode: str, levels: Any
           ) -> tuple[np.ndarray, tuple[float, ...]]:
    """The loads and share levels, validated (``ValueError`` naming the field)."""
    if name not in zoo.PLANTS:
        raise ValueError(f"name must be one of {', '.join(zoo.PLANTS)}, got {name!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if mode not in _MODES:
        raise ValueError(f"mode must be 'mean' or 'p99', got {mode!r}")
    q = np.asarray(loads, dtype=float)
    if q.ndim != 1 or q.size == 0 or not np.all(np.isfinite(q)) or np.any(q <= 0):
        raise ValueError("loads must be a non-empty 1-D sequence of finite load factors > 0, "
                         f"got shape {q.shape}")
    raw = SHARES if levels is None else tuple(levels)
    shares = tuple(sorted({float(v) for v in raw}))
    if not shares or not all(math.isfinite(v) and 0.0 < v <= 100.0 for v in shares):
        raise ValueError(f"levels must be share levels (%) in (0, 100], got {levels!r}")
    return q, shares


def rate_table(name: str, seed: int, loads: Any, *, mode: str = "mean", levels: Any = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The static best rate per period and share, and the per-period oracle.

    ``R[k, i]`` is ``zoo.oracle_rate(base, slo, loads[k], mode, levels_pct=(shares[i],))``:
    the best training rate at share ``shares[i]`` whose noise-free latency at load
    ``loads[k]`` meets the SLO (0 if no sleep does), computed over all shares at once on the
    oracle's grid (load rounded to 3 decimals, as the oracle does). ``oracle[k]`` is the
    per-period oracle itself (every whole percent 1..100), the denominator of
    ``zoo_control.run``'s ``efficiency``.

    Parameters
    ----------
    name : str
        A :data:`harness.sim.zoo.PLANTS` name.
    seed : int
        The plant's seed (a drawn plant's physics).
    loads : array_like
        The load factor of each period (1-D, finite, > 0).
    mode : {"mean", "p99"}
        The statistic the SLO bounds (p99: the SLO is 1.15x the plant's mean SLO).
    levels : sequence of float, optional
        The share levels (%), each in (0, 100]; default :data:`SHARES`.

    Returns
    -------
    shares : numpy.ndarray
        The share levels (%), ascending.
    R : numpy.ndarray
        Shape ``(len(loads), len(shares))``, iterations/s.
    oracle : numpy.ndarray
        Shape ``(len(loads),)``, iterations/s.

    Raises
    ------
    ValueError
        On an unknown plant or mode, a negative seed, empty or non-finite loads, or share
        levels outside (0, 100].
    """
    q, shares = _check(name, seed, loads, mode, levels)
    _, base, slo = _plant(name, int(seed))
    slo *= 1.15 if mode == "p99" else 1.0
    rounded = [round(float(v), 3) for v in q]
    R = np.array([_row(name, int(seed), mode, v, shares) for v in rounded])
    oracle = np.array([zoo.oracle_rate(base, slo, v, mode) for v in rounded])
    return np.array(shares), R, oracle


def _restart(name: str, seed: int, restart_s: float | None) -> float:
    """The restart length (s): the plant's own, or the override (finite, >= 0)."""
    if restart_s is None:
        return float(_plant(name, int(seed))[1].restart_s)
    r = float(restart_s)
    if not (math.isfinite(r) and r >= 0.0):
        raise ValueError(f"restart_s must be a finite number of seconds >= 0, got {restart_s!r}")
    return r


def _period(period_s: float) -> float:
    p = float(period_s)
    if not (math.isfinite(p) and p > 0.0):
        raise ValueError(f"period_s must be a finite number of seconds > 0, got {period_s!r}")
    return p


def _count(field: str, value: Any, lo: int) -> int:
    """An integer setting of at least ``lo`` (``ValueError`` naming ``field`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{field} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _earn(rate: float, down: float, period_s: float) -> tuple[float, float]:
    """One period's training at ``rate`` with ``down`` seconds of a restart still to sit out,
    and the downtime left after it (carried across periods)."""
    lost = min(down, period_s)
    return float(rate) * (period_s - lost), down - lost


def _drive(R: np.ndarray, shares: np.ndarray, restart_s: float, period_s: float, start: float,
           min_hold: int, choose: Callable[[int, int], int]) -> tuple[float, int]:
    """A causal share policy's training over the table ``R`` and its number of moves: from
    share ``start``, each period earns its rate at the share held (less what a restart still
    takes, :func:`_earn`); once the share has been held ``min_hold`` periods,
    ``choose(k, i)`` names the share to hold after period ``k``. A move stops the training
    for ``restart_s`` from the next period on, carried across periods."""
    i, held, down, moves, total = _start_index(shares, start), 0, 0.0, 0, 0.0
    for k, r in enumerate(R):
        earned, down = _earn(r[i], down, period_s)
        total += earned
        held += 1
        if held < min_hold:
            continue
        j = choose(k, i)
        if j != i:
            i, held, down, moves = j, 0, restart_s, moves + 1
    return total, moves


def _evaluate(name: str, seed: int, loads: Any, mode: str, levels: Any,
              restart_s: float | None, period_s: float,
              path: Callable[..., tuple[float, int]]) -> tuple[float, int]:
    """``path(R, shares, C, T)`` on the plant's rate table: its training over the per-period
    oracle's, and its moves."""
    shares, R, oracle = rate_table(name, seed, loads, mode=mode, levels=levels)
    C, P = _restart(name, seed, restart_s), _period(period_s)
    total, moves = path(R, shares, C, P)
    return _ratio(total, oracle, P), moves


def _ratio(total: float, oracle: np.ndarray, period_s: float) -> float:
    denom = float(oracle.sum()) * period_s
    if denom <= 0.0:
        raise ValueError("loads: no operating point meets the SLO at any period of this trace "
                         "(the per-period oracle trains nothing)")
    return total / denom


def hindsight_path_value(R: np.ndarray, restart_s: float, period_s: float = T) -> float:
    """The best total training (iterations) of a share path over the table ``R``.

    The recursion over periods ``k`` and shares ``m``: ``V_0(m) = R[0, m] T`` (free start,
    no restart), ``V_k(m) = max(V_{k-1}(m) + R[k, m] T, max_j V_{k-1}(j) + R[k, m] (T - C))``
    -- staying earns the period, switching in loses ``C`` seconds of it. Switching into the
    share held is dominated by staying (``C >= 0``), so the inner max may run over every
    ``j``. With ``C > T`` a switch's period earns less than nothing: the downtime that spans
    into later periods, charged at the switch period's rate -- an approximation, close where
    the rate changes little from one period to the next (the zoo's loads), loose where it
    jumps (a switch into a share that trains nothing in its period pays nothing).

    Parameters
    ----------
    R : numpy.ndarray
        Rates (iterations/s), shape ``(periods, shares)``.
    restart_s : float
        ``C``, the training lost per change (s).
    period_s : float
        ``T``, the period (s).

    Returns
    -------
    float
        ``max_m V_{n-1}(m)``.
    """
    V = R[0] * period_s
    for k in range(1, R.shape[0]):
        V = np.maximum(V + R[k] * period_s, V.max() + R[k] * (period_s - restart_s))
    return float(V.max())


def hindsight(name: str, seed: int, loads: Any, *, mode: str = "mean", levels: Any = None,
              restart_s: float | None = None, period_s: float = T) -> float:
    """The hindsight bound: the best share path for the whole trace, paying every restart.

    A policy that knows the day's load in advance and the plant exactly, and sets the best
    sleep every period for free, chooses its share path by dynamic programming over the
    share levels and the periods (:func:`hindsight_path_value`): holding share ``m`` through
    period ``k`` earns ``r_k(m) T``, switching into it earns ``r_k(m) (T - restart_s)``,
    where ``r_k(m)`` is the static best rate at share ``m`` and load ``q_k``
    (:func:`rate_table`); the first period's share is free. No causal policy paying the same
    restarts trains more (up to the approximation of a restart longer than a period, charged
    in full to the switch's period), so the gap between it and the per-period oracle is the
    price of the restarts themselves, not of the controller.

    Parameters
    ----------
    name : str
        A :data:`harness.sim.zoo.PLANTS` name.
    seed : int
        The plant's seed.
    loads : array_like
        The load factor of each period.
    mode : {"mean", "p99"}
        The statistic the SLO bounds.
    levels : sequence of float, optional
        The share levels (%); default :data:`SHARES` (every whole percent 20..100).
    restart_s : float, optional
        The training lost per share change (s, >= 0); default the plant's own.
    period_s : float
        The control period (s).

    Returns
    -------
    float
        The path's training over the per-period oracle's (1 at most where the oracle's
        best share is among ``levels``).

    Raises
    ------
    ValueError
        On bad input (:func:`rate_table`), a negative ``restart_s`` or ``period_s <= 0``,
        or a trace on which no operating point meets the SLO.
    """
    _, R, oracle = rate_table(name, seed, loads, mode=mode, levels=levels)
    C, P = _restart(name, seed, restart_s), _period(period_s)
    return _ratio(hindsight_path_value(R, C, P), oracle, P)


def _gain(r: np.ndarray, i: int) -> tuple[int, float]:
    """The best share's index for the rates ``r`` and its relative gain over share ``i``."""
    j = int(np.argmax(r))
    if r[i] > 0.0:
        return j, float(r[j] / r[i] - 1.0)
    return j, math.inf if r[j] > 0.0 else 0.0


def causal_path(R: np.ndarray, shares: np.ndarray, restart_s: float, period_s: float = T, *,
                start: float = 100.0, min_hold: int = 8) -> tuple[float, int]:
    """The rent-or-buy rule's training over the table ``R``, and its number of moves.

    From share ``start``, after each period ``k`` the rule reads that period's load (its row
    of ``R``); once it has held its share ``i`` for ``min_hold`` periods it takes the best
    share ``j = argmax R[k]`` and the gain ``g = R[k, j] / R[k, i] - 1``. While ``g > 0``
    the regret accumulates ``g T`` (what staying cost, in seconds of training at the current
    rate); it resets to 0 when ``g <= 0``; when it exceeds ``restart_s`` the rule moves to
    ``j`` -- the break-even rule of ski rental (rent until the rent paid equals the price of
    buying): without a forecast, a move pays off only if the gap persists, and the regret is
    what the gap has already cost while it persisted. A move stops the
    training for ``restart_s`` from the next period on, carried across periods (a period with
    ``d`` seconds of downtime left trains ``R[k, i] (T - min(d, T))``).

    Parameters
    ----------
    R : numpy.ndarray
        Rates (iterations/s), shape ``(periods, shares)``.
    shares : numpy.ndarray
        The share of each column (%).
    restart_s : float
        The training lost per move (s).
    period_s : float
        The period (s).
    start : float
        The share held at the start (%), one of ``shares``.
    min_hold : int
        Periods a share is held before the rule looks again.

    Returns
    -------
    training : float
        Iterations over the trace.
    moves : int
        Share changes.
    """
    regret = 0.0

    def choose(k: int, i: int) -> int:
        nonlocal regret
        j, g = _gain(R[k], i)
        regret = regret + g * period_s if g > 0.0 else 0.0
        if regret > restart_s:
            regret = 0.0
            return j
        return i

    return _drive(R, shares, restart_s, period_s, start, min_hold, choose)


def causal(name: str, seed: int, loads: Any, *, mode: str = "mean", levels: Any = None,
           restart_s: float | None = None, period_s: float = T, start: float = 100.0,
           min_hold: int = 8) -> tuple[float, int]:
    """The causal plant-knowing reference: a rent-or-buy share policy (:func:`causal_path`).

    It knows the plant exactly (the static best rate of every share at every load,
    :func:`rate_table`) and reads each period's load exactly at the period's end, but not
    the future; it sets the best sleep every period for free and moves the share by the
    rent-or-buy rule, paying each restart. What a controller with a perfect model and no
    forecast reaches; a controller that identifies its model from noisy readings and does not
    know the restart's length has no claim to reach it, nor is it barred from passing it (a
    forecast of the load's swing would).

    Parameters
    ----------
    name : str
        A :data:`harness.sim.zoo.PLANTS` name.
    seed : int
        The plant's seed.
    loads : array_like
        The load factor of each period.
    mode : {"mean", "p99"}
        The statistic the SLO bounds.
    levels : sequence of float, optional
        The share levels (%); default :data:`SHARES`.
    restart_s : float, optional
        The training lost per share change (s, >= 0); default the plant's own.
    period_s : float
        The control period (s).
    start : float
        The share held at the start (%), one of ``levels``.
    min_hold : int
        Periods a share is held before the rule looks again (>= 1).

    Returns
    -------
    efficiency : float
        Training over the per-period oracle's.
    moves : int
        Share changes over the trace.

    Raises
    ------
    ValueError
        On bad input (:func:`rate_table`), a negative ``restart_s``, ``period_s <= 0``,
        ``min_hold < 1``, a ``start`` not among the levels, or a trace on which no operating
        point meets the SLO.
    """
    hold = _count("min_hold", min_hold, 1)
    return _evaluate(name, seed, loads, mode, levels, restart_s, period_s,
                     lambda *a: causal_path(*a, start=start, min_hold=hold))


def _start_index(shares: np.ndarray, start: float) -> int:
    at = np.flatnonzero(np.asarray(shares) == float(start))
    if at.size == 0:
        raise ValueError(f"start must be one of the share levels, got {start!r}")
    return int(at[0])


def forecast_path(R: np.ndarray, loads: np.ndarray, shares: np.ndarray,
                  rates_at: Callable[[np.ndarray], np.ndarray], restart_s: float,
                  period_s: float = T, *, horizon: int = 25, window: int = 20,
                  start: float = 100.0, min_hold: int = 8) -> tuple[float, int]:
    """A trend-forecasting share policy's training over ``loads``, and its number of moves.

    From share ``start``, after each period ``k`` the policy reads that period's load. Once it
    has held its share for ``min_hold`` periods it fits a line to the last ``window`` loads
    (flat with fewer than 3) and carries it ``horizon`` periods ahead: ``q(k + h)``,
    ``h = 1..horizon``. It weighs each share ``m`` by the training the forecast promises there,
    ``V(m) = T sum_h r(q(k + h), m)``, less the restart where ``m`` is not the share held
    (``restart_s r(q(k + 1), m)``, as :func:`hindsight_path_value` charges it), and moves to the
    best when that beats staying. A move stops the training for ``restart_s`` from the next
    period on, as in :func:`causal_path`.

    Parameters
    ----------
    R, shares, restart_s, period_s, start, min_hold
        As :func:`causal_path` (``R``: the rates the policy trains at).
    loads : numpy.ndarray
        The load factor of each period (what the policy reads and forecasts).
    rates_at : callable
        ``rates_at(q)`` for a 1-D array of loads: the rates (iterations/s), shape
        ``(len(q), len(shares))``; :func:`forecast` interpolates :func:`rate_table`'s.
    horizon : int
        Periods the forecast looks ahead (>= 1).
    window : int
        Periods of loads the trend is fitted to (>= 2).

    Returns
    -------
    (float, int)
        As :func:`causal_path`: iterations over the trace, and share changes.
    """
    if len(loads) != len(R):
        raise ValueError(f"loads: one per row of R ({len(R)}), got {len(loads)}")
    ahead = np.arange(1, horizon + 1, dtype=float)

    def choose(k: int, i: int) -> int:
        past = np.asarray(loads[max(0, k - window + 1):k + 1], dtype=float)
        slope = np.polyfit(np.arange(past.size), past, 1)[0] if past.size >= 3 else 0.0
        Rf = rates_at(loads[k] + slope * ahead)
        value = Rf.sum(axis=0) * period_s - restart_s * Rf[0]
        value[i] += restart_s * Rf[0, i]
        j = int(np.argmax(value))
        return j if value[j] > value[i] else i

    return _drive(R, shares, restart_s, period_s, start, min_hold, choose)


def forecast(name: str, seed: int, loads: Any, *, mode: str = "mean", levels: Any = None,
             restart_s: float | None = None, period_s: float = T, horizon: int = 25,
             window: int = 20, start: float = 100.0, min_hold: int = 8) -> tuple[float, int]:
    """The plant-knowing reference with a load forecast (:func:`forecast_path`).

    It knows what :func:`causal` knows (the plant exactly, each period's load at the period's
    end, the restart's length) and forecasts the load by its recent linear trend. The rates
    at a forecast load are interpolated in a :func:`rate_table` over a grid of 121 loads from
    0.8x the trace's lowest to 1.2x its highest (a forecast beyond is held at the grid's end).

    Parameters
    ----------
    name, seed, loads, mode, levels, restart_s, period_s, start, min_hold
        As :func:`causal`.
    horizon : int
        Periods the forecast looks ahead (>= 1).
    window : int
        Periods of loads the trend is fitted to (>= 2).

    Returns
    -------
    (float, int)
        As :func:`causal`: training over the per-period oracle's, and share changes.

    Raises
    ------
    ValueError
        As :func:`causal`, and on a ``horizon`` under 1 or a ``window`` under 2.
    """
    counts = {"min_hold": _count("min_hold", min_hold, 1),
              "horizon": _count("horizon", horizon, 1), "window": _count("window", window, 2)}
    q, _ = _check(name, seed, loads, mode, levels)
    grid = np.round(np.linspace(0.8 * q.min(), 1.2 * q.max(), 121), 3)
    _, G, _ = rate_table(name, seed, grid, mode=mode, levels=levels)

    def rates_at(x: np.ndarray) -> np.ndarray:
        x = np.clip(x, grid[0], grid[-1])
        hi = np.clip(np.searchsorted(grid, x), 1, grid.size - 1)
        w = ((x - grid[hi - 1]) / (grid[hi] - grid[hi - 1]))[:, None]
        return (1.0 - w) * G[hi - 1] + w * G[hi]

    return _evaluate(name, seed, loads, mode, levels, restart_s, period_s,
                     lambda R, shares, C, P: forecast_path(R, q, shares, rates_at, C, P,
                                                           start=start, **counts))


def _first_step(F: np.ndarray, i: int, restart_s: float, period_s: float) -> int:
    """The share the best path over the rates ``F`` (periods x shares) takes first, from share
    ``i``: :func:`hindsight_path_value`'s recursion with the start held at ``i`` (switching
    into another share in the first period pays the restart), each state carrying the first
    step of the best path into it."""
    V = F[0] * (period_s - restart_s)
    V[i] = F[0, i] * period_s
    first = np.arange(F.shape[1])
    for r in F[1:]:
        best = int(np.argmax(V))
        stay = V + r * period_s
        switch = V[best] + r * (period_s - restart_s)
        take = switch > stay
        first = np.where(take, first[best], first)
        V = np.where(take, switch, stay)
    return int(first[int(np.argmax(V))])


def lookahead_path(R: np.ndarray, shares: np.ndarray, restart_s: float, period_s: float = T,
                   *, horizon: int = 25, start: float = 100.0, min_hold: int = 8
                   ) -> tuple[float, int]:
    """A receding-horizon share policy that knows the next ``horizon`` periods' rates exactly:
    its training over the table ``R``, and its number of moves.

    From share ``start``, after each period ``k``, once it has held its share for ``min_hold``
    periods, it plans the best path over periods ``k + 1 .. k + horizon`` from the share it
    holds (:func:`hindsight_path_value`'s recursion, each restart charged to its period) and
    moves when the plan's first step is another share. A move stops the training for
    ``restart_s`` from the next period on, as in :func:`causal_path`. With a horizon as long
    as the trace it is the hindsight path taken one period at a time (held ``min_hold``
    periods per share); with a short one, what exact foresight of that length is worth.

    Parameters
    ----------
    R, shares, restart_s, period_s, start, min_hold
        As :func:`causal_path`.
    horizon : int
        Periods the policy knows ahead (>= 1).

    Returns
    -------
    (float, int)
        As :func:`causal_path`: iterations over the trace, and share changes.
    """
    def choose(k: int, i: int) -> int:
        if k + 1 >= R.shape[0]:
            return i
        return _first_step(R[k + 1:k + 1 + horizon], i, restart_s, period_s)

    return _drive(R, shares, restart_s, period_s, start, min_hold, choose)


def lookahead(name: str, seed: int, loads: Any, *, horizon: int = 25, mode: str = "mean",
              levels: Any = None, restart_s: float | None = None, period_s: float = T,
              start: float = 100.0, min_hold: int = 8) -> tuple[float, int]:
    """The plant-knowing reference with exact foresight (:func:`lookahead_path`).

    It knows what :func:`causal` knows and, in addition, the load of the next ``horizon``
    periods exactly. No forecast is better than exact foresight of the same length, so the
    horizon at which it reaches a figure is a lower bound on how far ahead a policy paying the
    same restarts must know the load to reach it (up to the recursion's charge of a restart
    longer than a period, and the ``min_hold`` periods it holds each share, as the causal
    reference does).

    Parameters
    ----------
    name, seed, loads, mode, levels, restart_s, period_s, start, min_hold
        As :func:`causal`.
    horizon : int
        Periods of load known ahead (>= 1).

    Returns
    -------
    (float, int)
        As :func:`causal`: training over the per-period oracle's, and share changes.

    Raises
    ------
    ValueError
        As :func:`causal`, and on a ``horizon`` under 1.
    """
    h, hold = _count("horizon", horizon, 1), _count("min_hold", min_hold, 1)
    return _evaluate(name, seed, loads, mode, levels, restart_s, period_s,
                     lambda *a: lookahead_path(*a, horizon=h, start=start, min_hold=hold))
