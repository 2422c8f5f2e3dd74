"""The GPUColo paper (Chen et al., ICDCS 2024), Fig. 8: an inference burst (batch 105 -> 115
at 90 s, back at 290 s, 400 s, SLO
90 ms) under every controller; latency, sleep, MPS and throughputs over time.

The backend comparison: each controller runs on the plant with the spatial-share backend it
drives (:attr:`harness.sim.baselines.Baseline.backend`), e.g. on the H100 preset (whose
suggested SLO is 30 ms)::

    burst(preset="h100", controllers="sleep-no-mps,two-tier,green")

runs sleep only on a time-sliced GPU, the paper's loop with MPS restarts and the default
controller on green-context partitions inside MPS, same SLO, same load; ``training_vs_sleep``
divides each one's training by the first's.
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
    controller_backend,
    controller_metrics,
    make_plant,
    params_meta,
    plant_mps_enabled,
    plant_setup,
    resolve_names,
    slo_floor_ms,
    slo_meta,
)
from harness.progress import Progress
from harness.results import save_figure
from harness.sim.physics import backend_overrides
from harness.sim.presets import suggested_slo_ms
from harness.sim.protocol import LoadEvent, Records, Scenario, concat, run_loop

__all__ = ["SUMMARY_COLUMNS", "burst", "burst_scenario"]

SUMMARY_COLUMNS = ("controller", "mean_latency_ms", "pct_over", "periods_over_after_step",
                   "inference_throughput", "training_throughput", "training_vs_oracle",
                   "training_vs_gslice", "mps_changes", "backend", "training_vs_sleep")
#: The reference of ``training_vs_sleep`` (the backend comparison's sleep only).
SLEEP_REFERENCE = "Sleep, no MPS"


def burst_scenario(batches: tuple[int, int] = (105, 115),
                   burst_s: tuple[float, float] = (90.0, 290.0)) -> Scenario:
    """Batch ``batches[0]``, ``batches[1]`` from ``burst_s[0]`` to ``burst_s[1]``.

    Parameters
    ----------
    batches : tuple[int, int]
        Normal and burst inference batch size.
    burst_s : tuple[float, float]
        Start and end of the burst, s.

    Returns
    -------
    Scenario
        The load script.
    """
    b0, b1 = batches
    return Scenario.of(LoadEvent.at(0.0, batch=b0), LoadEvent.at(burst_s[0], batch=b1),
                       LoadEvent.at(burst_s[1], batch=b0))


def _plant_kw(plant: str, name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The plant overrides of controller ``name``'s run: its own backend on top of the run's."""
    b = controller_backend(name)
    if b is None:
        return overrides
    if plant != "sim":
        raise ValueError(f"controller {name!r} drives the {b} backend, which the {plant} plant "
                         f"cannot switch to; on a GPU the backend comparison is the campaign's "
                         f"burst step with the daemon (docs/gpu.md)")
    return {**overrides, **backend_overrides(b)}


