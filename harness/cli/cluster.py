"""``gpucontrol cluster``: trace-driven cluster simulation (Fig. 12 and 13).

After the GPUColo paper (Chen et al., ICDCS 2024), Sec. VIII.

    gpucontrol cluster --trace openb --policy all
    gpucontrol cluster --trace pai pai_task_table.csv --policy gslice,gpucolo --placement kace
    gpucontrol cluster --trace synthetic --days 57 --scale 3000 --ratios 1,2,3,4,5
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from harness.args import (
    DefaultsHelpFormatter,
    UsageError,
    check_out_dir,
    number,
    number_list,
    out_dir,
    seed,
)
from harness.cluster.engine import GpuType, SimConfig, Simulation
from harness.cluster.figures import (
    daily_rows,
    format_table,
    plot_fig12,
    plot_fig13a,
    plot_fig13b,
    summary_rows,
    write_rows,
)
from harness.cluster.placement import PLACEMENTS
from harness.cluster.policies import POLICIES, ControlParams, PlantParams
from harness.cluster.synthetic import SyntheticConfig, inference_burst, synthetic, with_ratio
from harness.cluster.traces import (
    OPENB_NODES,
    OPENB_PODS,
    Trace,
    load_gpu_mix,
    load_openb,
    load_pai,
)
from harness.progress import Progress

DEFAULT_POLICIES = "nocolo,separate,gslice,gpucolo"

#: The files a run writes into --out (which may hold others: they are kept). Each run
#: replaces these as a set: one without --ratios leaves no ratio.csv of an earlier run.
FILES = ("summary.csv", "daily.csv", "fig12_gpus.png", "fig13a_violation.png", "ratio.csv",
         "fig13b_ratio.png")

#: rough relative speed and memory of the openb node list's GPU models (G2/G3 are Alibaba
#: in-house names with no public data: taken as V100-class)
OPENB_GPU_SPECS = {"P100": (0.65, 16.0), "T4": (0.6, 16.0), "V100M16": (1.0, 16.0),
                   "V100M32": (1.0, 32.0), "A10": (1.1, 24.0), "G2": (1.0, 32.0),
                   "G3": (1.0, 32.0)}


#: Defaults of the flags whose default depends on others (None in the parser: "not given").
BURST_DAYS, SYNTHETIC_DAYS, SYNTHETIC_SCALE = (20.0, 40.0), 57.0, 3000.0

DESCRIPTION = ("Trace-driven cluster simulation (GPUColo paper, Sec. VIII, Figs. 12 and 13): "
               "place a trace's inference and training tasks on GPUs under each co-location "
               "policy and placement, and report the GPUs used and the SLO violations.")


def register(sub) -> None:
    p = sub.add_parser("cluster", help="trace-driven cluster simulation (Fig 12/13)",
                       description=DESCRIPTION, formatter_class=DefaultsHelpFormatter)
    p.add_argument("--trace", nargs="+", default=["openb"], metavar="KIND_OR_FILE",
                   help="openb [POD_CSV] | pai FILE | synthetic")
    p.add_argument("--policy", default=DEFAULT_POLICIES,
                   help=f"comma list of {', '.join(POLICIES)}, or 'all'")
    p.add_argument("--placement", default="first-fit",
                   help=f"comma list of {', '.join(PLACEMENTS)}, or 'all'")
    p.add_argument("--no-burst", action="store_true",
                   help="do not duplicate the inference tasks of the burst days")
    p.add_argument("--burst-days", type=number(0, 3650), nargs=2, default=None,
                   metavar=("START", "END"),
                   help=f"days of the inference burst, 0 <= START < END, START inside the "
                        f"trace (default {BURST_DAYS[0]:g} {BURST_DAYS[1]:g}; not with "
                        f"--no-burst)")
    p.add_argument("--window", type=number(0, 3650), nargs=2, default=None,
                   metavar=("START_DAY", "DAYS"),
                   help="simulate only tasks arriving in this window (re-based to day 0); "
                        "DAYS > 0 and the window must hold tasks")
    p.add_argument("--days", type=number(0, 3650, lo_open=True), default=None,
                   help=f"--trace synthetic only: trace length in days, (0, 3650] (default "
                        f"{SYNTHETIC_DAYS:g})")
    p.add_argument("--scale", type=number(0, 100000, lo_open=True), default=None,
                   help=f"--trace synthetic only: mean busy GPUs under No Co-location, "
                        f"(0, 100000] (default {SYNTHETIC_SCALE:g})")
    p.add_argument("--seed", type=seed, default=0, help="random seed, 0..2^32-1")
    p.add_argument("--ratios", type=number_list(0, 100, lo_open=True, example="1,2,3,4,5"),
                   default=None,
                   help="comma list of inference:training ratios for Fig 13b (GSLICE, "
                        "GPUColo), each in (0, 100] and none twice, swept with the first "
                        "--placement (default: no ratio sweep)")
    p.add_argument("--slo-factor", type=number(0, 2, lo_open=True), default=0.96,
                   help="SLO as a multiple of the task's solo time, (0, 2]")
    p.add_argument("--slo-mode", choices=("rate", "deadline"), default="rate")
    p.add_argument("--max-speedup", type=number(1, 10), default=PlantParams.max_speedup,
                   help="[1, 10]")
    p.add_argument("--interference", type=number(0, 10), default=PlantParams.interference,
                   help="[0, 10]")
    p.add_argument("--gain", choices=("scheduled", "fixed"), default="scheduled")
    p.add_argument("--gpus", choices=("homogeneous", "openb"), default="homogeneous",
                   help="GPU pool: one type (speed 1, 32 GB) or the openb node list's mix")
    p.add_argument("--out", type=out_dir, default="results/cluster", help="output folder")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run, results=lambda a: (Path(a.out), FILES))


def _list(arg: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = list(allowed) if arg == "all" else [x.strip() for x in arg.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise UsageError(f"unknown {what} {', '.join(bad) or '(none)'}; choose from "
                         f"{', '.join(allowed)} or 'all'")
    return items


def check_trace(spec: list[str]) -> None:
    """Refuse a ``--trace`` that names no known kind or has the wrong number of files."""
    kind = spec[0]
    if kind == "openb":
        if len(spec) > 2:
            raise UsageError("--trace openb takes at most one file")
    elif kind == "pai":
        if len(spec) != 2:
            raise UsageError("--trace pai needs the pai_task_table file: --trace pai FILE")
    elif kind == "synthetic":
        if len(spec) != 1:
            raise UsageError(f"--trace synthetic takes no file, got "
                             f"{' '.join(map(repr, spec[1:]))}")
    else:
        raise UsageError(f"unknown trace {kind!r}; use openb [FILE], pai FILE or synthetic")


def load_trace(spec: list[str], args) -> Trace:
    check_trace(spec)
    kind = spec[0]
    if kind == "openb":
        return load_openb(spec[1] if len(spec) > 1 else OPENB_PODS, seed=args.seed)
    if kind == "pai":
        return load_pai(spec[1], seed=args.seed)
    return synthetic(SyntheticConfig(days=args.days, target_gpus=args.scale, seed=args.seed))


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that contradict each other or would do nothing, before anything runs;
    then fill in the defaults that depend on other flags."""
    check_trace(args.trace)
    if args.no_burst and args.burst_days is not None:
        raise UsageError(f"--burst-days {args.burst_days[0]:g} {args.burst_days[1]:g} and "
                         f"--no-burst contradict each other; give one of them")
    kind = args.trace[0]
    if kind != "synthetic":
        for flag, v in (("--days", args.days), ("--scale", args.scale)):
            if v is not None:
                raise UsageError(f"{flag} {v:g} is for --trace synthetic only; the {kind} "
                                 f"trace has its own length and size")
    args.burst_given = args.burst_days is not None
    if args.burst_days is None:
        args.burst_days = BURST_DAYS
    if args.days is None:
        args.days = SYNTHETIC_DAYS
    if args.scale is None:
        args.scale = SYNTHETIC_SCALE
    if args.window and args.window[1] <= 0:
        raise UsageError(f"--window {args.window[0]:g} {args.window[1]:g}: DAYS must be > 0")
    _check_burst(args, None)


