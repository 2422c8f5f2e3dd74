"""Synthetic traces and trace transformations of the GPUColo paper's evaluation (Chen et al.,
ICDCS 2024), Sec. VIII: the seeded synthetic generator, the inference burst and the
inference:training ratio used for Fig. 13b.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.checks import integer, number
from harness.cluster.traces import (
    DAY,
    INFERENCE,
    TRAINING,
    LoadReport,
    Trace,
    _profile,
    memory_model,
)

__all__ = ["SyntheticConfig", "inference_burst", "synthetic", "with_ratio"]


@dataclass(frozen=True)
class SyntheticConfig:
    """Statistics of the synthetic trace (the GPUColo paper, Sec. VIII scale).

    ``target_gpus`` is the mean number of busy GPUs under No Co-location (the paper reports
    3059 for its 6500-GPU cluster); arrival rates are solved from it. Durations are lognormal
    (median, sigma of the log); demands are Beta-distributed (mean given) and clipped to
    [0.05, 1]; a fraction of training jobs spans 2-8 GPUs (split per GPU). Arrivals follow a
    Poisson process with a diurnal sine modulation.

    Parameters
    ----------
    days : float
        Trace length (days), in (0, 3650].
    target_gpus : float
        Mean busy GPUs under No Co-location, in (0, 1e6].
    inference_to_training : float
        Inference tasks per training task, in (0, 1e4].
    inf_median_s, inf_log_sigma : float
        Inference duration: median (s, in (0, 365 days]) and sigma of its log (in [0, 5]).
    train_median_s, train_log_sigma : float
        Training duration: median (s, in (0, 365 days]) and sigma of its log (in [0, 5]).
    inf_demand_mean, train_demand_mean : float
        Mean demanded utilization, in (0.05, 1).
    multi_gpu_fraction : float
        Fraction of training jobs spanning 2-8 GPUs, in [0, 1].
    diurnal_amplitude : float
        Relative amplitude of the daily arrival modulation, in [0, 1).
    seed : int
        Random seed, in [0, 2^32 - 1].
    """

    days: float = 57.0
    target_gpus: float = 3000.0
    inference_to_training: float = 3.0
    inf_median_s: float = 8 * 3600.0
    inf_log_sigma: float = 1.0
    train_median_s: float = 16 * 3600.0
    train_log_sigma: float = 1.0
    inf_demand_mean: float = 0.2
    train_demand_mean: float = 0.3
    multi_gpu_fraction: float = 0.05
    diurnal_amplitude: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        for name, hi in (("days", 3650), ("target_gpus", 1e6), ("inference_to_training", 1e4),
                         ("inf_median_s", 365 * DAY), ("train_median_s", 365 * DAY)):
            number(name, getattr(self, name), 0, hi, lo_open=True)
        for name in ("inf_log_sigma", "train_log_sigma"):
            number(name, getattr(self, name), 0, 5)
        for name in ("inf_demand_mean", "train_demand_mean"):
            number(name, getattr(self, name), 0.05, 1, lo_open=True, hi_open=True)
        number("multi_gpu_fraction", self.multi_gpu_fraction, 0, 1)
        number("diurnal_amplitude", self.diurnal_amplitude, 0, 1, hi_open=True)
        object.__setattr__(self, "seed", integer("seed", self.seed, 0, 2**32 - 1))


def synthetic(cfg: SyntheticConfig | None = None, **kw: Any) -> Trace:
    """A seeded synthetic trace (see :class:`SyntheticConfig`).

    Parameters
    ----------
    cfg : SyntheticConfig, optional
        The statistics (default: ``SyntheticConfig(**kw)``).
    **kw : Any
        :class:`SyntheticConfig` fields, when ``cfg`` is not given.

    Returns
    -------
    Trace
        The per-GPU tasks.

    Examples
    --------
    >>> t = synthetic(days=1, target_gpus=20, seed=1)
    >>> t.counts()["inference"] > t.counts()["training"]
    True
    """
    cfg = cfg or SyntheticConfig(**kw)
    rng = np.random.default_rng(cfg.seed)
    horizon = cfg.days * DAY
    mean_inf = cfg.inf_median_s * math.exp(cfg.inf_log_sigma ** 2 / 2)
    mean_train = cfg.train_median_s * math.exp(cfg.train_log_sigma ** 2 / 2)
    gpus_per_train = 1 + cfg.multi_gpu_fraction * (np.mean([2, 4, 8]) - 1)
    r = cfg.inference_to_training
    lam_train = cfg.target_gpus / (r * mean_inf + mean_train * gpus_per_train)
    parts = []
    for kind, lam, med, sig, dmean in (
            (INFERENCE, lam_train * r, cfg.inf_median_s, cfg.inf_log_sigma, cfg.inf_demand_mean),
            (TRAINING, lam_train, cfg.train_median_s, cfg.train_log_sigma,
             cfg.train_demand_mean)):
        n = rng.poisson(lam * horizon)
        # thinning for the diurnal modulation: accept with (1 + A sin) / (1 + A)
        t = rng.uniform(0, horizon, int(n * (1 + cfg.diurnal_amplitude)) + 16)
        acc = rng.uniform(0, 1, len(t)) < (1 + cfg.diurnal_amplitude * np.sin(
            2 * math.pi * t / DAY)) / (1 + cfg.diurnal_amplitude)
        t = np.sort(t[acc][:n])
        n = len(t)
        length = np.maximum(1.0, np.round(rng.lognormal(math.log(med), sig, n)))
        conc = 4.0
        demand = np.clip(rng.beta(dmean * conc, (1 - dmean) * conc, n), 0.05, 1.0)
        demand = np.round(demand, 2)
        ngpu = np.ones(n, dtype=int)
        if kind == TRAINING:
            multi = rng.uniform(0, 1, n) < cfg.multi_gpu_fraction
            ngpu[multi] = rng.choice([2, 4, 8], int(multi.sum()))
            demand[multi] = 1.0
        rep = np.repeat(np.arange(n), ngpu)
        kinds = np.full(len(rep), kind, dtype=np.int8)
        dem = demand[rep]
        u = rng.uniform(0, 1, (len(rep), 2))
        beta, sigma = _profile(u, kinds)
        parts.append(Trace("synthetic", np.floor(t[rep]).astype(np.int64), length[rep], dem,
                           memory_model(dem, kinds), kinds, beta, sigma))
    out = Trace.concat("synthetic", parts)
    out.report = LoadReport(f"synthetic {cfg.days:g} d seed {cfg.seed}", rows=len(out),
                            kept_rows=len(out), tasks=len(out))
    return out


# ---------------------------------------------------------------------------------------------
def inference_burst(trace: Trace, start_day: float = 20.0, end_day: float = 40.0) -> Trace:
    """Duplicate the inference tasks that arrive in [start_day, end_day).

    The inference burst of the GPUColo paper (Chen et al., ICDCS 2024), Sec. VIII.

    Parameters
    ----------
    trace : Trace
        The trace.
    start_day, end_day : float
        The burst's days (arrivals in ``[start_day, end_day)``).

    Returns
    -------
    Trace
        The trace with the burst's inference tasks duplicated (new interference profiles).

    Raises
    ------
    ValueError
        Unless ``0 <= start_day < end_day <= 36500``.
    """
    number("start_day", start_day, 0, 36500)
    number("end_day", end_day, 0, 36500)
    if not start_day < end_day:
        raise ValueError(f"start_day must be before end_day, got {start_day!r}, {end_day!r}")
    lo, hi = start_day * DAY, end_day * DAY
    m = (trace.kind == INFERENCE) & (trace.arrival >= lo) & (trace.arrival < hi)
    dup = trace.take(m)
    # the duplicates are new tasks: give them their own interference profile
    rng = np.random.default_rng(12345)
    dup.beta, dup.sigma = _profile(rng.uniform(0, 1, (len(dup), 2)), dup.kind)
    out = Trace.concat(trace.name + "+burst", [trace, dup])
    out.report = trace.report
    return out


def with_ratio(trace: Trace, ratio: float, seed: int = 0) -> Trace:
    """Thin the trace (randomly, seeded) to an inference:training task ratio of ``ratio``.

    Parameters
    ----------
    trace : Trace
        The trace.
    ratio : float
        Inference tasks per training task wanted, > 0.
    seed : int
        Seed of the thinning.

    Returns
    -------
    Trace
        The thinned trace (``trace`` itself when it has no inference or no training task).
    """
    if not ratio > 0:
        raise ValueError(f"ratio must be > 0, got {ratio!r}")
    c = trace.counts()
    if c["training"] == 0 or c["inference"] == 0:
        return trace
    base = c["inference"] / c["training"]
    rng = np.random.default_rng(seed)
    keep = np.ones(len(trace), dtype=bool)
    if ratio > base:   # fewer training tasks
        m = trace.kind == TRAINING
        keep[m] = rng.uniform(0, 1, int(m.sum())) < base / ratio
    else:
        m = trace.kind == INFERENCE
        keep[m] = rng.uniform(0, 1, int(m.sum())) < ratio / base
    return trace.take(keep, f"{trace.name} {ratio:g}:1")
