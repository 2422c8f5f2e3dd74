"""The GPUColo paper (Chen et al., ICDCS 2024), Fig. 4: MPS vs Sleep vs Sleep+MPS as knobs.

Three open-loop runs on the Fig 4 plant (ResNet-50 inference with the training emulator):

* **MPS** — both processes at MPS 80 %, no sleep; training MPS 80 -> 20 % at 20 s (the
  training restarts, ~7 s without SM readings while inference keeps running) and back to
  80 % at 40 s.
* **Sleep** — no MPS (time slicing); sleep 0.2 s -> 0.8 s at 20 s -> 0.2 s at 40 s.
* **Sleep+MPS** — both at MPS 80 %; sleep 0.2 s -> 0.8 s -> 0.2 s.

The summary compares the settled latency and training SM share before and after the first
change with the paper's numbers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from gpucontrol import Actuation
from harness.experiments.common import (
    ExperimentResult,
    close_plant,
    make_plant,
    plant_mps_enabled,
    plant_setup,
)
from harness.progress import Progress
from harness.results import save_figure
from harness.sim.protocol import Records, concat, run_loop

__all__ = ["KNOB_RUNS", "PAPER_FIG4", "PAPER_FIG4_BATCH", "Schedule", "batch_note", "knobs"]

#: GPUColo paper, Fig. 4 (Sec. IV-B): (latency ms, training SM %) before and after the change
#: at 20 s.
PAPER_FIG4: dict[str, dict[str, tuple[float, float]]] = {
    "MPS": {"before": (15.1, 38.15), "after": (5.62, 1.128)},
    "Sleep": {"before": (6.68, 32.8), "after": (5.52, 15.8)},
    "Sleep+MPS": {"before": (7.95, 26.3), "after": (6.2, 2.89)},
}

#: The inference batch of the Fig 4 setting as the ``fig4`` preset reproduces it (the paper
#: does not state it; docs/simulated_plant.md): the paper's columns hold for it alone.
PAPER_FIG4_BATCH = 5

#: run name -> (plant overrides, knobs before, knobs after) with knobs = (sleep s, training MPS)
KNOB_RUNS: dict[str, tuple[dict[str, Any], tuple[float, float], tuple[float, float]]] = {
    "MPS": ({}, (0.0, 80.0), (0.0, 20.0)),
    "Sleep": ({"mps_enabled": False}, (0.2, 100.0), (0.8, 100.0)),
    "Sleep+MPS": ({}, (0.2, 80.0), (0.8, 80.0)),
}


class Schedule:
    """An open-loop controller that applies ``(time_s, sleep_s, mps_pct)`` steps."""

    def __init__(self, steps: list[tuple[float, float, float]], *, period_s: float = 1.0,
                 name: str = "schedule") -> None:
        if not steps:
            raise ValueError("steps must not be empty")
        self.steps = sorted(steps)
        self.inner_period_s = float(period_s)
        self.name = name
        self.slo_ms = math.nan
        self._k = 0

    def _at(self, t: float) -> Actuation:
        cur = self.steps[0]
        for st in self.steps:
            if st[0] <= t + 1e-9:
                cur = st
        return Actuation(cur[1], cur[2], False, False, "schedule")

    def initial_actuation(self) -> Actuation:
        return self._at(0.0)

    def update(self, measurement: Any) -> Actuation:
        self._k += 1
        return self._at(self._k * self.inner_period_s)


def knobs(*, plant: str = "sim", preset: str = "fig4", seed: int = 0, duration_s: float = 60.0,
          change_s: tuple[float, float] = (20.0, 40.0), period_s: float = 1.0,
          settle_s: float = 8.0, out_dir: str | Path | None = None,
          progress: bool | None = False) -> ExperimentResult:
    """Run the three Fig 4 knob experiments.

    The summary has one row per run and phase ("before": the ``settle_s`` seconds before the
    first change; "after": the ``settle_s`` seconds before the second change, i.e. after the
    MPS restart has finished) with the measured mean latency and SM share next to the
    paper's and the relative differences. ``preset``: the plant preset (a name or a
    calibration file, :func:`harness.experiments.common.make_plant`); the paper's numbers are
    Fig 4's whatever the preset. The summary also carries ``sim_latency_ms`` and ``sim_sm_pct``:
    the same runs on the simulated plant (same preset and timing, seed 0).

    Parameters
    ----------
    plant : str
        Plant kind from the registry (:func:`~harness.experiments.plants.make_plant`).
    preset : str
        Plant preset: a name or a calibration file.
    seed : int
        Seed of the plant's random generator.
    duration_s : float
        Length of each run, s.
    change_s : tuple[float, float]
        When the knobs change and change back, s (``0 < first < second <= duration_s``).
    period_s : float
        Control period, s.
    settle_s : float
        Length of the averaging window before each change, s.
    out_dir : str or Path or None
        Folder for the result files; None writes nothing.
    progress : bool or None
        Progress bar on stderr (None: when stderr is a terminal).

    Returns
    -------
    ExperimentResult
        Records of the three runs and the summary.
    """
    if not (0 < change_s[0] < change_s[1] <= duration_s):
        raise ValueError(f"change_s must satisfy 0 < first < second <= duration_s, got "
                         f"{change_s!r} with duration_s={duration_s!r}")
    periods = math.ceil(duration_s / period_s)
    runs: list[Records] = []
    summary: list[dict[str, Any]] = []
    mps_on: dict[str, bool | None] = {}
    batch: int | None = None
    setups: dict[str, dict[str, Any] | None] = {}
    with Progress(periods * len(KNOB_RUNS), "knobs", enabled=progress) as bar:
        for name, (over, before, after) in KNOB_RUNS.items():
            p = make_plant(plant, preset, seed=seed, **over)
            sched = Schedule([(0.0, *before), (change_s[0], *after), (change_s[1], *before)],
                             period_s=period_s, name=name)
            try:
                r = run_loop(sched, p, periods, period_s=period_s,
                             on_period=lambda _k: bar.advance())
                mps_on[name] = plant_mps_enabled(p)
                batch = _batch(p)
                setups[name] = plant_setup(p)
            finally:
                close_plant(p)
            runs.append(r)
            t = r.col("t_end_s")
            lat, sm = r.col("latency_ms"), r.col("training_sm_share")
            for phase, (a, b) in (("before", (change_s[0] - settle_s, change_s[0])),
                                  ("after", (change_s[1] - settle_s, change_s[1]))):
                sel = (t > a + 1e-9) & (t <= b + 1e-9) & (r.col("restarting") == 0)
                pl, ps = PAPER_FIG4[name][phase]
                ml = float(np.nanmean(lat[sel])) if sel.any() else math.nan
                ms = 100.0 * float(np.nanmean(sm[sel])) if sel.any() else math.nan
                summary.append({"run": name, "phase": phase, "latency_ms": ml,
                                "paper_latency_ms": pl, "latency_err_pct": 100 * (ml - pl) / pl,
                                "sm_pct": ms, "paper_sm_pct": ps,
                                "sm_err_pct": 100 * (ms - ps) / ps})
    _add_sim_reference(summary, plant=plant, preset=preset, seed=seed, duration_s=duration_s,
                       change_s=change_s, period_s=period_s, settle_s=settle_s)
    rec = concat(runs)
    for row in rec:
        row["run"] = row["controller"]
    meta = {"experiment": "knobs", "plant": plant, "preset": str(preset), "seed": seed,
            "duration_s": periods * period_s, "period_s": period_s, "change_s": list(change_s),
            "batch": batch, "paper_batch": PAPER_FIG4_BATCH,
            "runs": {k: {"overrides": v[0], "before": v[1], "after": v[2],
                         "mps_enabled": mps_on.get(k), "plant_setup": setups.get(k)}
                     for k, v in KNOB_RUNS.items()}}
    res = ExperimentResult("knobs", rec, summary, meta=meta)
    if out_dir is not None:
        cols = ("run", "phase", "latency_ms", "paper_latency_ms", "latency_err_pct", "sm_pct",
                "paper_sm_pct", "sm_err_pct", "sim_latency_ms", "sim_sm_pct")
        res.write_set(Path(out_dir), cols, "Knobs (GPUColo paper, Fig. 4)", plot_knobs,
                      digits=2)
    return res


def _batch(plant: Any) -> int | None:
    """The plant's inference batch, where it says (``params`` or ``config``)."""
    for holder in (getattr(plant, "params", None), getattr(plant, "config", None)):
        b = getattr(holder, "batch", None)
        if isinstance(b, int):
            return b
    return None