def _check_burst(args: argparse.Namespace, trace: Trace | None) -> None:
    """Refuse ``--burst-days`` with START >= END, or starting after the trace's nominal
    length: the window, the synthetic ``--days``, else the (loaded) trace's last arrival; with
    ``trace`` None, only what the flags alone decide (before anything is loaded)."""
    if args.no_burst:
        return
    a, b = float(args.burst_days[0]), float(args.burst_days[1])
    if not a < b:
        raise UsageError(f"--burst-days {a:g} {b:g}: START must be before END")
    span = (args.window[1] if args.window else args.days if args.trace[0] == "synthetic"
            else None if trace is None else trace.days)
    if span is not None and a >= span:
        if getattr(args, "burst_given", True):
            raise UsageError(f"--burst-days {a:g} {b:g} start after the trace's {span:.3g} "
                             f"days: give START in [0, {span:.3g}) or --no-burst")
        raise UsageError(f"the default --burst-days {a:g} {b:g} start after the trace's "
                         f"{span:.3g} days: give --burst-days START END with START in "
                         f"[0, {span:.3g}), or --no-burst")


def gpu_pool(name: str) -> tuple[GpuType, ...]:
    if name == "homogeneous":
        return (GpuType("default"),)
    mix = load_gpu_mix(OPENB_NODES)
    out = []
    for model, n in sorted(mix.items()):
        speed, mem = OPENB_GPU_SPECS.get(model, (1.0, 32.0))
        out.append(GpuType(model, speed, mem, max(1, round(n / 10))))
    return tuple(out)