def burst(*, plant: str = "sim", preset: str = "fig8", seed: int = 0, duration_s: float = 400.0,
          slo_ms: float | None = None, burst_s: tuple[float, float] = (90.0, 290.0),
          batches: tuple[int, int] = (105, 115), period_s: float = 4.0,
          controllers: Sequence[str] | str | None = None, out_dir: str | Path | None = None,
          progress: bool | None = False, tolerance: float = 0.05,
          plant_overrides: dict[str, Any] | None = None,
          relative_slo: bool = False, backend: str | None = None) -> ExperimentResult:
    """Run the burst experiment (the GPUColo paper (Chen et al., ICDCS 2024), Fig. 8).

    Every controller gets a fresh plant with the same seed (common random numbers). The
    nominal model, the Open setting and the Oracle come from the noise-free simulated plant.

    Returns an :class:`ExperimentResult` whose summary has, per controller: mean latency,
    ``pct_over`` (% of periods above ``(1 + tolerance)`` SLO), ``periods_over_after_step``
    (such periods during the burst), inference (images/s) and training (iterations/s)
    throughput, and training throughput relative to the Oracle and to GSLICE-extended.
    With ``out_dir``: burst.csv (one row per period and controller), burst_summary.csv/.md,
    burst.png and burst_meta.json.

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
    slo_ms : float or None
        Latency SLO, ms (None: the preset's suggested SLO,
        :func:`~harness.sim.presets.suggested_slo_ms`, else 90).
    burst_s : tuple[float, float]
        Start and end of the burst, s.
    batches : tuple[int, int]
        Normal and burst batch size.
    period_s : float
        Inner control period, s.
    controllers : Sequence[str] or str or None
        Controller names or aliases (None: the default set, :data:`~.common.CONTROLLER_NAMES`;
        the backend comparison's ``sleep-no-mps`` and ``green`` are named).
    out_dir : str or Path or None
        Folder for the result files; None writes nothing.
    progress : bool or None
        Progress bar on stderr (None: when stderr is a terminal).
    tolerance : float
        A period is over the SLO above ``(1 + tolerance) * slo_ms``.
    plant_overrides : dict or None
        Plant parameter overrides.
    relative_slo : bool
        ``slo_ms`` is stated for the paper's RTX 3090 (the ``fig8`` preset) and moved to the
        same place in ``preset``'s latency range (:func:`~.common.scale_slo`); use it with a
        preset calibrated on another GPU.
    backend : str or None
        Spatial-share backend of the simulated plant (:data:`~harness.sim.physics.BACKENDS`)
        for the controllers that do not drive their own; None: the preset's.

    Returns
    -------
    ExperimentResult
        Records, summary, files and meta as described above.
    """
    names = resolve_names(controllers)
    if not (0 <= burst_s[0] < burst_s[1]):
        raise ValueError(f"burst_s must be (start, end) with 0 <= start < end, got {burst_s!r}")
    periods = math.ceil(duration_s / period_s)
    if periods < 1:
        raise ValueError(f"duration_s must be at least one period ({period_s} s)")
    overrides = dict(plant_overrides or {})
    if backend is not None:
        if plant != "sim":
            raise ValueError(f"backend: the {plant} plant runs the backend its harness set up; "
                             f"backend={backend!r} is for the simulated plant")
        overrides.update(backend_overrides(backend))
    if slo_ms is None:
        slo_ms = suggested_slo_ms(preset) or 90.0
    scenario = burst_scenario(batches, burst_s)
    ref = make_plant("sim", preset, seed=seed, **{**overrides, "batch": batches[0]})
    slo_info = slo_meta(slo_ms, ref, batches[0], relative_slo)
    slo_ms = slo_info["slo_ms"]
    floors = {b: slo_floor_ms(ref, b) for b in dict.fromkeys(batches)}
    if slo_ms < floors[batches[0]]:
        raise ValueError(
            f"the SLO (slo_ms) {slo_ms:.1f} ms is infeasible: the least latency any sleep in "
            f"[0, 1] s and MPS in [1, 100] % reaches at batch {batches[0]} is "
            f"{floors[batches[0]]:.1f} ms on the {preset} preset; choose an SLO above it")
    slo_info["slo_feasible"] = {str(b): bool(slo_ms >= f) for b, f in floors.items()}
    plant_kw = {n: _plant_kw(plant, n, overrides) for n in names}
    ctls = build_controllers(names, plant=ref, slo_ms=slo_ms, scenario=scenario,
                             duration_s=periods * period_s, period_s=period_s)
    runs: list[Records] = []
    mps_on: list[bool | None] = []
    setups: list[dict[str, Any] | None] = []
    backends: list[str | None] = []
    with Progress(periods * len(ctls), "burst", enabled=progress) as bar:
        for c, n in zip(ctls, names):
            p = make_plant(plant, preset, seed=seed, **plant_kw[n])
            try:
                runs.append(run_loop(c, p, periods, scenario, period_s=period_s,
                                     on_period=lambda _k: bar.advance()))
                mps_on.append(plant_mps_enabled(p))
                setups.append(plant_setup(p))
                backends.append(getattr(getattr(p, "params", None), "backend", None))
            finally:
                close_plant(p)
    rec = concat(runs)
    summary = []
    for c, r, b in zip(ctls, runs, backends):
        m = controller_metrics(r, slo_ms, tolerance=tolerance)
        during = controller_metrics(r, slo_ms, tolerance=tolerance, window=burst_s)
        summary.append({"controller": c.name, **m,
                        "periods_over_after_step": during["periods_over"], "backend": b})
    by = {r["controller"]: r for r in summary}
    for row in summary:
        for key, ref_name in (("training_vs_oracle", "Oracle"),
                              ("training_vs_gslice", "GSLICE-extended"),
                              ("training_vs_sleep", SLEEP_REFERENCE)):
            base = by.get(ref_name, {}).get("training_throughput", math.nan)
            # a reference that (almost) does not train makes the ratio meaningless
            ok = base and base > 1e-3 * max(r["training_throughput"] for r in summary)
            row[key] = row["training_throughput"] / base if ok else math.nan
    meta = {"experiment": "burst", "plant": plant, "preset": str(preset), "seed": seed,
            "duration_s": periods * period_s, "period_s": period_s, **slo_info,
            "burst_s": list(burst_s), "batches": list(batches), "tolerance": tolerance,
            **params_meta(plant, ref),
            "mps_enabled": all(mps_on) if None not in mps_on else None,
            "plant_setup": next((s for s in setups if s), None),
            "backends": dict(zip((c.name for c in ctls), backends))}
    oracle = next((c for c in ctls if c.name == "Oracle"), None)
    if oracle is not None:
        meta["oracle_points"] = [vars(p) for p in oracle.points]
    res = ExperimentResult("burst", rec, summary, meta=meta)
    if out_dir is not None:
        res.write_set(Path(out_dir), SUMMARY_COLUMNS, f"Burst (SLO {slo_ms:g} ms, seed {seed})",
                      plot_burst)
    return res