def batch_note(res: ExperimentResult) -> str | None:
    """One line when the run's batch is not the Fig 4 setting's: then its latencies are not
    comparable with the paper's columns (only the changes before/after are).

    Parameters
    ----------
    res : ExperimentResult
        A :func:`knobs` result.

    Returns
    -------
    str or None
        The note, or None when the batches agree (or the plant does not say).
    """
    b = res.meta.get("batch")
    if b is None or b == PAPER_FIG4_BATCH:
        return None
    return (f"the paper_* columns are the GPUColo paper's Fig 4, whose setting the fig4 "
            f"preset reproduces at inference batch {PAPER_FIG4_BATCH}; this run's batch is {b} "
            f"(preset {res.meta['preset']}): compare the change from before to after, not "
            f"the values")


def _add_sim_reference(summary: list[dict[str, Any]], *, plant: str, preset: str, seed: int,
                       duration_s: float, change_s: tuple[float, float], period_s: float,
                       settle_s: float) -> None:
    """Add ``sim_latency_ms`` / ``sim_sm_pct``: the same runs on the simulated plant.

    The reference is the simulated plant with the same preset and timing and seed 0, so a
    hardware result folder carries its own comparison (the README draft of
    :mod:`harness.hil.readme` reads it from ``knobs_summary.csv``). A simulated run with
    seed 0 is its own reference.
    """
    if plant == "sim" and seed == 0:
        ref = summary
    else:
        ref = knobs(plant="sim", preset=preset, seed=0, duration_s=duration_s,
                    change_s=change_s, period_s=period_s, settle_s=settle_s).summary
    by_key = {(r["run"], r["phase"]): r for r in ref}
    for row in summary:
        s = by_key.get((row["run"], row["phase"]), {})
        row["sim_latency_ms"] = s.get("latency_ms", math.nan)
        row["sim_sm_pct"] = s.get("sm_pct", math.nan)


