"""Closed loops on the plant zoo (:mod:`harness.sim.zoo`), the way a user would run them.

Each plant is identified first as ``gpucontrol identify --rate-sweep`` does it (:func:`curves`:
white-noise sleep at five share levels, the latency line and the training's iteration time
per level, then the iteration time alone at the shares between), on a copy of the plant with
other noise (for a drawn plant, before its model error), then controlled under a load
(:func:`run`). The figures: periods over 1.05x the SLO (the true latency, a late-reporting
plant's realigned), training against the per-period oracle, share
changes. ``benchmarks/control_quality.py`` and the zoo tests share this module.

Controllers (``controller=``): ``"default"`` (``TwoTierController(curves, slo)``),
``"paper"`` (the GPUColo loop), ``"integral"``
(:class:`~harness.sim.baselines.IntegralController`), or ``"no-<mechanism>"``: the default
with one mechanism removed (:data:`ABLATIONS`). Knobs (``knob=``): ``"mps"`` (each change a
restart of the plant's own length; the controller is not told it), ``"free"`` (restart-free, in
percent) and ``"partitions"`` (restart-free, 25/50/75/100).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from gpucontrol import LatencyModelFamily, Measurement, ShareKnob, TwoTierController
from harness.experiments.identify import family_of, identify, rate_levels
from harness.sim import zoo
from harness.sim.baselines import IntegralController
from harness.sim.protocol import run_loop

__all__ = ["ABLATIONS", "LEVELS", "PARTITIONS", "curves", "fuzz_readings", "run"]

#: The share levels identified (%), and the green-context partitions of the restart-free rows.
LEVELS = (20.0, 40.0, 60.0, 80.0, 100.0)
PARTITIONS = (25.0, 50.0, 75.0, 100.0)
T = 4.0


def _off(attr: str, value: Any, where: str = "outer") -> Callable[[TwoTierController], None]:
    def apply(ctl: TwoTierController) -> None:
        setattr(ctl.outer if where == "outer" else ctl.inner if where == "inner" else ctl,
                attr, value)
    return apply


#: The default's mechanisms, each removable for the ablation (BENCHMARKS.md).
ABLATIONS: dict[str, Callable[[TwoTierController], None]] = {
    "window": _off("min_window", 1),                       # decide on one reading
    "uncertainty": _off("Z", 0.0),                         # the mean prediction, no edge
    "explore": _off("explore", False),
    "feedforward": _off("feedforward", False),             # no predicted sleep with a move
    "escape": _off("PINNED", 10 ** 9),                     # no decision on a pinned sleep
    "guard": _off("oscillation_guard", False, "inner"),
    "schedule": _off("gain_schedule", False, "controller"),
    "load": _off("load_in_gain", False, "controller"),     # the inner gain ignores the load
    "margin": _off("noise_margin", False, "controller"),   # aim at the SLO itself
    "glitch": _off("plausible_max_ms", math.inf, "controller"),
    "fit": lambda ctl: ctl.outer.lat.widen(-ctl.outer.misfit),  # type: ignore[union-attr]
    "start": lambda ctl: setattr(ctl.inner, "sleep_s", ctl.inner.lo),  # start at the bottom
    "reopen": lambda ctl: setattr(ctl.outer.lat, "RUN", 10 ** 9),  # type: ignore[union-attr]
    "raise": _off("raise_in_hold", False, "controller"),    # a two-sided hold after a move
    "horizon": _off("horizon", math.inf),                  # amortise over the whole dwell
    "bend": lambda ctl: ctl.outer.curves.unbend(),  # type: ignore[union-attr]  # duty law
    "afresh": _off("afresh", False),       # no fresh start after readings past explaining
    "steady": _off("steady_noise", False),  # decide at the noise now, not the steady one
}


@functools.cache
def curves(name: str, seed: int, statistic: str = "mean",
           levels: tuple[float, ...] = LEVELS) -> LatencyModelFamily:
    """The user's model of zoo plant ``name`` (seed ``seed``): ``gpucontrol identify
    --rate-sweep``'s procedure, 40 periods of white-noise sleep over 0..1 s at each level, and
    the rate sweep (the iteration time alone at the shares the knob offers between them).

    Parameters
    ----------
    name : str
        A :data:`harness.sim.zoo.PLANTS` name.
    seed : int
        The plant's seed (a drawn plant's physics); the identification's noise differs.
    statistic : {"mean", "p99"}
        The latency statistic modelled (p99: every level kept, the sleep barely moves it).
    levels : tuple of float
        The share levels (%).

    Returns
    -------
    LatencyModelFamily
        What model.json would hold.
    """
    plant = zoo.make_plant(name, seed=seed, noise_seed=seed + 100, identified=True)
    knob = ShareKnob.green(levels) if levels == PARTITIONS else ShareKnob()
    res = identify(plant=plant, mps_levels=levels, sleep_range=(0.0, 1.0), periods=40,
                   warmup=3, seed=seed, statistic=statistic,
                   rate_levels=rate_levels(levels, knob))
    fam = family_of(res, every_level=True)
    assert fam is not None
    return fam


def _base(plant: Any) -> Any:
    while isinstance(plant, (zoo.DelayedPlant, zoo.GlitchPlant, zoo.NoIterationPlant)):
        plant = plant.inner
    return plant


def _delayed(plant: Any) -> bool:
    while isinstance(plant, (zoo.GlitchPlant, zoo.NoIterationPlant)):
        plant = plant.inner
    return isinstance(plant, zoo.DelayedPlant)


def _controller(name: str, fam: LatencyModelFamily, slo: float, mode: str, share: Any) -> Any:
    if name == "integral":
        return IntegralController(slo, fam.at(100.0).gain, share=share)
    if name == "paper":
        return TwoTierController(fam, slo, mode=mode, outer="paper", share=share)
    ctl = TwoTierController(fam, slo, mode=mode, share=share)
    if name.startswith("no-"):
        ABLATIONS[name[3:]](ctl)
    return ctl


def fuzz_readings(n: int, slo_ms: float, seed: int = 0) -> list[Any]:
    """``n`` readings no plant would give: NaN, inf, negative, zero-count, 1e12 ms, and
    plausible-looking values anywhere in 0..5x the SLO with iteration times of any size."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for k in rng.integers(0, 6, n):
        if k == 0:
            bad = float(rng.choice([math.nan, math.inf, -math.inf, -5.0]))
            out.append(Measurement(mean=bad, p99=bad, count=10))
        elif k == 1:
            out.append(Measurement(mean=slo_ms, p99=slo_ms, count=0))
        elif k == 2:
            out.append(Measurement(mean=1e12, p99=1e12, count=10))
        else:
            it = float(rng.choice([math.nan, 0.0, -1.0, rng.uniform(0.001, 100.0)]))
            lat = float(rng.uniform(0.0, 5.0 * slo_ms))
            out.append(Measurement(mean=lat, p99=lat * 1.2, count=int(rng.integers(1, 99)),
                                   iteration_s=it))
    return out


