"""Control quality on the plant zoo (issue "Control v2"), and the paper's loops for comparison.

Every plant of :mod:`harness.sim.zoo` (ours, a hyperbolic duty law with relative MPS caps, a
batch-mixture p99 plant, a one-period reporting delay the controller is not told about, a
shared-bandwidth queue whose latency is convex in the training's footprint) is
identified the way a user would (60 periods of white-noise sleep at MPS 100,
``sysid.fit_static``), then controlled for 600 periods (40 min) under a synthetic
production-like load (no QPS trace is vendored), with steps, model errors x0.3..x3 and a 1e12 ms
glitch. Figures, per plant, against the issue's targets:

* % of periods over 1.05 SLO (the true latency: for the delayed plant the period's own);
* median |l - SLO| / SLO;
* training vs the per-period static oracle (best training rate whose noise-free latency meets
  the SLO at that period's load, resizes free);
* MPS changes per 10 outer evaluations at steady load (constant load, after 100 periods);
* a glitch's cost: training over the 400 periods after a 1e12 ms reading vs the same run
  without it;
* p99 mode: % of periods over 1.05 x the p99 SLO;
* a load step (+30 %; +10 % on "ours", where +30 % leaves no feasible point);
* references for the training a controller paying restarts can reach, sleep ideal in every
  period: the best fixed MPS and the best MPS path chosen knowing the load in advance (upper
  bounds), and a greedy causal policy that knows the plant exactly;
* a restart-free share (plant and controller ``restart_s=0``, a green context or a CPU
  quota) deciding every period and every 12 periods, in percent and on four partitions
  (25/50/75/100);
* the backend comparison, same SLO, same load: sleep only (the share held at 100 %; on
  "ours" and "h100" a time-sliced GPU without MPS), MPS restarts (the paper's two-tier loop)
  and green context + MPS (the default controller told the share is restart-free, the four
  partitions its levels; on the other plants a restart-free share), each built from the
  baselines registry (:data:`harness.sim.baselines.BASELINES`); target: at least 1.5x the
  training of sleep only with at most 2 % of periods over 1.05 SLO.

    python benchmarks/control_quality.py [--seeds 8] [--out FILE] [--plot PNG]

Shortfalls are reported as measured; the plants are not tuned to the controller.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import platform
import sys
import time
from pathlib import Path
from typing import Any

# run as a script, this folder is first on sys.path and its sysid.py would shadow the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import numpy as np  # noqa: E402

from gpucontrol import LinearLatencyModel, TwoTierController  # noqa: E402
from harness.cli.args import integer, out_file  # noqa: E402
from harness.sim import baselines as B  # noqa: E402
from harness.sim import zoo  # noqa: E402
from harness.sim.protocol import run_loop  # noqa: E402
from sysid import fit_static  # noqa: E402

#: SLO per plant (mean mode, ms); p99 mode uses 1.15x.
#: "h100": the H100 preset's suggested SLO (harness.sim.presets.SUGGESTED_SLO_MS).
SLO = {"ours": 90.0, "hyperbolic": 80.0, "mixture": 8.0, "delayed": 80.0, "queue": 60.0,
       "h100": 30.0}
#: Load step per plant: +30 %, but +10 % (the paper's burst, batch 105 -> 115) on "ours",
#: whose inference alone takes 93 ms at +30 % (no operating point meets the 90 ms SLO).
STEP = {"ours": 1.1, "hyperbolic": 1.3, "mixture": 1.3, "delayed": 1.3, "queue": 1.3,
        "h100": 1.3}
#: The backend comparison, from the baselines registry: sleep only, the paper's loop with MPS
#: restarts, green context + MPS.
COMPARISON = ("Sleep, no MPS", "GPUColo two-tier", "Green context + MPS")
#: Plants that model the backends themselves (the others: a restart-free share for green
#: context + MPS, the plant as it is otherwise).
BACKEND_PLANTS = ("ours", "h100")
CONTROLLERS: dict[str, dict[str, Any]] = {
    "default": {},
    "paper": {"outer": "paper"},
    "mid-range + adaptive": {"outer": "mid-range", "adaptive": True},
}
T = 4.0
#: Outer-loop windows measured with a restart-free share.
FREE_EVERY = (1, 12)
#: Green-context partitions measured with a restart-free share (docs/daemon.md's example).
PARTITIONS = (25.0, 50.0, 75.0, 100.0)


def _base(plant: Any) -> Any:
    """The plant whose noise-free views the oracle reads (the delayed plant's inner one)."""
    return plant.inner if isinstance(plant, zoo.DelayedPlant) else plant


def identify(name: str, seed: int, statistic: str = "mean", plant: Any = None
             ) -> LinearLatencyModel:
    """A user's model: 60 periods of white-noise sleep at MPS 100, a static fit (on ``plant``,
    default a fresh one of the zoo's ``name``)."""
    plant = zoo.make_plant(name, seed=seed + 100) if plant is None else plant
    u, y = zoo.white_noise_record(plant, 60, seed=seed, statistic=statistic)
    f = fit_static(u, y)
    return LinearLatencyModel(min(f.gain, -1e-3), f.offset)


def _comparison_plant(name: str, seed: int, backend: str | None) -> Any:
    """The zoo plant a backend of the comparison runs on (module docstring)."""
    if name in BACKEND_PLANTS:
        return zoo.make_plant(name, seed=seed, backend=backend)
    restart_free = backend == "green-context+mps"
    return zoo.make_plant(name, seed=seed, restart_s=0.0 if restart_free else None)


def compare(name: str, seed: int, loads: np.ndarray) -> dict[str, dict[str, float]]:
    """The backend comparison on one plant and trace: per controller of :data:`COMPARISON`,
    training (iterations/s) and % of periods over 1.05 SLO. Each controller is built by its
    registry entry, with the model a user identifies on the plant it runs."""
    slo = SLO[name]
    ref = _comparison_plant(name, seed, None)
    ctx = B.BaselineContext(
        _base(ref), slo, None, len(loads) * T, T, identify(name, seed), 100.0,
        identify=(lambda p: identify(name, seed, plant=p)) if name in BACKEND_PLANTS else None)
    registry = {b.name: b for b in B.BASELINES}
    out = {}
    for label in COMPARISON:
        entry = registry[label]
        plant = _comparison_plant(name, seed, entry.backend)
        rec = run_loop(entry.factory(ctx), plant, len(loads), zoo.load_scenario(loads, T))
        lat = rec.col("latency_ms")
        if name == "delayed":
            lat = np.r_[lat[1:], np.nan]
        ok = np.isfinite(lat) & (lat < 1e6)
        out[label] = {"training": float(rec.col("training_iterations").sum() / (len(loads) * T)),
                      "over": 100.0 * float(np.mean(lat[ok] > 1.05 * slo))}
    return out


def run(name: str, seed: int, loads: np.ndarray, *, mode: str = "mean", error: float = 1.0,
        glitch_at: int | None = None, plant_restart_s: float | None = None,
        iteration: bool = True, **kw: Any) -> dict[str, Any]:
    """One closed-loop run; the figures of the issue."""
    model = identify(name, seed, mode)
    model = LinearLatencyModel(model.gain * error, model.offset)
    slo = SLO[name] * (1.15 if mode == "p99" else 1.0)
    plant = zoo.make_plant(name, seed=seed, restart_s=plant_restart_s)
    base = _base(plant)
    if glitch_at is not None:
        plant = zoo.GlitchPlant(plant, [glitch_at])
    if not iteration:
        plant = zoo.NoIterationPlant(plant)
    ctl = TwoTierController(model, slo, mode=mode, **kw)
    n = len(loads)
    rec = run_loop(ctl, plant, n, zoo.load_scenario(loads, T))
    lat = rec.col("latency_ms" if mode == "mean" else "p99_ms")
    if name == "delayed":
        lat = np.r_[lat[1:], np.nan]        # the period's own latency (reported one late)
    ok = np.isfinite(lat) & (lat < 1e6)
    tr = rec.col("training_iterations")
    orc = np.array([zoo.oracle_rate(base, slo, q, mode) * T for q in loads])
    changed = rec.col("mps_changed")
    return {"over": 100.0 * float(np.mean(lat[ok] > 1.05 * slo)),
            "median": 100.0 * float(np.median(np.abs(lat[ok] - slo) / slo)),
            "efficiency": float(tr.sum() / orc.sum()),
            "changes": float(changed.sum()), "changes_late": float(changed[100:].sum()),
            "mps_after_glitch": float(rec.col("next_mps_pct")[glitch_at]) if glitch_at else
            float(rec.col("next_mps_pct")[199]) if n > 199 else float("nan"),
            "training": tr, "periods_over": lat > 1.05 * slo,
            "mps": rec.col("mps_pct"), "latency": lat}


def references(name: str, seed: int, loads: np.ndarray) -> dict[str, Any]:
    """What a controller paying restarts can reach, as fractions of the per-period oracle,
    with the sleep ideal in every period: the best *fixed* MPS level over the whole run, the
    best MPS *path* chosen knowing the load in advance (upper bounds), and a *causal* policy
    that knows the plant exactly but not the future (each period it moves to the current
    load's best level when that level's gain over 50 periods exceeds 1.5 restarts). Each change
    costs the plant's restart: that long without training at the new level. Also the MPS
    level of each period on the clairvoyant path, the causal path and the oracle's."""
    plant = zoo.make_plant(name, seed=seed)
    base = _base(plant)
    slo = SLO[name]
    S, M = np.meshgrid(np.linspace(0.0, 1.0, 201), np.arange(1.0, 101.0))
    best: dict[float, np.ndarray] = {}
    rates = np.empty((len(loads), M.shape[0]))      # ideal-sleep training per period, per level
    for k, q in enumerate(loads):
        key = round(float(q), 3)
        if key not in best:
            lat = np.asarray(base.expected_latency_ms(S, M, key))
            tp = np.asarray(base.expected_training_throughput(S, M, key))
            best[key] = np.where(lat <= slo, tp, 0.0).max(axis=1) * T
        rates[k] = best[key]
    lost = base.restart_s / T                  # periods of training a change costs
    n, levels = rates.shape
    value = rates[0].copy()
    came = np.zeros((n, levels), dtype=int)
    for k in range(1, n):                      # stay, or change from the best level so far
        j = int(value.argmax())
        moved = value[j] - lost * rates[k]
        came[k] = np.where(value >= moved, np.arange(levels), j)
        value = np.maximum(value, moved) + rates[k]
    path = [int(value.argmax())]
    for k in range(n - 1, 0, -1):
        path.append(int(came[k, path[-1]]))
    level, total, down = levels - 1, 0.0, 0.0     # causal: from MPS 100
    causal = []
    for k in range(n):
        best_level = int(rates[k].argmax())
        if best_level != level and (rates[k, best_level] - rates[k, level]) * 50 > \
                1.5 * lost * rates[k, best_level]:
            level, down = best_level, lost
        use = min(down, 1.0)
        down -= use
        total += rates[k, level] * (1.0 - use)
        causal.append(level)
    oracle = sum(zoo.oracle_rate(base, slo, q) * T for q in loads)
    return {"fixed": float(rates.sum(axis=0).max() / oracle),
            "path": float(value.max() / oracle), "causal": float(total / oracle),
            "path_mps": np.array(path[::-1]) + 1.0, "causal_mps": np.array(causal) + 1.0,
            "oracle_mps": rates.argmax(axis=1) + 1.0}


def plot(path: str, seed: int = 0) -> None:
    """One trace run of the default controller per plant (seed ``seed``): its MPS path against
    the clairvoyant path, the causal reference's and the per-period oracle's level, and its
    latency / SLO with the 1.05 line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.results import save_figure

    fig, axes = plt.subplots(2, len(zoo.PLANTS), figsize=(4.2 * len(zoo.PLANTS), 6.2),
                             sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for col, name in enumerate(zoo.PLANTS):
        loads = zoo.load_trace(600, seed=seed)
        r = run(name, seed, loads)
        ref = references(name, seed, loads)
        k = np.arange(len(loads))
        top, bottom = axes[0, col], axes[1, col]
        top.plot(k, ref["oracle_mps"], color="0.8", lw=1, label="oracle (free resizes)")
        top.step(k, ref["path_mps"], where="post", color="tab:green", lw=1.5,
                 label=f"clairvoyant path ({ref['path']:.3f})")
        top.step(k, ref["causal_mps"], where="post", color="tab:orange", lw=1.2, ls="--",
                 label=f"causal, plant known ({ref['causal']:.3f})")
        top.step(k, r["mps"], where="post", color="tab:blue", lw=1.5,
                 label=f"default controller ({r['efficiency']:.3f})")
        top.set_title(name)
        top.set_ylim(0, 105)
        top.legend(fontsize=7, loc="lower left")
        lat = r["latency"] / SLO[name]
        bottom.plot(k, lat, color="tab:blue", lw=0.6)
        bottom.axhline(1.0, color="k", lw=0.8)
        bottom.axhline(1.05, color="tab:red", lw=0.8, ls=":")
        bottom.set_ylim(0.8, 1.2)
        bottom.set_xlabel("period (4 s)")
        if col == 0:
            top.set_ylabel("training MPS %")
            bottom.set_ylabel("latency / SLO")
    fig.suptitle(f"Plant zoo, synthetic trace, seed {seed}: MPS paths (in brackets: training "
                 "vs the per-period oracle) and latency")
    fig.tight_layout()
    save_figure(fig, path)


def mean_of(rows: list[dict[str, Any]], key: str) -> float:
    return float(np.mean([r[key] for r in rows]))


def bench(seeds: int) -> dict[str, Any]:
    out: dict[str, Any] = {"trace": {}, "steady": {}, "step": {}, "errors": {}, "glitch": {},
                           "p99": {}, "told": {}, "bound": {}, "free": {}, "partitions": {},
                           "partition_bound": {}, "no_iteration": {}, "compare": {}}
    for name in zoo.PLANTS:
        rows_c = [compare(name, s, zoo.load_trace(600, seed=s)) for s in range(seeds)]
        out["compare"][name] = {c: {k: float(np.mean([r[c][k] for r in rows_c]))
                                    for k in ("training", "over")} for c in COMPARISON}
        for label, kw in CONTROLLERS.items():
            rows = [run(name, s, zoo.load_trace(600, seed=s), **kw) for s in range(seeds)]
            out["trace"][(name, label)] = {k: mean_of(rows, k) for k in
                                           ("over", "median", "efficiency", "changes")}
        refs = [references(name, s, zoo.load_trace(600, seed=s)) for s in range(seeds)]
        out["bound"][name] = {k: mean_of(refs, k) for k in ("fixed", "path", "causal")}
        # a restart-free share (a green context, a CPU quota): plant and controller told
        for every in FREE_EVERY:
            rows = [run(name, s, zoo.load_trace(600, seed=s), plant_restart_s=0.0,
                        restart_s=0.0, outer_every=every) for s in range(seeds)]
            out["free"][(name, every)] = {k: mean_of(rows, k) for k in
                                          ("over", "median", "efficiency", "changes")}
            rows = [run(name, s, zoo.load_trace(600, seed=s), plant_restart_s=0.0,
                        restart_s=0.0, outer_every=every, mps_levels_pct=PARTITIONS)
                    for s in range(seeds)]
            out["partitions"][(name, every)] = {k: mean_of(rows, k) for k in
                                                ("over", "median", "efficiency", "changes")}
        # what the partitions allow at best: the per-period oracle held to them
        ratios = []
        for s in range(seeds):
            base = _base(zoo.make_plant(name, seed=s))
            loads = zoo.load_trace(600, seed=s)
            held = sum(zoo.oracle_rate(base, SLO[name], q, levels_pct=PARTITIONS) for q in loads)
            ratios.append(held / sum(zoo.oracle_rate(base, SLO[name], q) for q in loads))
        out["partition_bound"][name] = float(np.mean(ratios))
        rows = [run(name, s, np.ones(500)) for s in range(seeds)]
        # evaluations after period 100: (500 - 100) / 25 = 16
        out["steady"][name] = {"per10": mean_of(rows, "changes_late") / 16 * 10,
                               "median": mean_of(rows, "median"),
                               "efficiency": mean_of(rows, "efficiency")}
        step = np.r_[np.ones(100), np.full(200, STEP[name])]
        rows = [run(name, s, step) for s in range(seeds)]
        rec_p = []
        for r in rows:
            over = r["periods_over"][100:]
            rec_p.append(float(np.flatnonzero(over)[-1] + 1) if over.any() else 0.0)
        out["step"][name] = {"over": mean_of(rows, "over"), "last_over": max(rec_p),
                             "efficiency": mean_of(rows, "efficiency")}
        for err in (0.3, 3.0):
            rows = [run(name, s, zoo.load_trace(600, seed=s), error=err) for s in range(seeds)]
            out["errors"][(name, err)] = {k: mean_of(rows, k) for k in
                                          ("over", "median", "efficiency")}
        costs, moved = [], 0
        for s in range(seeds):
            loads = np.ones(600)
            a = run(name, s, loads)
            b = run(name, s, loads, glitch_at=199)
            costs.append(100.0 * (1.0 - b["training"][200:].sum() / a["training"][200:].sum()))
            moved += int(b["mps_after_glitch"] != a["mps_after_glitch"])
        out["glitch"][name] = {"mean": float(np.mean(costs)), "worst": max(costs),
                               "moved": moved}
        rows = [run(name, s, zoo.load_trace(600, seed=s), mode="p99") for s in range(seeds)]
        out["p99"][name] = {k: mean_of(rows, k) for k in ("over", "median", "efficiency")}
        # the restart's real duration told, as the daemon's actuator measures it
        told = {"restart_s": zoo.make_plant(name, seed=0).restart_s}
        rows = [run(name, s, zoo.load_trace(600, seed=s), **told) for s in range(seeds)]
        st = [run(name, s, np.ones(500), **told) for s in range(seeds)]
        out["told"][name] = {**{k: mean_of(rows, k) for k in ("over", "median", "efficiency")},
                             "per10": mean_of(st, "changes_late") / 16 * 10}
        # no iteration time reported; then only the one given at start (no readings)
        for given in (False, True):
            kw = {"iteration_time_s": float(_base(zoo.make_plant(name, seed=0)).iteration_s(
                100.0))} if given else {}
            rows = [run(name, s, zoo.load_trace(600, seed=s), iteration=False, **kw)
                    for s in range(seeds)]
            st = [run(name, s, np.ones(500), iteration=False, **kw) for s in range(seeds)]
            out["no_iteration"][(name, given)] = {
                **{k: mean_of(rows, k) for k in ("over", "median", "efficiency")},
                "steady": mean_of(st, "efficiency")}
    return out


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def report(res: dict[str, Any], seeds: int, elapsed: float) -> str:
    P = zoo.PLANTS
    lines = [f"## Control quality on the plant zoo ({_dt.date.today().isoformat()})", "",
             f"`python benchmarks/control_quality.py --seeds {seeds}` — python "
             f"{platform.python_version()}, {seeds} seeds per figure, {elapsed:.0f} s on 1 core. "
             "Each plant identified by 60 periods of white-noise sleep at MPS 100 and "
             "`sysid.fit_static`; 600 periods (40 min) of synthetic production-like load "
             "(slow ±12 % swing, 2 % AR(1) jitter) unless stated. \"delayed\" is the hyperbolic "
             "plant reporting every reading one period late; the controller is not told. "
             "\"queue\" (added 2026-11-25, after the guard threshold was chosen on the other "
             "four) has a latency convex in the training's footprint.", "",
             "Default controller (`TwoTierController(model, slo)`), against the issue's targets:",
             "", "| figure | target | " + " | ".join(P) + " | verdict |",
             "|---|---|" + "---|" * len(P) + "---|"]

    def row(label: str, target: str, vals: list[float], fmt: str, ok: list[bool]) -> None:
        lines.append(f"| {label} | {target} | " + " | ".join(fmt.format(v) for v in vals)
                     + f" | {verdict(all(ok))} |")

    tr = [res["trace"][(p, "default")] for p in P]
    row("% periods > 1.05 SLO (trace)", "≤ 2 % (≤ 3 % delayed)", [t["over"] for t in tr],
        "{:.2f} %", [t["over"] <= (3.0 if p == "delayed" else 2.0) for p, t in zip(P, tr)])
    row("median \\|l − SLO\\|/SLO (trace)", "≤ 1 %", [t["median"] for t in tr], "{:.2f} %",
        [t["median"] <= 1.0 for t in tr])
    row("training vs per-period oracle (trace)", "≥ 0.95", [t["efficiency"] for t in tr],
        "{:.3f}", [t["efficiency"] >= 0.95 for t in tr])
    bd = [res["bound"][p] for p in P]
    lines.append("| … references, sleep ideal every period: best fixed MPS / best MPS path "
                 "paying each restart, load known in advance / a causal policy knowing the "
                 "plant exactly (greedy, 50-period horizon) | — | " + " | ".join(
                     f"{b['fixed']:.3f} / {b['path']:.3f} / {b['causal']:.3f}" for b in bd)
                 + " | |")
    st = [res["steady"][p] for p in P]
    row("MPS changes per 10 outer evaluations, steady load", "≤ 1", [s["per10"] for s in st],
        "{:.2f}", [s["per10"] <= 1.0 for s in st])
    row("median \\|l − SLO\\|/SLO, steady load", "≤ 1 %", [s["median"] for s in st],
        "{:.2f} %", [s["median"] <= 1.0 for s in st])
    row("training vs oracle, steady load", "≥ 0.95", [s["efficiency"] for s in st], "{:.3f}",
        [s["efficiency"] >= 0.95 for s in st])
    gl = [res["glitch"][p] for p in P]
    row("training lost to one 1e12 ms reading (next 400 periods, steady load, mean of seeds)",
        "≤ 1 %", [g["mean"] for g in gl], "{:.2f} %", [g["mean"] <= 1.0 for g in gl])
    lines.append("| … worst seed / runs where the glitch period's MPS decision differed | — | "
                 + " | ".join(f"{g['worst']:.2f} % / {g['moved']}" for g in gl) + " | |")
    pp = [res["p99"][p] for p in P]
    row("p99 mode: % periods > 1.05 p99 SLO (trace)", "≤ 3 %", [p["over"] for p in pp],
        "{:.2f} %", [p["over"] <= 3.0 for p in pp])
    lines.append("| p99 mode: training vs p99 oracle (trace) | — | " + " | ".join(
        f"{p['efficiency']:.3f}" + (" ¹" if n == "ours" else "") for n, p in zip(P, pp))
        + " | |")
    sp = [res["step"][p] for p in P]
    step_cells = " | ".join(f"{s['over']:.1f} % / {s['last_over']:.0f}" for s in sp)
    lines.append("| load step at period 100 (+10 % ours, +30 % others): % periods over / last "
                 f"period over after the step | — | {step_cells} | |")
    td = [res["told"][p] for p in P]
    lines.append("| restart duration told (the plant's own, 7 s on \"ours\" and 10 s on the "
                 "others, as the daemon measures it): % over / "
                 "median / training vs oracle (trace); MPS changes per 10 evaluations (steady) "
                 "| — | " + " | ".join(f"{x['over']:.1f} % / {x['median']:.2f} % / "
                                      f"{x['efficiency']:.3f}; {x['per10']:.2f}" for x in td)
                 + " | |")
    for given, what in ((False, "no iteration time (a node without the hook, or a harness "
                                 "passing only latency readings; the loop assumes 0.5 s and "
                                 "beta 1)"),
                        (True, "… the plant's iteration time at MPS 100 given at start "
                               "(`iteration_time_s`), no readings")):
        ni = [res["no_iteration"][(p, given)] for p in P]
        lines.append(f"| {what}: % over / median / training vs oracle (trace); training "
                     "(steady) | — | " + " | ".join(
                         f"{x['over']:.1f} % / {x['median']:.2f} % / {x['efficiency']:.3f}; "
                         f"{x['steady']:.3f}" for x in ni) + " | |")
    for every in FREE_EVERY:
        fr = [res["free"][(p, every)] for p in P]
        lines.append(f"| restart-free share (plant and controller `restart_s=0`), "
                     f"`outer_every={every}`: % over / median / training vs oracle (trace); "
                     "share changes in 600 periods | — | " + " | ".join(
                         f"{x['over']:.1f} % / {x['median']:.2f} % / {x['efficiency']:.3f}; "
                         f"{x['changes']:.0f}" for x in fr) + " | |")
    for every in FREE_EVERY:
        fr = [res["partitions"][(p, every)] for p in P]
        ok = [x["over"] <= (3.0 if p == "delayed" else 2.0) for p, x in zip(P, fr)]
        lines.append(f"| four restart-free partitions (25/50/75/100, `mps_levels_pct`), "
                     f"`outer_every={every}`: % over / median / training vs oracle (trace); "
                     "share changes in 600 periods | ≤ 2 % over (≤ 3 % delayed) | " + " | ".join(
                         f"{x['over']:.1f} % / {x['median']:.2f} % / {x['efficiency']:.3f}; "
                         f"{x['changes']:.0f}" for x in fr) + f" | {verdict(all(ok))} (over) |")
    lines.append("| … reference: the per-period oracle held to the four partitions (resizes free), "
                 "as a fraction of the unrestricted one | — | " + " | ".join(
                     f"{res['partition_bound'][p]:.3f}" for p in P) + " | |")
    for err in (0.3, 3.0):
        e = [res["errors"][(p, err)] for p in P]
        lines.append(f"| model gain x{err:g}: % over / median / training vs oracle | — | "
                     + " | ".join(f"{x['over']:.1f} % / {x['median']:.2f} % / "
                                  f"{x['efficiency']:.3f}" for x in e) + " | |")
    lines += ["", "Backend comparison (same SLO, same trace; target: at least 1.5x the "
              "training of sleep only at ≤ 2 % of periods over 1.05 SLO): training it/s "
              "(% periods over)", "",
              "| backend | " + " | ".join(P) + " |", "|---|" + "---|" * len(P)]
    for c in COMPARISON:
        lines.append(f"| {c} | " + " | ".join(
            f"{res['compare'][p][c]['training']:.3f} ({res['compare'][p][c]['over']:.1f} %)"
            for p in P) + " |")
    ratio = {p: res["compare"][p][COMPARISON[2]]["training"]
             / max(res["compare"][p][COMPARISON[0]]["training"], 1e-9) for p in P}
    met = [ratio[p] >= 1.5 and res["compare"][p][COMPARISON[2]]["over"] <= 2.0 for p in P]
    lines.append("| green context + MPS / sleep only (target ≥ 1.5x at ≤ 2 % over) | "
                 + " | ".join(f"{ratio[p]:.2f}x, {verdict(m)}" for p, m in zip(P, met)) + " |")
    lines += ["", "¹ the \"ours\" plant's noise-free p99 view is a 1.1x-mean approximation, so "
              "its p99 oracle is only indicative.", "",
              "All three controllers on the trace (% periods > 1.05 SLO / median "
              "\\|l − SLO\\|/SLO / training vs oracle / MPS changes in 600 periods):", "",
              "| controller | " + " | ".join(P) + " |", "|---|" + "---|" * len(P)]
    for label in CONTROLLERS:
        cells = []
        for p in P:
            t = res["trace"][(p, label)]
            cells.append(f"{t['over']:.1f} % / {t['median']:.2f} % / {t['efficiency']:.3f} / "
                         f"{t['changes']:.0f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=integer(1, 1000), default=8,
                    help="plant seeds per figure (default 8: at 2 a verdict can be luck)")
    # an unwritable place is refused before the minute of runs
    ap.add_argument("--out", type=out_file, default=None,
                    help="also write the table to this Markdown file")
    ap.add_argument("--plot", type=out_file, default=None, metavar="PNG",
                    help="also draw seed 0's trace runs (MPS paths against the references, "
                         "latency / SLO) into this PNG")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = bench(args.seeds)
    text = report(res, args.seeds, time.perf_counter() - t0)
    print(text)
    if args.plot:
        plot(args.plot)
        print(f"Figure: {args.plot}")
    if args.out:
        from harness.results import atomic_write_text

        atomic_write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