def _shade_restarts(ax: Any, t: np.ndarray, restarting: np.ndarray, color: str,
                    name: str) -> None:
    """Shade each run of periods in which ``name``'s training was restarting (its SM line has
    a gap there: no reading), labelled once."""
    label = f"{name}: training restarting (no SM reading)"
    k = 0
    while k < len(t):
        if not restarting[k]:
            k += 1
            continue
        j = k
        while j + 1 < len(t) and restarting[j + 1]:
            j += 1
        start = t[k - 1] if k else t[k] - (t[1] - t[0] if len(t) > 1 else 1.0)
        ax.axvspan(start, t[j], color=color, alpha=0.12, lw=0, label=label)
        label = "_nolegend_"
        k = j + 1


def plot_knobs(res: ExperimentResult, path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    marks = {"MPS": "s", "Sleep": "o", "Sleep+MPS": "*"}
    for name in KNOB_RUNS:
        r = Records(x for x in res.records if x["run"] == name)
        t = r.col("t_end_s")
        sm = 100 * r.col("training_sm_share")
        restarting = r.col("restarting") > 0
        sm[restarting] = np.nan  # no SM readings while training restarts
        lines = ax[0].plot(t, r.col("latency_ms"), marker=marks[name], ms=4, label=name)
        ax[1].plot(t, sm, marker=marks[name], ms=4, label=name)
        _shade_restarts(ax[1], t, restarting, lines[0].get_color(), name)
    ax[0].set(ylabel="inference latency (ms)", title="Knobs: MPS vs Sleep vs Sleep+MPS")
    ax[1].set(ylabel="training SMs (%)", xlabel="time (s)")
    for a in ax:
        for c in res.meta["change_s"]:
            a.axvline(c, color="grey", ls=":", lw=0.8)
        a.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the lines
    fig.tight_layout()
    return save_figure(fig, path)