def run(name: str, seed: int, loads: Any, *, controller: str = "default", knob: str = "mps",
        mode: str = "mean", iteration: bool = True, glitch_at: int | None = None,
        fuzz: int = 0, outliers: tuple[int, float] | None = None) -> dict[str, Any]:
    """One closed-loop run on zoo plant ``name``.

    Parameters
    ----------
    name : str
        A :data:`harness.sim.zoo.PLANTS` name.
    seed : int
        Plant and load seed.
    loads : array_like
        The load factor of each period.
    controller : str
        ``"default"``, ``"paper"``, ``"integral"`` or ``"no-<mechanism>"``.
    knob : {"mps", "free", "partitions"}
        The share's backend.
    mode : {"mean", "p99"}
        The controlled statistic (p99: the SLO is 1.15x the plant's mean SLO).
    iteration : bool
        Whether the plant reports the training's iteration time.
    glitch_at : int, optional
        A period whose reading is replaced by 1e12 ms.
    fuzz : int
        Readings from :func:`fuzz_readings` fed to the controller before the run.
    outliers : (int, float), optional
        ``(every, factor)``: the readings of one period in ``every`` (from period
        ``every // 2``) multiplied by ``factor`` (:class:`~harness.sim.zoo.GlitchPlant`).

    Returns
    -------
    dict
        ``over`` (% of periods over 1.05x the SLO), ``efficiency`` (training over the
        per-period oracle's), ``changes``, ``changes_late`` (after period 100), and the
        per-period ``training``, ``periods_over``, ``share``, ``latency`` and ``oracle``
        (the oracle's training); ``decisions``: the default outer loop's decisions as
        ``(period, Decision)``, the period after which each was taken.
    """
    levels = PARTITIONS if knob == "partitions" else LEVELS
    fam = curves(name, seed, mode, levels)
    plant = zoo.make_plant(name, seed=seed, restart_s=None if knob == "mps" else 0.0)
    base = _base(plant)
    slo = zoo.slo_ms(name, plant) * (1.15 if mode == "p99" else 1.0)
    if glitch_at is not None:
        plant = zoo.GlitchPlant(plant, [glitch_at])
    if outliers is not None:
        every, factor = outliers
        plant = zoo.GlitchPlant(plant, range(every // 2, len(loads), every), factor=factor)
    if not iteration:
        plant = zoo.NoIterationPlant(plant)
    share = {"mps": None, "free": ShareKnob(change_s=0.0),
             "partitions": ShareKnob.green(PARTITIONS)}[knob]
    ctl = _controller(controller, fam, slo, mode, share)
    for m in fuzz_readings(fuzz, slo, seed):
        ctl.update(m)
    n = len(loads)
    decisions: list[tuple[int, Any]] = []
    outer = getattr(ctl, "outer", None)
    seen = getattr(outer, "last", None)          # (one the fuzzed readings left is not new)

    def note(k: int) -> None:
        nonlocal seen
        d = getattr(outer, "last", None)
        if d is not seen:
            seen = d
            decisions.append((k, d))

    rec = run_loop(ctl, plant, n, zoo.load_scenario(loads, T), on_period=note)
    lat = rec.col("latency_ms" if mode == "mean" else "p99_ms")
    if _delayed(plant):
        lat = np.r_[lat[1:], np.nan]        # the period's own latency (reported one late)
    ok = np.isfinite(lat) & (lat < 1e6)
    tr = rec.col("training_iterations")
    orc = np.array([zoo.oracle_rate(base, slo, q, mode, levels_pct=PARTITIONS if
                                    knob == "partitions" else None) * T for q in loads])
    changed = rec.col("mps_changed")
    return {"over": 100.0 * float(np.mean(lat[ok] > 1.05 * slo)),
            "efficiency": float(tr.sum() / orc.sum()), "changes": float(changed.sum()),
            "changes_late": float(changed[100:].sum()), "training": tr,
            "periods_over": lat > 1.05 * slo, "share": rec.col("mps_pct"), "latency": lat,
            "records": rec, "controller": ctl, "oracle": orc, "decisions": decisions}
