"""A zoo of co-location plants with physics other than :mod:`harness.sim.simulated`.

The controller must hold its SLO on plants it was not built on. Every plant here implements the
:class:`~harness.sim.protocol.Plant` protocol (``step``/``set_load``), so :func:`~harness.sim.
protocol.run_loop` drives it, and offers noise-free views (``expected_latency_ms``,
``expected_training_throughput``) from which :func:`oracle_rate` computes the per-period static
oracle (the best training rate whose expected latency meets the SLO, resizes free).

Plants (:func:`make_plant` builds each by name):

* ``"ours"`` — :class:`~harness.sim.simulated.SimulatedColocation` (Fig 8 preset; ``"h100"``:
  the H100 preset); the load factor scales the inference batch (105 images at factor 1).
* ``"hyperbolic"`` — :class:`HyperbolicPlant`: mean latency linear in the training's duty
  cycle ``d = t/(t + s)`` (hyperbolic in the sleep ``s``), training share set by *relative* MPS
  caps ``a = m/(m + w)``, interference ``kappa a**gamma``; per-period log-normal noise.
* ``"mixture"`` — :class:`BatchMixturePlant`: short inference batches (a few ms), a fraction
  ``d`` of them run beside training on a measured-style latency-vs-GPU% curve ``l(c) = a + b/c``
  and the rest alone. The period's p99 is the latency of the batches that ran beside
  training, whatever the duty — the sleep barely moves it, MPS does.
* ``"delayed"`` — :class:`DelayedPlant` around ``"hyperbolic"``: every latency field reports the
  previous period (a one-period reporting delay the controller is not told about).
* ``"queue"`` — :class:`QueuePlant`: the training and the inference queue on a shared resource;
  latency ``idle / (1 - u f)`` with ``f`` the training's footprint (MPS share times duty),
  convex: near sleep 0 the slope is several times the white-noise secant.
* ``"random"`` — :class:`~harness.sim.zoo_draw.DrawnPlant`: physics drawn per seed (iteration
  times 0.1-2 s, training speed ``share**0.3..share**1.5``, an interference ``x0.3..x3`` the
  identified one, an undisclosed one-period delay in one draw of two), with its own SLO.

Wrappers: :class:`DelayedPlant` (any plant), :class:`GlitchPlant` (replace chosen periods'
readings, e.g. one 1e12 ms value), :class:`NoIterationPlant` (no iteration time reported).
Every plant reports the training's iteration time (``PeriodResult.iteration_s``) the way a
node measures it.

Load: no per-second QPS trace is vendored in ``harness/data`` (its files are the Alibaba
cluster trace), so :func:`load_trace` makes a synthetic production-like load (slow diurnal-style
swing, AR(1) jitter, optional steps); :func:`load_scenario` turns it into a
:class:`~harness.sim.protocol.Scenario` of ``set_load(load=...)`` events.

>>> plant = make_plant("hyperbolic", seed=0)
>>> from gpucontrol import Actuation
>>> r = plant.step(Actuation(sleep_s=0.0, mps_pct=100.0), 4.0)
>>> r.count > 0 and r.mean_ms > 0 and r.iteration_s > 0
True
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from harness.checks import integer, number
from harness.sim.protocol import PeriodResult, actuation_knobs
from harness.sim.simulated import SimulatedColocation
from harness.sim.zoo_load import load_scenario, load_trace, oracle_rate, white_noise_record

__all__ = ["PLANTS", "SLO_MS", "BatchMixturePlant", "DelayedPlant", "GlitchPlant",
           "HyperbolicPlant", "NoIterationPlant", "QueuePlant", "load_scenario", "load_trace",
           "make_plant", "oracle_rate", "slo_ms", "white_noise_record"]


def _knobs(act: Any) -> tuple[float, float]:
    """The actuation's sleep and training MPS, checked (:func:`actuation_knobs`)."""
    s, m, _ = actuation_knobs(act)
    return s, m


