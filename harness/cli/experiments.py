"""``gpucontrol demo | knobs | burst | sweep`` — registered in :data:`harness.cli.COMMAND_MODULES`.

Each subcommand takes ``--plant {sim,gpu}`` (default ``sim``), ``--seed``, ``--out`` and a
duration; results go to ``<out>/<experiment>/`` as CSV, PNG, a Markdown summary and JSON
metadata, which replace the previous run's files there as a whole when the run completes
(:func:`harness.results.result_set`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.args import (
    UsageError,
    check_out_dir,
    integer,
    number,
    number_list,
    out_dir,
    pair,
    seed,
    warn,
    whole_periods,
)

__all__ = ["register"]

#: The simulated plant's spatial-share backends (harness.sim.physics.BACKENDS).
BACKEND_NAMES = ("mps-restart", "sleep", "green-context", "green-context+mps")
#: Allowed ranges of the shared flags (the messages quote them).
DURATION = number(0, 86400, lo_open=True, unit="s")
PERIOD = number(0.1, 60, unit="s")
SLO = number(0, 10000, lo_open=True, unit="ms")
BATCH = (1, 4096)
#: The CPU plant's presets as its help names them (``harness.hil.cpu.plant.presets_text``,
#: which its error uses, says the same: a test holds them together; not imported here, so
#: the parser does not load the plant).
CPU_PRESETS = "default or small (fig8 means default)"
#: Default length of the CPU demo's closed-loop phase, s.
CPU_DEMO_DURATION = 120.0


def _common(p: argparse.ArgumentParser, *, duration: float, period: float,
            out: str = "results", plants: tuple[str, ...] = ("sim", "gpu", "gpu-green"),
            duration_help: str | None = None) -> None:
    p.add_argument("--plant", choices=plants, default="sim",
                   help="simulated plant (default) or the real GPU (needs the GPU harness; "
                        "gpu-green: its share a green-context partition inside MPS)"
                        + ("; cpu: the whole pipeline (identify, model.json, the daemon "
                           "process, a load burst) on real processes sharing this machine's "
                           "CPUs" if "cpu" in plants else ""))
    p.add_argument("--seed", type=seed, default=0,
                   help="random seed of the plant, 0..2^32-1 (default 0)")
    p.add_argument("--out", type=out_dir, default=out, help=f"output folder (default ./{out})")
    p.add_argument("--duration", type=DURATION, default=duration,
                   help=duration_help or f"seconds per run, a whole number of periods, "
                                         f"(0, 86400] (default {duration:g})")
    p.add_argument("--period", type=PERIOD, default=period,
                   help=f"control period in s, [0.1, 60] (default {period:g})")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar or progress lines")




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
                   help=f"plant preset: fig4, fig8, h100 (an H100 calibrated from "
                        f"docs/results) or a calibration.json written by 'gpucontrol "
                        f"calibrate' (default {default}); with --plant gpu the hardware is set "
                        f"up by the named preset (a calibration's base)")




def controllers_arg(text: str) -> list[str]:
    """argparse type of ``--controllers``: a non-empty comma list of known names/aliases."""
    from harness.experiments.common import resolve_names

    if not [x for x in text.split(",") if x.strip()]:
        raise argparse.ArgumentTypeError("expected at least one controller, e.g. "
                                         "'gslice,two-tier,ours,oracle'")
    try:
        return resolve_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def results_in(sub: str | Callable[[argparse.Namespace], str]
               ) -> Callable[[argparse.Namespace], tuple[Path, None]]:
    """The ``results=`` of a command that writes into ``<out>/<sub>/`` (the folder is the
    experiment's own: each run replaces it as a whole)."""
    def where(args: argparse.Namespace) -> tuple[Path, None]:
        return Path(args.out) / (sub(args) if callable(sub) else sub), None
    return where


def _prepare_run(args: argparse.Namespace, sub: str) -> Path:
    """Checks every run makes before it starts: whole periods, a writable output folder."""
    whole_periods(args.duration, args.period)
    return check_out_dir(Path(args.out) / sub)


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


#: Closed-loop periods the CPU demo needs (its summary leaves out the first 5, the loop
#: settling from no sleep).
CPU_DEMO_MIN_PERIODS = 20


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.duration is None:  # the whole burst run; on the CPU plant the closed-loop phase
        args.duration = CPU_DEMO_DURATION if args.plant == "cpu" else 400.0
    if args.plant == "cpu":  # the suggestions of a bad duration are ones the demo takes
        whole_periods(args.duration, args.period, CPU_DEMO_MIN_PERIODS,
                      " with --plant cpu (its closed-loop phase)")
    whole_periods(args.duration, args.period)
    if args.plant == "cpu":
        return _cmd_demo_cpu(args)
    from harness.experiments.demo import demo

    if args.slo is not None:
        raise UsageError(f"--slo {args.slo:g}: the demo on the {args.plant} plant runs the "
                         f"Fig 8 burst at its SLO of 90 ms; --slo is for --plant cpu (use "
                         f"'gpucontrol burst --slo' for another SLO)")
    try:
        preset_arg(args.preset)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--preset: {exc}") from None
    _prepare_run(args, "burst")
    demo(out_dir=args.out, seed=args.seed, duration_s=args.duration, plant=args.plant,
         preset=args.preset, progress=_progress(args), period_s=args.period)
    return 0


def _cmd_demo_cpu(args: argparse.Namespace) -> int:
    from harness.experiments.pipeline import SETTLING, run_pipeline
    from harness.hil.cpu.plant import PRESETS, presets_text

    if args.preset not in PRESETS:
        raise UsageError(f"--preset {args.preset!r}: the CPU plant's preset must be "
                         f"{presets_text()}")
    closed = round(args.duration / args.period)  # whole, >= CPU_DEMO_MIN_PERIODS (checked)
    check_out_dir(Path(args.out) / "cpu_demo")
    res = run_pipeline(args.out, preset="default" if args.preset == "fig8" else args.preset,
                       period_s=args.period, closed_periods=closed, slo_ms=args.slo,
                       seed=args.seed, progress=not args.no_progress)
    print(f"SLO {res['slo_choice']}")
    print(f"identification R² {res['identify_r2']:.2f} (held-out "
          f"{res['identify_r2_validation']:.2f}); closed loop over {res['closed_periods']} "
          f"of its {closed} periods (the first {SETTLING}, settling from no sleep, and any "
          f"without a latency left out): median |l - SLO|/SLO {res['median_abs_err_pct']} %, "
          f"periods over 1.05 SLO {res['over_105_pct']} %, training "
          f"{res['training_it_per_period']} iterations per period; {res['wall_s']:.0f} s in all")
    print("Results: " + ", ".join(res["files"]))
    return 0 if res["daemon_exit"] == 0 else 1


def _cmd_burst(args: argparse.Namespace) -> int:
    from harness.experiments.burst import burst
    from harness.experiments.demo import format_table

    if args.burst is None:  # the documented default: the Fig 8 burst scaled to the run
        args.burst = (0.225 * args.duration, 0.725 * args.duration)
    if args.burst[1] > args.duration:
        raise UsageError(f"--burst {args.burst[0]:g},{args.burst[1]:g}: the burst must end "
                         f"within --duration ({args.duration:g} s)")
    out = _prepare_run(args, "burst")
    if args.backend is not None and args.plant != "sim":
        raise UsageError(f"--backend {args.backend}: the {args.plant} plant runs the backend "
                         f"its harness set up; --backend is for --plant sim")
    res = burst(plant=args.plant, preset=args.preset, seed=args.seed,
                duration_s=args.duration, slo_ms=args.slo,
                burst_s=args.burst, batches=args.batch, controllers=args.controllers,
                out_dir=out, progress=_progress(args),
                relative_slo=args.relative_slo, period_s=args.period, backend=args.backend)
    if args.relative_slo:
        print(f"SLO {res.meta['slo_given_ms']:g} ms on the RTX 3090 preset -> "
              f"{res.meta['slo_ms']:.1f} ms on "
              f"{args.preset} (latency range {res.meta['latency_range_ms'][0]:.1f}.."
              f"{res.meta['latency_range_ms'][1]:.1f} ms)")
    print(format_table(res))
    print("Results: " + ", ".join(str(f) for f in res.files))
    return 0


def _cmd_knobs(args: argparse.Namespace) -> int:
    from harness.experiments.knobs import batch_note, knobs
    from harness.results import markdown_table

    if args.change is None:  # the documented default: the Fig 4 steps scaled to the run
        args.change = (args.duration / 3.0, 2.0 * args.duration / 3.0)
    if args.change[1] >= args.duration:
        raise UsageError(f"--change {args.change[0]:g},{args.change[1]:g}: both steps must "
                         f"come before the end of --duration ({args.duration:g} s)")
    out = _prepare_run(args, "knobs")
    res = knobs(plant=args.plant, preset=args.preset, seed=args.seed, duration_s=args.duration,
                change_s=args.change, period_s=args.period,
                out_dir=out, progress=_progress(args))
    print(markdown_table(res.summary, ("run", "phase", "latency_ms", "paper_latency_ms",
                                       "sm_pct", "paper_sm_pct"), digits=2))
    note = batch_note(res)
    if note:
        warn(f"knobs: {note}")
    print("Results: " + ", ".join(str(f) for f in res.files))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from harness.experiments.slo_sweep import DEFAULT_SWEEP_CONTROLLERS, SUMMARY_COLUMNS, slo_sweep
    from harness.results import markdown_table

    warmup = args.warmup
    if warmup is None:  # the documented default
        warmup = min(100.0, 0.5 * args.duration)
    elif warmup >= args.duration:
        raise UsageError(f"--warmup {warmup:g} s must be less than --duration "
                         f"({args.duration:g} s), so some periods are scored")
    out = _prepare_run(args, "slo_sweep")
    res = slo_sweep(plant=args.plant, preset=args.preset, seed=args.seed, slos=args.slos,
                    duration_s=args.duration,
                    batch=args.batch, warmup_s=warmup,
                    controllers=args.controllers or DEFAULT_SWEEP_CONTROLLERS,
                    out_dir=out, progress=_progress(args),
                    relative_slo=args.relative_slo, period_s=args.period)
    print(markdown_table(res.summary, SUMMARY_COLUMNS, digits=2))
    bad = sorted({r["slo_ms"] for r in res.summary if r["slo_ms"] < res.meta["slo_floor_ms"]})
    if bad:
        print(f"Infeasible SLO(s) {', '.join(f'{x:g}' for x in bad)} ms: no sleep in [0, 1] s "
              f"and MPS in [1, 100] % gets below {res.meta['slo_floor_ms']:.1f} ms at batch "
              f"{args.batch} (feasible: False in the table)")
    print("Results: " + ", ".join(str(f) for f in res.files))
    return 0


def register(sub: Any) -> None:
    """Add the experiment subcommands to the ``gpucontrol`` parser."""
    p = sub.add_parser("demo", help="burst experiment on the simulated plant, with a summary",
                       description="Run the burst experiment (GPUColo paper, Fig. 8) on the "
                       "simulated "
                                   "plant and print, per controller, latency, SLO violations and "
                                   "throughputs. Results go to ./results/burst/.")
    _common(p, duration=400.0, period=4.0, plants=("sim", "gpu", "gpu-green", "cpu"),
            duration_help=f"seconds per run, a whole number of periods, (0, 86400] (default "
                          f"400); with --plant cpu the closed-loop phase, at least "
                          f"{CPU_DEMO_MIN_PERIODS} periods (default {CPU_DEMO_DURATION:g})")
    p.set_defaults(duration=None)  # per plant, see _cmd_demo
    p.add_argument("--preset", default="fig8",
                   help=f"plant preset: fig4, fig8, h100 or a calibration.json (sim, gpu); "
                        f"with --plant cpu {CPU_PRESETS}")
    p.add_argument("--slo", type=number(0.0, None, lo_open=True), default=None,
                   help="--plant cpu only: the SLO in ms, > 0 (default: chosen inside the "
                        "identified latency range; the sim and gpu demos run the Fig 8 "
                        "burst at 90 ms, 'gpucontrol burst --slo' takes another)")
    p.set_defaults(func=_guard(_cmd_demo), results=results_in(
        lambda a: "cpu_demo" if a.plant == "cpu" else "burst"))

    p = sub.add_parser("knobs", help="MPS vs Sleep vs Sleep+MPS (GPUColo paper, Fig. 4)")
    _common(p, duration=60.0, period=1.0)
    add_preset(p, "fig4")
    p.add_argument("--change", type=pair(float, 0.0, None, increasing=True),
                   default=None,
                   help="times of the reduce and restore steps, s, 0 <= A < B < --duration "
                        "(default a third and two thirds of --duration: 20,40 for 60 s)")
    p.set_defaults(func=_guard(_cmd_knobs), results=results_in("knobs"))

    p = sub.add_parser("burst", help="inference burst under every controller "
                                      "(GPUColo paper, Fig. 8)")
    _common(p, duration=400.0, period=4.0)
    add_preset(p, "fig8")
    p.add_argument("--slo", type=SLO, default=None,
                   help="latency SLO in ms, (0, 10000]; one no setting of the knobs can meet is "
                        "refused (default: the preset's suggested SLO, 90 on fig8, 30 on h100)")
    p.add_argument("--backend", choices=tuple(BACKEND_NAMES), default=None,
                   help="spatial-share backend of the simulated plant for the controllers that "
                        "do not drive their own: mps-restart (MPS thread caps, a change "
                        "restarts the training), sleep (time-sliced, no MPS), green-context "
                        "(time-sliced partitions), green-context+mps (partitions inside MPS, "
                        "restart-free); default the preset's (mps-restart). The comparison: "
                        "--controllers sleep-no-mps,two-tier,green")
    p.add_argument("--relative-slo", action="store_true",
                   help="read the SLO as one stated for the paper's RTX 3090 (the fig8 preset) and "
                        "move it to the same place in --preset's latency range (for a preset "
                        "calibrated on another GPU)")
    p.add_argument("--burst", type=pair(float, 0.0, None, increasing=True),
                   default=None,
                   help="burst start,end in s, 0 <= start < end <= --duration (default "
                        "22.5 %%..72.5 %% of --duration: 90,290 for the 400 s run)")
    p.add_argument("--batch", type=pair(int, *BATCH), default=(105, 115),
                   help="normal,burst batch size, each in [1, 4096] (default 105,115)")
    p.add_argument("--controllers", type=controllers_arg, default=None,
                   help="comma-separated subset, e.g. 'gslice,two-tier,ours,oracle'")
    p.set_defaults(func=_guard(_cmd_burst), results=results_in("burst"))

    p = sub.add_parser("sweep", help="SLO sweep 75..95 ms (GPUColo paper, Fig. 9)")
    _common(p, duration=400.0, period=4.0)
    add_preset(p, "fig8")
    p.add_argument("--slos", type=number_list(0, 10000, lo_open=True, unit="ms"),
                   default=[75, 80, 85, 90, 95],
                   help="SLOs in ms, each in (0, 10000] and none twice (default "
                        "75,80,85,90,95); the table "
                        "marks the ones no setting of the knobs can meet as not feasible")
    p.add_argument("--relative-slo", action="store_true",
                   help="read the SLOs as stated for the paper's RTX 3090 (the fig8 preset) and "
                        "move them to the same place in --preset's latency range (for a preset "
                        "calibrated on another GPU)")
    p.add_argument("--batch", type=integer(*BATCH), default=105,
                   help="inference batch, [1, 4096] (default 105)")
    p.add_argument("--warmup", type=number(0, None), default=None,
                   help="seconds excluded as the start-up transient, 0 <= W < --duration "
                        "(default 100, or half of --duration when that is shorter)")
    p.add_argument("--controllers", type=controllers_arg, default=None,
                   help="comma-separated subset (default: GSLICE-extended, the paper's two-tier, "
                        "mid-range + adaptive, the gpucontrol default and the Oracle)")
    p.set_defaults(func=_guard(_cmd_sweep), results=results_in("slo_sweep"))
