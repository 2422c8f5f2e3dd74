"""Results of cluster runs: summary table, GPUs saved, tidy CSVs and the Fig 12 / 13 plots."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from harness.cluster.engine import SimResult
from harness.cluster.placement import PLACEMENTS
from harness.cluster.policies import LABELS, POLICIES
from harness.cluster.traces import DAY, INFERENCE
from harness.results import save_figure, write_csv


def saved(base: float, other: float) -> float:
    """Fraction of ``base`` GPUs saved by using ``other`` instead (nan when base is 0)."""
    return (base - other) / base if base > 0 else math.nan


def window_violation(r: SimResult, start_day: float, end_day: float) -> float:
    m = (r.kind == INFERENCE) & (r.violated >= 0) & (r.arrival >= start_day * DAY) & (
        r.arrival < end_day * DAY)
    return float(np.mean(r.violated[m])) if m.any() else math.nan


def summary_rows(results: Sequence[SimResult], burst: tuple[float, float] | None = (20, 40)
                 ) -> list[dict]:
    """One row per result with GPUs saved against No Co-location and GSLICE (same placement
    when present, else any)."""
    def find(policy: str, placement: str) -> SimResult | None:
        same = [r for r in results if r.policy == policy and r.placement == placement]
        if same:
            return same[0]
        anyp = [r for r in results if r.policy == policy]
        return anyp[0] if anyp else None

    rows = []
    for r in results:
        base = find("nocolo", r.placement)
        gs = find("gslice", r.placement)
        rows.append({
            "policy": r.policy, "label": LABELS[r.policy], "placement": r.placement,
            "mean_gpus": r.mean_gpus, "peak_gpus": r.peak_gpus,
            "saved_vs_nocolo": saved(base.mean_gpus, r.mean_gpus) if base else math.nan,
            "saved_vs_gslice": saved(gs.mean_gpus, r.mean_gpus) if gs else math.nan,
            "violation_rate": r.violation_rate,
            "burst_violation_rate": window_violation(r, *burst) if burst else math.nan,
            "training_slowdown": r.training_slowdown(),
            "wall_s": r.wall_s, "ticks": r.ticks, "controller_updates": r.controller_updates,
            "mps_changes": r.mps_changes, "restarts": r.restarts, "kace_r2": r.kace_r2,
        })
    return rows


def format_table(rows: Iterable[dict]) -> str:
    head = (f"{'policy':16s} {'placement':9s} {'mean GPUs':>9s} {'saved/NoCo':>10s} "
            f"{'saved/GSL':>9s} {'SLO viol':>8s} {'burst':>7s} {'train x':>7s} {'wall s':>7s}")
    lines = [head, "-" * len(head)]
    def pct(x):
        return "    n/a" if not math.isfinite(x) else f"{100 * x:6.1f}%"
    for r in rows:
        lines.append(f"{r['label']:16s} {r['placement']:9s} {r['mean_gpus']:9.1f} "
                     f"{pct(r['saved_vs_nocolo']):>10s} {pct(r['saved_vs_gslice']):>9s} "
                     f"{pct(r['violation_rate']):>8s} {pct(r['burst_violation_rate']):>7s} "
                     f"{r['training_slowdown']:7.3f} {r['wall_s']:7.2f}")
    return "\n".join(lines)


def write_rows(rows: Sequence[dict], path: Path) -> Path:
    """Tidy rows as CSV, written atomically (harness.results.write_csv)."""
    return write_csv(rows, path)


def daily_rows(results: Sequence[SimResult]) -> list[dict]:
    """Tidy: one row per (policy, placement, day)."""
    rows = []
    for r in results:
        viol = r.daily_violation()
        for d in range(r.days):
            rows.append({"policy": r.policy, "placement": r.placement, "day": d,
                         "gpus": float(r.daily_gpus[d]), "used_gpus": float(r.daily_used[d]),
                         "violation_rate": float(viol[d])})
    return rows


#: One colour per policy in every cluster figure; the placement sets the line style.
POLICY_COLORS = {p: f"C{i}" for i, p in enumerate(POLICIES)}
PLACEMENT_STYLES = dict(zip(PLACEMENTS, ("-", "--", ":")))


def _style(policy: str, placement: str) -> dict:
    return {"color": POLICY_COLORS.get(policy, "k"),
            "ls": PLACEMENT_STYLES.get(placement, "-.")}


def _same_as(results: Sequence[SimResult], series: Sequence[np.ndarray], i: int) -> str | None:
    """The placement of an earlier result of the same policy whose plotted series is
    identical to result ``i``'s (the two lines coincide), else None."""
    r = results[i]
    for k in range(i):
        if (results[k].policy == r.policy and results[k].placement != r.placement
                and np.array_equal(series[k], series[i], equal_nan=True)):
            return results[k].placement
    return None


