"""The GPUColo paper (Chen et al., ICDCS 2024), Fig. 9: SLO sweep (75..95 ms, step 5), batch 105,
400 s per point.

For each SLO and controller the summary gives the steady-state latency (transients excluded:
the first ``warmup_s`` and the periods of and right after any restart or MPS change), its
error against the SLO, the throughputs (averaged over everything after the warm-up, restart
losses included, since they are part of a controller's cost), and how often the controller
was saturated — saturation is reported, not hidden. ``feasible`` says whether any setting
of the knobs meets the SLO on the noise-free plant (the SLO is at least
:func:`~harness.experiments.common.slo_floor_ms`; for the Oracle, also at its own points).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.experiments.common import (
    ExperimentResult,
    build_controllers,
    close_plant,
    distinct_numbers,
    latency_range_ms,
    make_plant,
    params_meta,
    plant_mps_enabled,
    plant_setup,
    resolve_names,
    slo_floor_ms,
    slo_meta,
    steady_mask,
)
from harness.progress import Progress
from harness.results import save_figure
from harness.sim.protocol import Records, concat, run_loop

__all__ = ["DEFAULT_SWEEP_CONTROLLERS", "SUMMARY_COLUMNS", "slo_sweep"]

DEFAULT_SWEEP_CONTROLLERS = ("GSLICE-extended", "GPUColo two-tier",
                             "GPUColo mid-range + adaptive", "gpucontrol default", "Oracle")

#: The range of each SLO, ms: (0, 10000], as ``gpucontrol sweep --slos`` takes it.
SLO_RANGE = (0.0, 10000.0)

SUMMARY_COLUMNS = ("slo_ms", "controller", "steady_latency_ms", "steady_error_ms",
                   "mean_abs_rel_error_pct", "inference_throughput", "training_throughput",
                   "saturated_pct", "feasible", "steady_periods")


def slo_sweep(*, plant: str = "sim", preset: str = "fig8", seed: int = 0,
              slos: Sequence[float] = (75, 80, 85, 90, 95), duration_s: float = 400.0,
              batch: int = 105, period_s: float = 4.0, warmup_s: float = 100.0,
              controllers: Sequence[str] | str | None = DEFAULT_SWEEP_CONTROLLERS,
              out_dir: str | Path | None = None, progress: bool | None = False,
              plant_overrides: dict[str, Any] | None = None,
              relative_slo: bool = False) -> ExperimentResult:
    """Run every controller at every SLO; see the module docstring for the summary.

    Parameters
    ----------
    plant : str
        Plant kind from the registry (:func:`~harness.experiments.plants.make_plant`).
    preset : str
        Plant preset: a name or a calibration file.
    seed : int
        Seed of the plant's random generator.
    slos : Sequence[float]
        The SLOs, ms, each in :data:`SLO_RANGE` (0, 10000] and none twice.
    duration_s : float
        Length of each run, s.
    batch : int
        Inference batch size.
    period_s : float
        Inner control period, s.
    warmup_s : float
        Periods before this time are not scored, s (< ``duration_s``).
    controllers : Sequence[str] or str or None
        Controller names or aliases (None: all).
    out_dir : str or Path or None
        Folder for the result files; None writes nothing.
    progress : bool or None
        Progress bar on stderr (None: when stderr is a terminal).
    plant_overrides : dict or None
        Plant parameter overrides.
    relative_slo : bool
        The SLOs are stated for the paper's RTX 3090 (``fig8``) and moved to the same places
        in ``preset``'s latency range (:func:`~.common.scale_slo`).

    Returns
    -------
    ExperimentResult
        One summary row per controller and SLO.
    """
    names = resolve_names(controllers)
    given = distinct_numbers("slos", slos, *SLO_RANGE, lo_open=True)  # as --slos takes them
    periods = math.ceil(duration_s / period_s)
    if not (math.isfinite(warmup_s) and warmup_s >= 0):
        raise ValueError(f"warmup_s must be >= 0, got {warmup_s!r}")
    if periods * period_s <= warmup_s:
        raise ValueError(f"duration_s ({duration_s}) must exceed warmup_s ({warmup_s})")
    overrides = {**(plant_overrides or {}), "batch": int(batch)}
    ref = make_plant("sim", preset, seed=seed, **overrides)
    slos = [slo_meta(x, ref, int(batch), relative_slo)["slo_ms"] for x in given]
    floor = slo_floor_ms(ref, int(batch))
    runs: list[Records] = []
    mps_on: list[bool | None] = []
    summary: list[dict[str, Any]] = []
    setups: list[dict[str, Any] | None] = []
    with Progress(periods * len(names) * len(slos), "sweep", enabled=progress) as bar:
        for slo in slos:
            ctls = build_controllers(names, plant=ref, slo_ms=slo, scenario=None,
                                     duration_s=periods * period_s, period_s=period_s)
            for c in ctls:
                p = make_plant(plant, preset, seed=seed, **overrides)
                try:
                    r = run_loop(c, p, periods, period_s=period_s, extra={"slo_ms": slo},
                                 on_period=lambda _k: bar.advance())
                    mps_on.append(plant_mps_enabled(p))
                    setups.append(plant_setup(p))
                finally:
                    close_plant(p)
                runs.append(r)
                summary.append(_point(r, c, slo, warmup_s, slo >= floor))
    rec = concat(runs)
    meta = {"experiment": "slo_sweep", "plant": plant, "preset": str(preset), "seed": seed,
            "slos": slos, "slos_given": given, "relative_slo": bool(relative_slo),
            "latency_range_ms": list(latency_range_ms(ref, int(batch))),
            "duration_s": periods * period_s, "period_s": period_s,
            "warmup_s": warmup_s, "batch": batch, "slo_floor_ms": floor,
            **params_meta(plant, ref),
            "mps_enabled": all(mps_on) if None not in mps_on else None,
            "plant_setup": next((s for s in setups if s), None)}
    res = ExperimentResult("slo_sweep", rec, summary, meta=meta)
    if out_dir is not None:
        res.write_set(Path(out_dir), SUMMARY_COLUMNS, f"SLO sweep (batch {batch}, seed {seed})",
                      plot_sweep)
    return res


def _point(r: Records, ctl: Any, slo: float, warmup_s: float, feasible: bool
           ) -> dict[str, Any]:
    steady = steady_mask(r, warmup_s=warmup_s)
    lat = r.col("latency_ms")
    cnt = r.col("count")
    ok = steady & np.isfinite(lat) & (cnt > 0)
    after = r.col("t_start_s") >= warmup_s
    w = cnt[ok]
    mean = float(np.sum(lat[ok] * w) / w.sum()) if ok.any() and w.sum() > 0 else math.nan
    if getattr(ctl, "points", None):
        feasible = feasible and all(p.feasible for p in ctl.points)
    return {
        "slo_ms": slo, "controller": ctl.name, "steady_latency_ms": mean,
        "steady_error_ms": mean - slo,
        "mean_abs_rel_error_pct": 100.0 * float(np.mean(np.abs(lat[ok] - slo) / slo))
        if ok.any() else math.nan,
        "inference_throughput": float(np.nanmean(r.col("inference_throughput")[after])),
        "training_throughput": float(np.nanmean(r.col("training_throughput")[after])),
        "saturated_pct": 100.0 * float(np.mean(r.col("saturated")[after] > 0)),
        "feasible": feasible, "steady_periods": int(ok.sum()),
    }


def plot_sweep(res: ExperimentResult, path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 4))
    names = list(dict.fromkeys(r["controller"] for r in res.summary))
    slos = res.meta["slos"]
    x = np.arange(len(slos))
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        rows = [next(r for r in res.summary if r["controller"] == n and r["slo_ms"] == s)
                for s in slos]
        off = (i - (len(names) - 1) / 2) * width
        ax[0].bar(x + off, [r["steady_latency_ms"] for r in rows], width, label=n)
        ax[1].bar(x + off, [r["inference_throughput"] for r in rows], width, label=n)
        ax[2].bar(x + off, [r["training_throughput"] for r in rows], width, label=n)
    ax[0].hlines(slos, x - 0.45, x + 0.45, colors="k", lw=2, label="SLO")  # across the group
    lat = [float(v) for r in res.summary if (v := r["steady_latency_ms"]) is not None]
    top = max([*slos, *(v for v in lat if math.isfinite(v))])  # no bar runs off the top
    ax[0].set_ylim(min(slos) * 0.8, top * 1.1)
    titles = ("(a) steady latency (ms)", "(b) inference images/s", "(c) training iterations/s")
    for a, t in zip(ax, titles):
        a.set_xticks(x, [f"{s:g}" for s in slos])
        a.set(xlabel="SLO (ms)", title=t)
    handles, labels = ax[0].get_legend_handles_labels()  # below the panels, not on the bars
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0.0, 0.07, 1.0, 1.0))
    return save_figure(fig, path)