class _AnalyticPlant:
    """Shared machinery: knobs, restart downtime, load factor, throughput accounting."""

    name = "analytic"

    def __init__(self, *, seed: int = 0, restart_s: float = 10.0, load: float = 1.0) -> None:
        self.seed = integer("seed", seed, 0)
        self.rng = np.random.default_rng(self.seed)
        self.restart_s = number("restart_s", restart_s, 0.0, 3600.0)
        self.load = float(load)
        self.sleep_s = 0.0
        self.mps_pct: float | None = None
        self._restart_left = 0.0
        self.t = 0.0

    # subclasses provide these (vectorised over s, m)
    def iteration_s(self, m: Any) -> np.ndarray:
        raise NotImplementedError

    def _period(self, s: float, m: float, busy_frac: float, T: float
                ) -> tuple[float, float, int]:
        raise NotImplementedError

    def set_load(self, **changes: Any) -> None:
        """Change the inference load factor (``load=1.2``: 20 % more traffic)."""
        bad = set(changes) - {"load"}
        if bad:
            raise ValueError(f"set_load accepts load; got {', '.join(sorted(bad))}")
        q = float(changes["load"])
        if not (math.isfinite(q) and 0.05 <= q <= 20):
            raise ValueError(f"load must be in [0.05, 20], got {changes['load']!r}")
        self.load = q

    def expected_duty(self, s: Any, m: Any) -> np.ndarray:
        t = self.iteration_s(m)
        return t / (t + np.asarray(s, float))

    def expected_training_throughput(self, s: Any, m: Any, load: float | None = None
                                     ) -> np.ndarray:
        """Training iterations per second at a static point (no restarts)."""
        return 1.0 / (self.iteration_s(m) + np.asarray(s, float))

    def step(self, actuation: Any, period_s: float) -> PeriodResult:
        """Apply the actuation, run ``period_s`` seconds, report the period."""
        T = float(period_s)
        s, m = _knobs(actuation)
        if self.mps_pct is None:
            self.mps_pct = m
        elif m != self.mps_pct:
            self.mps_pct = m
            self._restart_left = self.restart_s
        self.sleep_s = s
        down = min(self._restart_left, T)
        restarting = self._restart_left > 0
        self._restart_left -= down
        up = (T - down) / T
        duty = float(self.expected_duty(s, m)) * up
        t_it = float(self.iteration_s(m)) * float(self.rng.lognormal(0.0, 0.03))
        iters = (T - down) / (t_it + s)
        mean, p99, n = self._period(s, m, duty, T)
        self.t += T
        return PeriodResult(mean_ms=mean, p99_ms=p99, count=n, t_end_s=self.t, period_s=T,
                            inference_batches=n, inference_images=n, training_iterations=iters,
                            training_sm_share=duty, restarting=restarting, sleep_s=s,
                            mps_pct=m, inference_mps_pct=100.0, batch=1, iteration_s=t_it)


class _MeanLawPlant(_AnalyticPlant):
    """A plant whose mean latency is a law of the MPS level, the training's running fraction
    and the load (:meth:`mean_law`), with per-period log-normal noise ``noise`` and a p99 of
    ``p99_factor`` times the mean."""

    p99_factor = 1.12
    noise = 0.01

    def mean_law(self, m: Any, duty: Any, load: float) -> np.ndarray:
        raise NotImplementedError

    def expected_latency_ms(self, s: Any, m: Any, load: float | None = None,
                            statistic: str = "mean") -> np.ndarray:
        q = self.load if load is None else load
        mean = self.mean_law(m, self.expected_duty(s, m), q)
        return mean * (self.p99_factor if statistic == "p99" else 1.0)

    def _period(self, s: float, m: float, busy_frac: float, T: float
                ) -> tuple[float, float, int]:
        mean = float(self.mean_law(m, busy_frac, self.load))
        mean *= float(self.rng.lognormal(0.0, self.noise))
        p99 = mean * self.p99_factor * float(self.rng.lognormal(0.0, 2 * self.noise))
        return mean, p99, max(1, int(T * 1000.0 / mean))


class HyperbolicPlant(_MeanLawPlant):
    """Duty-cycle law with relative MPS caps (see the module docstring).

    Parameters
    ----------
    seed : int
        Random seed.
    idle_ms : float
        Inference latency alone at load factor 1 (ms).
    kappa, gamma : float
        Interference ``kappa * a**gamma`` while training computes with share ``a``.
    weight : float
        Relative cap weight of the inference: ``a = (m/100) / (m/100 + weight)``.
    work_s : float
        Training work per iteration on the whole GPU (s); iteration ``t = work_s / a``.
    noise : float
        Per-period log-normal noise of the mean (relative).
    restart_s : float
        Training restart downtime after an MPS change (s).
    """

    name = "hyperbolic"

    def __init__(self, *, seed: int = 0, idle_ms: float = 48.0, kappa: float = 1.9,
                 gamma: float = 1.4, weight: float = 0.6, work_s: float = 0.12,
                 noise: float = 0.012, restart_s: float = 10.0) -> None:
        super().__init__(seed=seed, restart_s=restart_s)
        self.idle_ms, self.kappa, self.gamma = idle_ms, kappa, gamma
        self.weight, self.work_s, self.noise = weight, work_s, noise

    def share(self, m: Any) -> np.ndarray:
        c = np.asarray(m, float) / 100.0
        return c / (c + self.weight)

    def iteration_s(self, m: Any) -> np.ndarray:
        return self.work_s / self.share(m)

    def mean_law(self, m: Any, duty: Any, load: float) -> np.ndarray:
        return self.idle_ms * load * (1.0 + self.kappa * self.share(m) ** self.gamma * duty)