def _plot_series(ax, results: Sequence[SimResult], series: Sequence[np.ndarray],
                 labels: Sequence[str]) -> None:
    """One line per result; a line identical to an earlier one of the same policy says so in
    its legend entry (Mudi-style placement under Separate, for instance, places training
    first-fit, since no training GPU hosts inference there, and Separate's GPU count follows
    the training GPUs)."""
    for i, (r, y, label) in enumerate(zip(results, series, labels)):
        same = _same_as(results, series, i)
        if same:
            label += f" (same as {same})"
        ax.plot(np.arange(r.days), y, marker=".", **_style(r.policy, r.placement), label=label)


def _days_axis(ax, results: Sequence[SimResult], burst: tuple[float, float] | None) -> None:
    """x axis over the simulated days only; the burst shaded where it overlaps them."""
    days = max(r.days for r in results)
    ax.set_xlim(-0.5, max(days - 0.5, 0.5))
    if burst and burst[0] < days:
        ax.axvspan(burst[0], min(burst[1], days - 0.5), color="0.9", zorder=0,
                   label=f"inference burst (days {burst[0]:g}-{burst[1]:g})")


def plot_fig12(results: Sequence[SimResult], path: Path,
               burst: tuple[float, float] | None = (20, 40)) -> Path:
    """Daily average GPUs per policy.

    As in the GPUColo paper (Chen et al., ICDCS 2024), Fig. 12.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.4))
    _plot_series(ax, results, [r.daily_gpus for r in results],
                 [f"{LABELS[r.policy]} ({r.placement}): {r.mean_gpus:.0f}" for r in results])
    _days_axis(ax, results, burst)
    ax.set_xlabel("day")
    ax.set_ylabel("GPUs (daily average)")
    ax.set_title(f"GPUs used per day — {results[0].trace}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def plot_fig13a(results: Sequence[SimResult], path: Path,
                burst: tuple[float, float] | None = (20, 40)) -> Path:
    """Daily inference SLO violation rate per policy.

    As in the GPUColo paper (Chen et al., ICDCS 2024), Fig. 13a.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.4))
    shown = [r for r in results if r.policy != "nocolo"]
    _plot_series(ax, shown, [100 * r.daily_violation() for r in shown],
                 [f"{LABELS[r.policy]} ({r.placement}): "
                  + (f"{100 * r.violation_rate:.1f} %" if math.isfinite(r.violation_rate)
                     else "n/a") for r in shown])
    _days_axis(ax, results, burst)
    ax.set_xlabel("day (of arrival)")
    ax.set_ylabel("SLO violation rate (%)")
    ax.set_title("Inference tasks missing their SLO")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def plot_fig13b(rows: Sequence[dict], path: Path) -> Path:
    """SLO violation rate vs inference:training ratio.

    As in the GPUColo paper (Chen et al., ICDCS 2024), Fig. 13b; rows with keys
    ratio, policy, violation_rate."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for pol in dict.fromkeys(r["policy"] for r in rows):
        pts = sorted((r["ratio"], r["violation_rate"]) for r in rows if r["policy"] == pol)
        ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", label=LABELS[pol],
                color=POLICY_COLORS.get(pol, "k"))
    ax.set_xlabel("inference : training (tasks)")
    ax.set_ylabel("SLO violation rate (%)")
    ax.set_title("Violation vs inference share")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
