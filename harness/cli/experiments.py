"""``gpucontrol demo | knobs | burst | sweep`` — registered in :data:`harness.cli.COMMAND_MODULES`.

Each subcommand takes ``--plant {sim,gpu}`` (default ``sim``), ``--seed``, ``--out`` and a
duration; results go to ``<out>/<experiment>/`` as CSV, PNG, a Markdown summary and JSON
metadata.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["register"]


def _common(p: argparse.ArgumentParser, *, duration: float, out: str = "results",
            plants: tuple[str, ...] = ("sim", "gpu")) -> None:
    p.add_argument("--plant", choices=plants, default="sim",
                   help="simulated plant (default) or the real GPU (needs the GPU harness)"
                        + ("; cpu: the whole pipeline (identify, model.json, the daemon "
                           "process, a load burst) on real processes sharing this machine's "
                           "CPUs" if "cpu" in plants else ""))
    p.add_argument("--seed", type=int, default=0, help="random seed of the plant (default 0)")
    p.add_argument("--out", default=out, help=f"output folder (default ./{out})")
    p.add_argument("--duration", type=float, default=duration,
                   help=f"seconds per run (default {duration:g})")
    p.add_argument("--period", type=float, default=None, help="control period in s")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def preset_arg(text: str) -> str:
    """argparse type of ``--preset``: a named preset or a calibration file (checked now)."""
    from harness.sim.simulated import preset_overrides

    try:
        preset_overrides(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_preset(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--preset", type=preset_arg, default=default,
                   help=f"plant preset: fig4, fig8 or a calibration.json written by "
                        f"'gpucontrol calibrate' (default {default}); with --plant gpu the "
                        f"hardware is set up by the named preset (a calibration's base)")


def _pair(kind: type) -> Callable[[str], tuple[Any, Any]]:
    def parse(text: str) -> tuple[Any, Any]:
        parts = [x for x in text.replace(",", " ").split() if x]
        if len(parts) != 2:
            raise argparse.ArgumentTypeError(f"expected two values 'A,B', got {text!r}")
        try:
            return kind(parts[0]), kind(parts[1])
        except ValueError:
            raise argparse.ArgumentTypeError(f"not two {kind.__name__}s: {text!r}") from None
    return parse


def _floats(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.replace(",", " ").split() if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 75,80,85, got {text!r}") \
            from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one number")
    return vals


def _progress(args: argparse.Namespace) -> bool | None:
    return False if args.no_progress else None


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from harness.experiments.common import PlantUnavailable

        try:
            return fn(args)
        except PlantUnavailable as exc:
            print(f"gpucontrol {args.command}: {exc}", file=sys.stderr)
            return 3
    return run


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.plant == "cpu":
        return _cmd_demo_cpu(args)
    from harness.experiments.demo import demo

    try:
        preset_arg(args.preset)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"--preset: {exc}") from None

    kw = {"period_s": args.period} if args.period else {}
    demo(out_dir=args.out, seed=args.seed, duration_s=args.duration, plant=args.plant,
         preset=args.preset, progress=_progress(args), **kw)
    return 0


def _cmd_demo_cpu(args: argparse.Namespace) -> int:
    from harness.experiments.pipeline import run_pipeline

    period = args.period or 2.0
    closed = max(20, round((args.duration if args.duration != 400.0 else 120.0) / period))
    res = run_pipeline(args.out, preset="default" if args.preset == "fig8" else args.preset,
                       period_s=period, closed_periods=closed, slo_ms=args.slo,
                       progress=not args.no_progress)
    print(f"SLO {res['slo_choice']}")
    print(f"identification R² {res['identify_r2']:.2f} (held-out "
          f"{res['identify_r2_validation']:.2f}); closed loop over {res['closed_periods']} "
          f"periods: median |l - SLO|/SLO {res['median_abs_err_pct']} %, periods over "
          f"1.05 SLO {res['over_105_pct']} %, training {res['training_it_per_period']} "
          f"iterations per period; {res['wall_s']:.0f} s in all")
    print("Results: " + ", ".join(res["files"]))
    return 0 if res["daemon_exit"] == 0 else 1


def _cmd_burst(args: argparse.Namespace) -> int:
    from harness.experiments.burst import burst
    from harness.experiments.demo import format_table

    kw = {"period_s": args.period} if args.period else {}
    res = burst(plant=args.plant, preset=args.preset, seed=args.seed,
                duration_s=args.duration, slo_ms=args.slo,
                burst_s=args.burst, batches=args.batch, controllers=args.controllers,
                out_dir=Path(args.out) / "burst", progress=_progress(args),
                relative_slo=args.relative_slo, **kw)
    if args.relative_slo:
        print(f"SLO {args.slo:g} ms on the RTX 3090 preset -> {res.meta['slo_ms']:.1f} ms on "
              f"{args.preset} (latency range {res.meta['latency_range_ms'][0]:.1f}.."
              f"{res.meta['latency_range_ms'][1]:.1f} ms)")
    print(format_table(res))
    print("Results: " + ", ".join(str(f) for f in res.files))
    return 0


def _cmd_knobs(args: argparse.Namespace) -> int:
    from harness.experiments.knobs import knobs
    from harness.results import markdown_table

    res = knobs(plant=args.plant, preset=args.preset, seed=args.seed, duration_s=args.duration,
                change_s=args.change, period_s=args.period or 1.0,
                out_dir=Path(args.out) / "knobs", progress=_progress(args))
    print(markdown_table(res.summary, ("run", "phase", "latency_ms", "paper_latency_ms",
                                       "sm_pct", "paper_sm_pct"), digits=2))
    print("Results: " + ", ".join(str(f) for f in res.files))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from harness.experiments.slo_sweep import DEFAULT_SWEEP_CONTROLLERS, SUMMARY_COLUMNS, slo_sweep
    from harness.results import markdown_table

    kw = {"period_s": args.period} if args.period else {}
    res = slo_sweep(plant=args.plant, preset=args.preset, seed=args.seed, slos=args.slos,
                    duration_s=args.duration,
                    batch=args.batch, warmup_s=min(args.warmup, 0.5 * args.duration),
                    controllers=args.controllers or DEFAULT_SWEEP_CONTROLLERS,
                    out_dir=Path(args.out) / "slo_sweep", progress=_progress(args),
                    relative_slo=args.relative_slo, **kw)
    print(markdown_table(res.summary, SUMMARY_COLUMNS, digits=2))
    print("Results: " + ", ".join(str(f) for f in res.files))
    return 0


def register(sub: Any) -> None:
    """Add the experiment subcommands to the ``gpucontrol`` parser."""
    p = sub.add_parser("demo", help="burst experiment on the simulated plant, with a summary",
                       description="Run the burst experiment (GPUColo paper, Fig. 8) on the "
                       "simulated "
                                   "plant and print, per controller, latency, SLO violations and "
                                   "throughputs. Results go to ./results/burst/.")
    _common(p, duration=400.0, plants=("sim", "gpu", "cpu"))
    p.add_argument("--preset", default="fig8",
                   help="plant preset: fig4, fig8 or a calibration.json (sim, gpu); default "
                        "or small (cpu)")
    p.add_argument("--slo", type=float, default=None,
                   help="--plant cpu: the SLO in ms (default: chosen inside the identified "
                        "latency range)")
    p.set_defaults(func=_guard(_cmd_demo))

    p = sub.add_parser("knobs", help="MPS vs Sleep vs Sleep+MPS (GPUColo paper, Fig. 4)")
    _common(p, duration=60.0)
    add_preset(p, "fig4")
    p.add_argument("--change", type=_pair(float), default=(20.0, 40.0),
                   help="times of the reduce and restore steps, s (default 20,40)")
    p.set_defaults(func=_guard(_cmd_knobs))

    p = sub.add_parser("burst", help="inference burst under every controller "
                                      "(GPUColo paper, Fig. 8)")
    _common(p, duration=400.0)
    add_preset(p, "fig8")
    p.add_argument("--slo", type=float, default=90.0, help="latency SLO in ms (default 90)")
    p.add_argument("--relative-slo", action="store_true",
                   help="read the SLO as one stated for the paper's RTX 3090 (the fig8 preset) and "
                        "move it to the same place in --preset's latency range (for a preset "
                        "calibrated on another GPU)")
    p.add_argument("--burst", type=_pair(float), default=(90.0, 290.0),
                   help="burst start,end in s (default 90,290)")
    p.add_argument("--batch", type=_pair(int), default=(105, 115),
                   help="normal,burst batch size (default 105,115)")
    p.add_argument("--controllers", default=None,
                   help="comma-separated subset, e.g. 'gslice,two-tier,ours,oracle'")
    p.set_defaults(func=_guard(_cmd_burst))

    p = sub.add_parser("sweep", help="SLO sweep 75..95 ms (GPUColo paper, Fig. 9)")
    _common(p, duration=400.0)
    add_preset(p, "fig8")
    p.add_argument("--slos", type=_floats, default=[75, 80, 85, 90, 95],
                   help="SLOs in ms (default 75,80,85,90,95)")
    p.add_argument("--relative-slo", action="store_true",
                   help="read the SLOs as stated for the paper's RTX 3090 (the fig8 preset) and "
                        "move them to the same place in --preset's latency range (for a preset "
                        "calibrated on another GPU)")
    p.add_argument("--batch", type=int, default=105, help="inference batch (default 105)")
    p.add_argument("--warmup", type=float, default=100.0,
                   help="seconds excluded as the start-up transient (default 100)")
    p.add_argument("--controllers", default=None, help="comma-separated subset")
    p.set_defaults(func=_guard(_cmd_sweep))