class BatchMixturePlant(_AnalyticPlant):
    """Short batches, some beside training, on a latency-vs-GPU% curve ``a + b/c``.

    Parameters
    ----------
    seed : int
        Random seed.
    fixed_ms, per_share_ms : float
        The inference's latency with a GPU share ``c``: ``fixed_ms + per_share_ms / c``
        (at load factor 1).
    cap : float
        SM fraction the training holds at MPS 100 % while it computes (``a = cap * m/100``).
    work_s, rate_exponent : float
        Iteration time ``work_s / (m/100)**rate_exponent`` (s).
    sigma : float
        Per-batch log-normal latency noise.
    restart_s : float
        Training restart downtime after an MPS change (s).
    """

    name = "mixture"

    def __init__(self, *, seed: int = 0, fixed_ms: float = 2.2, per_share_ms: float = 2.6,
                 cap: float = 0.8, work_s: float = 0.25, rate_exponent: float = 0.6,
                 sigma: float = 0.06, restart_s: float = 10.0) -> None:
        super().__init__(seed=seed, restart_s=restart_s)
        self.fixed_ms, self.per_share_ms, self.cap = fixed_ms, per_share_ms, cap
        self.work_s, self.rate_exponent, self.sigma = work_s, rate_exponent, sigma

    def iteration_s(self, m: Any) -> np.ndarray:
        return self.work_s / (np.asarray(m, float) / 100.0) ** self.rate_exponent

    def busy_ms(self, m: Any, load: float | None = None) -> np.ndarray:
        q = self.load if load is None else load
        c = 1.0 - self.cap * np.asarray(m, float) / 100.0
        return q * (self.fixed_ms + self.per_share_ms / c)

    def idle_ms(self, load: float | None = None) -> float:
        q = self.load if load is None else load
        return q * (self.fixed_ms + self.per_share_ms)

    def expected_latency_ms(self, s: Any, m: Any, load: float | None = None,
                            statistic: str = "mean") -> np.ndarray:
        from scipy.stats import norm

        d = self.expected_duty(s, m)
        lb, li = self.busy_ms(m, load), self.idle_ms(load)
        if statistic == "mean":
            return 1.0 / (d / lb + (1.0 - d) / li)     # count-weighted mix of back-to-back batches
        frac = d * li / (d * li + (1.0 - d) * lb)        # fraction of batches run beside training
        z = norm.ppf(np.clip(1.0 - 0.01 / np.maximum(frac, 1e-9), 0.5, 1.0 - 1e-9))
        return np.where(frac > 0.01, lb * np.exp(self.sigma * z),
                        li * np.exp(self.sigma * norm.ppf(0.99)))

    def _period(self, s: float, m: float, busy_frac: float, T: float
                ) -> tuple[float, float, int]:
        lb, li = float(self.busy_ms(m)), self.idle_ms()
        n_busy = int(busy_frac * T * 1000.0 / lb)
        n_idle = int((1.0 - busy_frac) * T * 1000.0 / li)
        lat = np.r_[np.full(n_busy, lb), np.full(n_idle, li)]
        lat = lat * self.rng.lognormal(0.0, self.sigma, lat.size)
        if lat.size == 0:
            return math.nan, math.nan, 0
        return float(lat.mean()), float(np.percentile(lat, 99)), int(lat.size)


