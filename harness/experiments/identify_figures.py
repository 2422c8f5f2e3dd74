"""The identification's figures (``gpucontrol identify``): latency against sleep per share
level with the fitted lines (the GPUColo paper's Fig 6), the held-out prediction per level
(Fig 7), and the training's iteration time per share with the law the controller reads."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from harness.experiments.common import ExperimentResult
from harness.experiments.identify import _call
from harness.experiments.model_doc import family_of
from harness.results import save_figure
from harness.sim.protocol import Records

__all__ = ["plot_fig6", "plot_fig7", "plot_rate"]


def _levels(res: ExperimentResult) -> list[float]:
    return [r["mps_pct"] for r in res.summary]


def _line(row: dict[str, Any]) -> str:
    """The fitted line as a reader takes it: units on the slope and on the offset."""
    sign = "-" if row["offset"] < 0 else "+"
    return (f"{row['gain']:.1f} ms/s × sleep {sign} {abs(row['offset']):.1f} ms "
            f"(R² {row['r2']:.2f})")


def plot_fig6(res: ExperimentResult, plant: Any, path: str | Path) -> Path:
    """Latency vs sleep per MPS level: measured periods, fitted line, noise-free curve."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    share = res.meta.get("share_name", "MPS")
    lo, hi = res.meta["sleep_range_s"]
    s = np.linspace(lo, hi, 50)
    for row, color in zip(res.summary, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3):
        m = row["mps_pct"]
        r = Records(x for x in res.records if x["mps_pct"] == m)
        ax.plot(r.col("sleep_s"), r.col("latency_ms"), ".", color=color, alpha=0.5, ms=4)
        ax.plot(s, row["gain"] * s + row["offset"], "-", color=color,
                label=f"{share} {m:g}%: latency = {_line(row)}")
        exp = _call(plant, "expected_latency_ms", s, m)
        if np.all(np.isfinite(exp)):
            ax.plot(s, exp, ":", color=color, lw=1)
    noise_free = any(np.all(np.isfinite(_call(plant, "expected_latency_ms", s, m)))
                     for m in _levels(res))
    ax.set(xlabel="training sleep interval (s)", ylabel="mean inference latency (ms)",
           title=f"Latency vs sleep per training {share} level"
                 + (" (dotted: noise-free plant)" if noise_free else ""))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_rate(res: ExperimentResult, path: str | Path) -> Path:
    """The training's iteration time per share: the levels' (fitted from their records), the
    rate sweep's, and the law the controller reads through them (non-increasing in the
    share, :meth:`gpucontrol.LatencyModelFamily.iteration_s`)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    share = res.meta.get("share_name", "MPS")
    sweep = np.array(res.meta["iteration_times"], dtype=float).reshape(-1, 2)
    lv = [(r["mps_pct"], r.get("iteration_s", math.nan)) for r in res.summary]
    lv = [(m, t) for m, t in lv if math.isfinite(t) and t > 0]
    fam = family_of(res, every_level=True)   # every level: the times, whatever the gains
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    ax.plot(sweep[:, 0], sweep[:, 1], "o", ms=4, label="rate sweep (training alone)")
    if lv:
        ax.plot([m for m, _ in lv], [t for _, t in lv], "s", ms=7,
                label="identified levels (white-noise records)")
    grid = np.linspace(min(sweep[:, 0].min(), *(m for m, _ in lv)),
                       max(sweep[:, 0].max(), *(m for m, _ in lv)), 400)
    law = [fam.iteration_s(m) if fam is not None else math.nan for m in grid]
    ax.plot(grid, law, "-", color="0.3", lw=1.0,
            label="law the controller reads (non-increasing, power law between points)")
    ax.set(xlabel=f"training {share} share (%)", ylabel="iteration time (s)", yscale="log",
           title="Training iteration time per share")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_fig7(res: ExperimentResult, path: str | Path) -> Path:
    """Predicted vs measured latency on the held-out periods, one panel per level."""
    import matplotlib.pyplot as plt

    levels = _levels(res)
    share = res.meta.get("share_name", "MPS")
    fig, axes = plt.subplots(len(levels), 1, figsize=(7.0, 1.9 * len(levels) + 0.6),
                             sharex=True, squeeze=False)
    for ax, row in zip(axes[:, 0], res.summary):
        m = row["mps_pct"]
        r = Records(x for x in res.records if x["mps_pct"] == m and x["split"] == "validation")
        k = r.col("k")
        ax.plot(k, r.col("latency_ms"), "o-", ms=3, lw=0.8, label="measured")
        ax.plot(k, r.col("predicted_ms"), "s--", ms=3, lw=0.8, label="predicted")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{share} {m:g}%: held-out R² {row['r2_validation']:.2f}", fontsize=9)
    handles, labels = axes[0, 0].get_legend_handles_labels()   # above the panels, off the data
    fig.legend(handles, labels, fontsize=8, loc="upper center", ncol=2, frameon=False)
    axes[-1, 0].set_xlabel("control period")
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.35 / fig.get_figheight()))
    return save_figure(fig, path)