#: How each controller is drawn in the time panels (colour, line style, width): no two alike
#: in one panel, the fixed allocations in a panel of their own (the ten tab10 colours of one
#: panel, olive, grey and cyan among them, were too close to tell apart).
_STYLE: dict[str, tuple[str, str, float]] = {
    "gpucontrol default": ("tab:blue", "-", 1.9),
    "GPUColo two-tier": ("tab:orange", "-", 1.2),
    "GPUColo mid-range + adaptive": ("tab:green", "-", 1.2),
    "Oracle": ("black", ":", 1.5),
    "Sleep-only": ("tab:red", "--", 1.1),
    "MPS-only": ("tab:purple", "--", 1.1),
    "GSLICE-extended": ("tab:brown", "-.", 1.1),
    "Open": ("tab:gray", "-", 1.3),
    "Simple": ("tab:pink", "-", 1.3),
    "Conservative": ("tab:olive", "-", 1.3),
    "Sleep, no MPS": ("tab:cyan", "--", 1.4),
    "Green context + MPS": ("tab:olive", "-.", 1.4),
}


def _styles(names: list[str]) -> dict[str, dict[str, Any]]:
    """Line keywords per controller: :data:`_STYLE`, then tab10 for names it does not know."""
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    out = {}
    for i, n in enumerate(names):
        color, ls, lw = _STYLE.get(n, (cmap(i % 10), "-", 1.2))
        out[n] = {"color": color, "ls": ls, "lw": lw}
    return out


def _preset_words(meta: dict[str, Any]) -> str:
    """``", preset h100"`` for the figure's title (a calibration file by its name), or ""."""
    preset = str(meta.get("preset") or "")
    if preset in ("", "None"):
        return ""
    return f", preset {Path(preset).stem if preset.endswith('.json') else preset}"


