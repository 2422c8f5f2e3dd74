"""``gpucontrol identify``: the parser and the command over
:func:`harness.experiments.identify.identify`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.cli.experiments import _floats, _pair, preset_arg
from harness.experiments.common import PlantUnavailable
from harness.experiments.identify import format_summary, identify


def _cmd_identify(args: argparse.Namespace) -> int:
    if args.plant != "cpu":
        try:
            preset_arg(args.preset)
        except argparse.ArgumentTypeError as exc:
            print(f"gpucontrol identify: error: --preset: {exc}", file=sys.stderr)
            return 2
    try:
        res = identify(plant=args.plant, preset=args.preset, seed=args.seed,
                       mps_levels=args.mps, sleep_range=args.sleep, periods=args.periods,
                       train_fraction=args.train, period_s=args.period,
                       out_dir=Path(args.out) / "identify",
                       progress=False if args.no_progress else None)
    except PlantUnavailable as exc:
        print(f"gpucontrol identify: {exc}", file=sys.stderr)
        return 3
    print(f"Identification on the {args.plant} plant ({args.preset} preset, seed {args.seed}): "
          f"white-noise sleep in [{args.sleep[0]:g}, {args.sleep[1]:g}] s, {args.periods} "
          f"periods of {args.period:g} s per MPS level, {args.train:.0%} fit / rest held out")
    print(format_summary(res))
    print("Results: " + ", ".join(str(f) for f in res.files))
    return 0


def register(sub: Any) -> None:
    """Add ``identify`` to the ``gpucontrol`` parser."""
    p = sub.add_parser(
        "identify", help="system identification: latency vs sleep per MPS level (Fig 6/7)",
        description="Excite the plant with white noise on the sleep interval at each training "
                    "MPS level, fit latency = gain * sleep + offset, validate on held-out "
                    "periods and report gain, offset and R² per level (GPUColo paper, Figs. 6/7). "
                    "Results go to <out>/identify/.")
    p.add_argument("--plant", choices=("sim", "gpu", "cpu"), default="sim",
                   help="simulated plant (default), the real GPU (needs the GPU harness) or "
                        "the CPU plant (real processes on this machine's CPUs; presets "
                        "default, small)")
    p.add_argument("--preset", default="fig8",
                   help="plant preset: fig4, fig8 or a calibration.json written by "
                        "'gpucontrol calibrate' (sim, gpu); default or small (cpu)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", default="results", help="output folder (default ./results)")
    p.add_argument("--mps", type=_floats, default=[40.0, 60.0, 80.0, 100.0],
                   help="training MPS levels in %% (default 40,60,80,100)")
    p.add_argument("--sleep", type=_pair(float), default=(0.1, 0.7),
                   help="sleep range of the excitation in s (default 0.1,0.7)")
    p.add_argument("--periods", type=int, default=100,
                   help="recorded periods per MPS level (default 100)")
    p.add_argument("--train", type=float, default=0.6,
                   help="fraction of each record used for fitting (default 0.6)")
    p.add_argument("--period", type=float, default=4.0, help="control period in s (default 4)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_identify)
