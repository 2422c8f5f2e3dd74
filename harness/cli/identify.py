"""``gpucontrol identify``: the parser and the command over
:func:`harness.experiments.identify.identify`."""

from __future__ import annotations

import argparse
import sys
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
)
from harness.cli.experiments import CPU_PRESETS, preset_arg, results_in
from harness.experiments.common import PlantUnavailable
from harness.experiments.identify import check_split, format_summary, identify, rate_levels


def _cmd_identify(args: argparse.Namespace) -> int:
    try:
        check_split(args.train, args.periods, ("--train", "--periods"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = check_out_dir(Path(args.out) / "identify")
    had_model = (out / "model.json").exists()
    if args.plant != "cpu":
        try:
            preset_arg(args.preset)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--preset: {exc}") from None
    try:
        res = identify(plant=args.plant, preset=args.preset, seed=args.seed,
                       mps_levels=args.mps, sleep_range=args.sleep, periods=args.periods,
                       train_fraction=args.train, period_s=args.period,
                       rate_levels=rate_levels(args.mps) if args.rate_sweep else (),
                       out_dir=out,
                       progress=False if args.no_progress else None)
    except PlantUnavailable as exc:
        print(f"gpucontrol identify: {exc}", file=sys.stderr)
        return 3
    print(f"Identification on the {args.plant} plant ({args.preset} preset, seed {args.seed}): "
          f"white-noise sleep in [{args.sleep[0]:g}, {args.sleep[1]:g}] s, {args.periods} "
          f"periods of {args.period:g} s per {res.meta['share_name']} level, {args.train:.0%} fit "
          f"/ rest held out")
    print(format_summary(res))
    print("Results: " + ", ".join(str(f) for f in res.files))
    if out / "model.json" not in res.files:
        warn("no model.json written: no level has a significantly negative gain"
             + (f"; the previous run's {out / 'model.json'} is removed with its other files"
                if had_model else ""))
    return 0


def register(sub: Any) -> None:
    """Add ``identify`` to the ``gpucontrol`` parser."""
    p = sub.add_parser(
        "identify", help="system identification: latency vs sleep per MPS level (Fig 6/7)",
        description="Excite the plant with white noise on the sleep interval at each training "
                    "MPS level, fit latency = gain * sleep + offset, validate on held-out "
                    "periods and report gain, offset and R² per level (GPUColo paper, Figs. 6/7). "
                    "Results go to <out>/identify/.")
    p.add_argument("--plant", choices=("sim", "gpu", "gpu-green", "cpu"), default="sim",
                   help="simulated plant (default), the real GPU (needs the GPU harness; "
                        "gpu-green: the share a green-context partition inside MPS) or "
                        "the CPU plant (real processes on this machine's CPUs; presets "
                        "default, small)")
    p.add_argument("--preset", default="fig8",
                   help=f"plant preset: fig4, fig8, h100 or a calibration.json written by "
                        f"'gpucontrol calibrate' (sim, gpu); with --plant cpu {CPU_PRESETS}")
    p.add_argument("--seed", type=seed, default=0, help="random seed, 0..2^32-1 (default 0)")
    p.add_argument("--out", type=out_dir, default="results",
                   help="output folder (default ./results)")
    p.add_argument("--mps", type=number_list(1, 100, unit="%", example="40,60,80,100"),
                   default=[40.0, 60.0, 80.0, 100.0],
                   help="training MPS levels in %% (with --plant cpu: the training's CPU "
                        "share), each in [1, 100] and none twice (default 40,60,80,100)")
    p.add_argument("--sleep", type=pair(float, 0.0, 10.0, increasing=True), default=(0.1, 0.7),
                   help="sleep range of the excitation in s, 0 <= lo < hi <= 10 "
                        "(default 0.1,0.7)")
    p.add_argument("--periods", type=integer(10, 100000), default=100,
                   help="recorded periods per MPS level, [10, 100000] (default 100)")
    p.add_argument("--train", type=number(0, 1, lo_open=True, hi_open=True), default=0.6,
                   help="fraction of each record used for fitting, (0, 1) (default 0.6)")
    p.add_argument("--period", type=number(0.1, 60, unit="s"), default=4.0,
                   help="control period in s, [0.1, 60] (default 4)")
    p.add_argument("--rate-sweep", action="store_true",
                   help="also measure the training's iteration time alone at every share an "
                        "outer loop weighs (steps of 3 %%) between the lowest and highest --mps "
                        "level, warm-up + 4 periods each: worth it where the training's speed "
                        "has steps the levels miss (an H100's whole waves of thread blocks)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_identify, results=results_in("identify"))