def _simulate(trace: Trace, cfg: SimConfig, label: str, show: bool | None):
    with Progress(1000, label, enabled=show) as bar:
        def cb(frac: float) -> None:
            bar.advance(int(frac * 1000) - bar.done)
        return Simulation(trace, cfg).run(progress=cb)


def _prepare(args: argparse.Namespace) -> tuple[Trace, tuple[float, float] | None]:
    """Load the trace, window it and add the inference burst; print what was loaded."""
    t0 = time.perf_counter()
    trace = load_trace(args.trace, args)
    if trace.report is not None:
        print(trace.report.summary())
    if not len(trace):
        raise UsageError(f"--trace {' '.join(args.trace)}: the trace holds no tasks")
    if args.window:
        start, days = args.window
        full = trace.days
        trace = trace.window(start, days)
        if not len(trace):
            raise UsageError(f"--window {start:g} {days:g} holds no tasks: the trace spans "
                             f"days 0..{full:.1f}")
    _check_burst(args, trace)
    burst = None if args.no_burst else (float(args.burst_days[0]), float(args.burst_days[1]))
    if burst:
        trace = inference_burst(trace, *burst)
    c = trace.counts()
    print(f"trace {trace.name}: {len(trace)} per-GPU tasks ({c['inference']} inference, "
          f"{c['training']} training) over {trace.days:.1f} days; loaded in "
          f"{time.perf_counter() - t0:.1f} s")
    return trace, burst


def _pct(x: float) -> str:
    """A rate as a percentage; n/a when it is undefined (no inference task to rate)."""
    return f"{100 * x:.1f} %" if math.isfinite(x) else "n/a"


def _gpucolo_line(r: dict) -> str:
    """One summary row of GPUColo against the paper's numbers."""
    parts = [f"GPUColo ({r['placement']}):"]
    if math.isfinite(r["saved_vs_nocolo"]):
        parts.append(f"saves {100 * r['saved_vs_nocolo']:.1f} % of GPUs vs No "
                     "Co-location (paper 74.9 %);")
    if math.isfinite(r["saved_vs_gslice"]):
        parts.append(f"saves {100 * r['saved_vs_gslice']:.1f} % vs GSLICE "
                     "(paper 50.2 %);")
    parts.append(f"SLO violation {_pct(r['violation_rate'])} (paper 1.1 %, GSLICE 27.2 %)")
    return " ".join(parts)