class QueuePlant(_MeanLawPlant):
    """A shared-bandwidth queue: latency convex in the training's footprint.

    The training competes with the inference for a resource both queue on (memory bandwidth,
    a shared link): it uses ``u * f`` of it, ``f = (m/100) * d`` its footprint (share times
    duty ``d = t/(t + s)``), and the inference's latency is ``idle / (1 - u f)``, as in an
    M/M/1 queue. The local slope near sleep 0 is several times the white-noise secant over
    [0, 1] s, the case that drove a linear-model P loop into limit cycles; per-period
    log-normal noise.

    Parameters
    ----------
    seed : int
        Random seed.
    idle_ms : float
        Inference latency alone at load factor 1 (ms).
    util : float
        Fraction of the shared resource the training takes at footprint 1, in (0, 1).
    work_s, rate_exponent : float
        Iteration time ``work_s / (m/100)**rate_exponent`` (s).
    noise : float
        Per-period log-normal noise of the mean (relative).
    restart_s : float
        Training restart downtime after an MPS change (s).
    """

    name = "queue"
    p99_factor = 1.15

    def __init__(self, *, seed: int = 0, idle_ms: float = 40.0, util: float = 0.55,
                 work_s: float = 0.3, rate_exponent: float = 0.8, noise: float = 0.01,
                 restart_s: float = 10.0) -> None:
        super().__init__(seed=seed, restart_s=restart_s)
        self.idle_ms, self.util = idle_ms, util
        self.work_s, self.rate_exponent, self.noise = work_s, rate_exponent, noise

    def iteration_s(self, m: Any) -> np.ndarray:
        return self.work_s / (np.asarray(m, float) / 100.0) ** self.rate_exponent

    def mean_law(self, m: Any, duty: Any, load: float) -> np.ndarray:
        f = np.asarray(m, float) / 100.0 * duty          # the training's footprint
        return self.idle_ms * load / (1.0 - self.util * f)


class _Ours:
    """:class:`SimulatedColocation` with a load factor (batch 105 at factor 1) and the
    iteration time reported."""

    name = "ours"

    def __init__(self, *, seed: int = 0, preset: str = "fig8", backend: str | None = None,
                 **overrides: Any) -> None:
        self.name = "ours" if preset == "fig8" else preset
        self.sim = SimulatedColocation.preset(preset, seed=seed, backend=backend, **overrides)
        self.restart_s = self.sim.params.restart_s
        self.load = 1.0

    def __getattr__(self, item: str) -> Any:
        return getattr(self.sim, item)

    def _batch(self, load: float | None) -> int:
        return max(1, round(105 * (self.load if load is None else load)))

    def set_load(self, **changes: Any) -> None:
        self.load = float(changes.pop("load", self.load))
        self.sim.set_load(batch=self._batch(None), **changes)

    def iteration_s(self, m: Any) -> np.ndarray:
        return np.asarray(self.sim.expected_iteration_s(m))

    def expected_latency_ms(self, s: Any, m: Any, load: float | None = None,
                            statistic: str = "mean") -> np.ndarray:
        mean = np.asarray(self.sim.expected_latency_ms(s, m, self._batch(load)))
        return mean * (1.1 if statistic == "p99" else 1.0)

    def expected_training_throughput(self, s: Any, m: Any, load: float | None = None
                                     ) -> np.ndarray:
        return np.asarray(self.sim.expected_training_throughput(s, m, self._batch(load)))

    def step(self, actuation: Any, period_s: float) -> PeriodResult:
        return self.sim.step(actuation, period_s)


class _Wrapper:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "plant")

    def __getattr__(self, item: str) -> Any:
        return getattr(self.inner, item)

    def set_load(self, **changes: Any) -> None:
        self.inner.set_load(**changes)


class DelayedPlant(_Wrapper):
    """Reports every latency field one period late (throughput fields stay current).

    Parameters
    ----------
    inner : Plant
        The plant to wrap.
    """

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.name = f"{self.name}+delay"
        self._prev: tuple[float, float, int] = (math.nan, math.nan, 0)

    def step(self, actuation: Any, period_s: float) -> Any:
        r = self.inner.step(actuation, period_s)
        shown, self._prev = self._prev, (r.mean_ms, r.p99_ms, r.count)
        return replace(r, mean_ms=shown[0], p99_ms=shown[1], count=shown[2])


class GlitchPlant(_Wrapper):
    """Replaces the readings of chosen periods (0-based) with ``value_ms`` (a sensor glitch),
    or multiplies them by ``factor`` (an outlier period: a batch descheduled for seconds, a
    checkpoint; the reading is real but says nothing of the sleep's effect).

    Parameters
    ----------
    inner : Plant
        The plant to wrap.
    periods : iterable of int
        The periods whose mean and p99 are replaced.
    value_ms : float
        The reported value (default 1e12 ms).
    factor : float, optional
        Multiply the period's readings by this (> 0) instead of replacing them.
    """

    def __init__(self, inner: Any, periods: Any, value_ms: float = 1e12, *,
                 factor: float | None = None) -> None:
        super().__init__(inner)
        if isinstance(periods, (str, bytes)) or not hasattr(periods, "__iter__"):
            raise TypeError(f"periods must be period numbers (>= 0), got {periods!r}")
        self.periods = {integer("periods", k, 0) for k in periods}
        self.value_ms = float(value_ms)
        if factor is not None and not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"factor must be a finite number > 0, got {factor!r}")
        self.factor = factor
        self._k = 0

    def step(self, actuation: Any, period_s: float) -> Any:
        r = self.inner.step(actuation, period_s)
        k, self._k = self._k, self._k + 1
        if k in self.periods:
            if self.factor is None:
                r = replace(r, mean_ms=self.value_ms, p99_ms=self.value_ms)
            else:
                r = replace(r, mean_ms=r.mean_ms * self.factor, p99_ms=r.p99_ms * self.factor)
        return r