def plot_burst(res: ExperimentResult, path: str | Path) -> Path:
    """Fig 8 layout: (a) latency of the controllers that move a knob, (a') of the fixed
    allocations (their knobs held all run: far from the SLO, on a scale of their own), (b)
    training sleep and (c) training share (MPS % or partition) of the controllers that move
    them (one style each, the legend of (a)), the burst shaded and its start and end
    labelled; (d) mean throughputs per controller.

    Parameters
    ----------
    res : ExperimentResult
        What :func:`burst` returned.
    path : str or Path
        The PNG to write.

    Returns
    -------
    Path
        ``path``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    slo = res.meta["slo_ms"]
    b0, b1 = res.meta["burst_s"]
    batches = res.meta["batches"]
    names = [r["controller"] for r in res.summary]
    style = _styles(names)
    runs = {n: Records(x for x in res.records if x["controller"] == n) for n in names}
    fixed = [n for n in names
             if all(np.ptp(runs[n].col(k)) == 0 for k in ("sleep_s", "mps_pct"))]
    heights = [1.25, 0.6, 1.0, 0.9] if fixed else [1.25, 1.0, 0.9]  # no empty (a') row
    fig = plt.figure(figsize=(13, 2.0 + 2.7 * sum(heights)))
    gs = fig.add_gridspec(len(heights), 2, height_ratios=heights, hspace=0.42, wspace=0.18)
    a_lat = fig.add_subplot(gs[0, :])
    a_fix = fig.add_subplot(gs[1, :], sharex=a_lat) if fixed else None
    a_sleep = fig.add_subplot(gs[-2, 0], sharex=a_lat)
    a_mps = fig.add_subplot(gs[-2, 1], sharex=a_lat)
    a_tp = fig.add_subplot(gs[-1, :])
    series: dict[str, dict[str, tuple[float, ...]]] = {"sleep_s": {}, "mps_pct": {}}
    for n in names:
        r = runs[n]
        t = r.col("t_end_s")
        if n in fixed and a_fix is not None:
            a_fix.plot(t, r.col("latency_ms"), label=n, **style[n])
            continue
        a_lat.plot(t, r.col("latency_ms"), label=n, **style[n])
        a_sleep.step(t, r.col("sleep_s"), where="pre", **style[n])
        a_mps.step(t, r.col("mps_pct"), where="pre", **style[n])
        for key in series:
            series[key][n] = tuple(np.round(r.col(key), 6))
    for a, key in ((a_sleep, "sleep_s"), (a_mps, "mps_pct")):  # name lines drawn over others
        same: dict[tuple[float, ...], list[str]] = {}
        for n, v in series[key].items():
            same.setdefault(v, []).append(n)
        text = "; ".join(" = ".join(g) for g in same.values() if len(g) > 1)
        if text:  # headroom above the lines, where the note does not hide them
            lo, hi = a.get_ylim()
            a.set_ylim(lo, hi + 0.25 * (hi - lo))
            a.text(0.01, 0.98, f"drawn as one line (identical): {text}",
                   transform=a.transAxes, fontsize=7, va="top", color="0.25",
                   bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})
    time_axes = [a for a in (a_lat, a_fix, a_sleep, a_mps) if a is not None]
    for a in time_axes:
        a.axvspan(b0, b1, color="0.92", zorder=0)
        a.grid(alpha=0.3)
    for a in time_axes[:2] if a_fix is not None else time_axes[:1]:  # the latency panels
        a.axhline(slo, color="k", ls="--", lw=1, label=f"SLO {slo:g} ms")
        a.set_ylabel("mean batch latency (ms)")
    for a in (a_fix if a_fix is not None else a_lat, a_sleep, a_mps):
        a.set_xlabel("time (s)")
    for x, text in ((b0, f"burst starts ({b0:g} s): batch {batches[0]} -> {batches[1]}"),
                    (b1, f"burst ends ({b1:g} s): batch {batches[1]} -> {batches[0]}")):
        a_lat.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 3),
                       textcoords="offset points", fontsize=8, ha="center", va="bottom",
                       color="0.25")
    a_lat.set_title("(a) latency of the controllers that move a knob", loc="left", pad=14)
    burst_patch = Patch(color="0.92", label="inference burst")
    handles: list[Any] = [*a_lat.get_legend_handles_labels()[0], burst_patch]
    a_lat.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                 borderaxespad=0.0, title="(a), (b), (c)", title_fontsize=8)
    if a_fix is not None:
        held = "; ".join(f"{n}: sleep {runs[n].col('sleep_s')[0]:g} s, MPS "
                         f"{runs[n].col('mps_pct')[0]:g} %" for n in fixed)
        a_fix.set_title(f"(a') latency of the fixed allocations ({held})", loc="left",
                        fontsize=9)
        a_fix.legend(handles=[*a_fix.get_legend_handles_labels()[0], burst_patch], fontsize=8,
                     loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0)
    a_sleep.set(ylabel="sleep interval (s)", title="(b) training sleep")
    a_mps.set(ylabel="training share (%)",
              title="(c) training share (MPS %, or a green context's partition)")
    x = np.arange(len(names))
    inf = [r["inference_throughput"] for r in res.summary]
    tr = [r["training_throughput"] for r in res.summary]
    a_tp.bar(x - 0.2, inf, 0.4, color="tab:blue", label="inference (images/s, left axis)")
    a3 = a_tp.twinx()
    a3.bar(x + 0.2, tr, 0.4, color="tab:orange", label="training (iterations/s, right axis)")
    a_tp.set_xticks(x, names, rotation=20, fontsize=8, ha="right")
    a_tp.set(ylabel="inference images/s", title="(d) mean throughput over the run")
    a3.set_ylabel("training iterations/s")
    h1, l1 = a_tp.get_legend_handles_labels()
    h2, l2 = a3.get_legend_handles_labels()
    a_tp.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left", bbox_to_anchor=(1.07, 1.0),
                borderaxespad=0.0)
    fig.suptitle(f"Burst: batch {batches[0]} -> {batches[1]} from {b0:g} s to {b1:g} s "
                 f"({res.meta['plant']} plant{_preset_words(res.meta)}, SLO "
                 f"{res.meta['slo_ms']:g} ms, seed {res.meta['seed']})")
    fig.subplots_adjust(left=0.06, right=0.80, top=0.92, bottom=0.07)
    return save_figure(fig, path)