def _ratio_sweep(trace: Trace, ratios: list[float], placement: str, base: dict, seed: int,
                 show: bool | None) -> list[dict]:
    """Fig. 13b: GSLICE and GPUColo at each inference:training ratio."""
    rrows = []
    for ratio in ratios:
        tr = with_ratio(trace, ratio, seed=seed)
        for pol in ("gslice", "gpucolo"):
            cfg = SimConfig(policy=pol, placement=placement, **base)
            r = _simulate(tr, cfg, f"{pol} {ratio:g}:1", show)
            rrows.append({"ratio": ratio, "policy": pol, "placement": placement,
                          "violation_rate": r.violation_rate, "mean_gpus": r.mean_gpus})
            print(f"ratio {ratio:g}:1 {pol:8s} violation {_pct(r.violation_rate):>7s} "
                  f"mean GPUs {r.mean_gpus:.1f}")
    return rrows


#: GPU-days of the synthetic benchmark (57 days at scale 3000) and the wall time of its
#: slowest policy run, GPUColo, in BENCHMARKS.md.
BENCH_GPU_DAYS, BENCH_WALL_S = 57 * 3000.0, 54.0


def _warn_if_long(gpu_days: float, runs: int) -> None:
    """Say up front when a synthetic run will take minutes (estimated from the benchmark)."""
    est = BENCH_WALL_S * gpu_days / BENCH_GPU_DAYS * runs
    if est > 60.0:
        print(f"gpucontrol cluster: note: {gpu_days:.3g} GPU-days x {runs} policy runs; "
              f"expect up to about {est / 60:.0f} min (the 57-day, scale-3000 benchmark takes "
              f"up to {BENCH_WALL_S:.0f} s per run)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    _check_flags(args)
    policies = _list(args.policy, POLICIES, "policy")
    placements = _list(args.placement, PLACEMENTS, "placement")
    ratios = list(args.ratios or [])
    show: bool | None = False if args.no_progress else None  # None: bar or lines
    out = check_out_dir(args.out)
    if args.trace[0] == "synthetic":     # (each ratio of Fig 13b runs GSLICE and GPUColo)
        _warn_if_long(args.days * args.scale, len(policies) * len(placements) + 2 * len(ratios))
    trace, burst = _prepare(args)
    c = trace.counts()
    if ratios and not (c["inference"] and c["training"]):
        raise UsageError(f"--ratios needs a trace with both inference and training tasks; "
                         f"this one has {c['inference']} inference and {c['training']} "
                         f"training")
    base = {"plant": PlantParams(max_speedup=args.max_speedup, interference=args.interference),
            "control": ControlParams(gain=args.gain), "slo_factor": args.slo_factor,
            "slo_mode": args.slo_mode, "gpu_types": gpu_pool(args.gpus), "seed": args.seed}
    results = []
    for placement in placements:
        for pol in policies:
            if pol == "nocolo" and placement != placements[0]:
                continue  # nothing to place: one job per GPU
            cfg = SimConfig(policy=pol, placement=placement, **base)
            results.append(_simulate(trace, cfg, f"{pol}/{placement}", show))
    rows = summary_rows(results, burst)
    print(format_table(rows))
    for r in rows:
        if r["policy"] == "gpucolo":
            print(_gpucolo_line(r))
    files = [write_rows(rows, out / "summary.csv"),
             write_rows(daily_rows(results), out / "daily.csv"),
             plot_fig12(results, out / "fig12_gpus.png", burst),
             plot_fig13a(results, out / "fig13a_violation.png", burst)]
    if ratios:
        rrows = _ratio_sweep(trace, ratios, placements[0], base, args.seed, show)
        files += [write_rows(rrows, out / "ratio.csv"),
                  plot_fig13b(rrows, out / "fig13b_ratio.png")]
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