class NoIterationPlant(_Wrapper):
    """Reports no iteration time (``iteration_s`` NaN): a node without the iteration hook, or
    a harness that passes only the latency readings.

    Parameters
    ----------
    inner : Plant
        The plant to wrap.
    """

    def step(self, actuation: Any, period_s: float) -> Any:
        return replace(self.inner.step(actuation, period_s), iteration_s=math.nan)


#: The zoo's plant names.
PLANTS = ("ours", "hyperbolic", "mixture", "delayed", "queue", "h100", "random")
#: The SLO of each fixed plant (mean latency, ms); a drawn plant carries its own. "h100": the
#: H100 preset's suggested SLO (harness.sim.presets.SUGGESTED_SLO_MS).
SLO_MS = {"ours": 90.0, "hyperbolic": 80.0, "mixture": 8.0, "delayed": 80.0, "queue": 60.0,
          "h100": 30.0}


def make_plant(name: str, *, seed: int = 0, restart_s: float | None = None,
               backend: str | None = None, noise_seed: int | None = None,
               identified: bool = False) -> Any:
    """A fresh zoo plant by name (one of :data:`PLANTS`).

    Parameters
    ----------
    name : str
        ``"ours"``, ``"hyperbolic"``, ``"mixture"``, ``"delayed"``, ``"queue"`` or
        ``"h100"`` or ``"random"``.
    seed : int
        Random seed (for ``"random"`` it also draws the physics).
    restart_s : float, optional
        Training downtime of a share change (s, >= 0); 0 is a restart-free knob (a green
        context, a CPU quota). Default: the plant's own (7 s on "ours", 10 s on the
        fixed others; 0 on "h100": a shadow process pre-started, 2 s; drawn on "random").
    backend : str, optional
        The spatial-share backend of "ours" and "h100" (:data:`harness.sim.physics.BACKENDS`).
    noise_seed : int, optional
        The noise's seed when it should differ from ``seed`` (default ``seed``).
    identified : bool
        The plant as its user identified it: the same physics with other noise, but for
        ``"random"`` the interference before its drawn model error, and no reporting delay
        (the delay is in the runtime path, not the identification log).

    Returns
    -------
    Plant
        The plant, with ``expected_latency_ms``/``expected_training_throughput`` views.
    """
    kw: dict[str, float] = {}
    if restart_s is not None:
        kw["restart_s"] = number("restart_s", restart_s, 0.0, 3600.0)
    seed = integer("seed", seed, 0)
    noise = seed if noise_seed is None else integer("noise_seed", noise_seed, 0)
    if name in ("ours", "h100"):
        return _Ours(seed=noise, preset={"ours": "fig8"}.get(name, name), backend=backend, **kw)
    if backend is not None:
        raise ValueError(f"backend: only ours and h100 have spatial-share backends, not {name!r}")
    if name == "hyperbolic":
        return HyperbolicPlant(seed=noise, **kw)
    if name == "mixture":
        return BatchMixturePlant(seed=noise, **kw)
    if name == "delayed":
        p = HyperbolicPlant(seed=noise, **kw)
        return p if identified else DelayedPlant(p)
    if name == "queue":
        return QueuePlant(seed=noise, **kw)
    if name == "random":
        from harness.sim.zoo_draw import DrawnPlant

        d = DrawnPlant(draw=seed, seed=noise, identified=identified, **kw)
        return DelayedPlant(d) if d.delay and not identified else d
    raise ValueError(f"plant must be one of {', '.join(PLANTS)}, got {name!r}")


def slo_ms(name: str, plant: Any) -> float:
    """The SLO of a zoo plant (ms, mean latency): the fixed plants' :data:`SLO_MS`, a drawn
    plant's own."""
    if name in SLO_MS:
        return SLO_MS[name]
    base = plant
    while isinstance(base, _Wrapper):
        base = base.inner
    return float(base.slo_ms)

