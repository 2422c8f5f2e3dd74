"""``gpucontrol calibrate``: the parser and the command over
:func:`harness.experiments.calibrate.run_calibration`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.args import check_out_dir, integer, number, out_dir, warn
from harness.cli.experiments import preset_arg
from harness.experiments.calibrate import (
    FILES,
    format_report,
    has_stderr,
    mixed_presets,
    no_stderr_reason,
    pin_text,
    run_calibration,
    unpinned,
)
from harness.sim.calibration import CALIBRATE_FIELDS, FIT_BOUNDS


def _fields(text: str) -> list[str]:
    names = [x.strip() for x in text.replace(",", " ").split() if x.strip()]
    bad = [x for x in names if x not in FIT_BOUNDS]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"--fit takes ColocationParams fields from {', '.join(sorted(FIT_BOUNDS))}; "
            f"got {text!r}")
    return names


def _cmd_calibrate(args: argparse.Namespace) -> int:
    check_out_dir(args.out)
    doc, files = run_calibration(args.sources, args.out, args.preset, fields=args.fit,
                                 settle_periods=args.settle, sleep_bin_s=args.sleep_bin,
                                 min_periods=args.min_periods, sm_weight=args.sm_weight,
                                 its_weight=args.its_weight, check=args.check)
    print(format_report(doc, args.out))
    mixed = mixed_presets(doc)
    if mixed:
        warn(f"calibrate: {', '.join(mixed)} ran on another simulated preset than "
             f"{doc['base_preset']}; the fit compromises between two plants (see the fit per "
             "source): calibrate each preset from its own records")
    for n in unpinned(doc):
        why = "" if has_stderr(doc, n) else f": {no_stderr_reason(doc)}"
        warn(f"calibrate: {n} = {pin_text(doc, n)} is not pinned by these data{why} (see the "
             "warning in calibration.md)")
    print("Results: " + ", ".join(str(f) for f in files))
    return 0


def register(sub: Any) -> None:
    """Add ``calibrate`` to the ``gpucontrol`` parser."""
    p = sub.add_parser(
        "calibrate", help="fit the simulated plant's constants to measured experiment records",
        description="Read the per-period records of knobs / identify / burst / sweep runs "
                    "(e.g. on a GPU) and the GPU harness's spatial study (levels.csv), "
                    "average the steady periods per operating point and fit the simulated "
                    "plant's sharing constants to their latencies, training SM shares and "
                    "training rates. Writes calibration.json (usable as --preset of every "
                    "experiment), calibration.md and calibration.png into --out.")
    p.add_argument("--from", dest="sources", action="append", required=True, metavar="DIR",
                   help="a results folder (the experiments' --out, or one experiment's "
                        "folder) or a per-period CSV; repeat for several")
    p.add_argument("--check", action="append", default=[], metavar="DIR",
                   help="records (as --from) compared with the calibrated model but not fitted: "
                        "held-out data, or a regime the physics does not describe; repeat for "
                        "several")
    p.add_argument("--preset", type=preset_arg, default=None,
                   help="preset to start from and to calibrate: fig4, fig8, h100 or an "
                        "earlier calibration.json (default: the one the sources ran with)")
    p.add_argument("--out", type=out_dir, default="results/calibration",
                   help="output folder (default ./results/calibration)")
    p.add_argument("--fit", type=_fields, default=None,
                   help=f"comma-separated fields to fit (default {','.join(CALIBRATE_FIELDS)}, "
                        f"plus train_interference and timeslice_switch_loss where training "
                        f"rates are recorded, partition_interference with green-context "
                        f"records and compute_ms_fixed with two batch sizes or more)")
    p.add_argument("--settle", type=integer(0, 1000), default=2,
                   help="periods skipped after a run start, knob change or restart, [0, 1000] "
                        "(default 2)")
    p.add_argument("--sleep-bin", type=number(0, 10, lo_open=True, unit="s"), default=0.1,
                   help="bin width (s) of sleeps that change every period, (0, 10] "
                        "(default 0.1)")
    p.add_argument("--min-periods", type=integer(1, 100000), default=3,
                   help="steady periods an operating point needs to count, [1, 100000] "
                        "(default 3)")
    p.add_argument("--sm-weight", type=number(0, 1000), default=1.0,
                   help="weight of the SM-share errors against the latency errors, [0, 1000]; "
                        "0 ignores them and does not read the column (default 1)")
    p.add_argument("--its-weight", type=number(0, 1000), default=1.0,
                   help="weight of the training-rate (iterations/s) errors against the "
                        "latency errors, [0, 1000]; 0 ignores them (default 1)")
    # --out may hold other files: only the calibration's are replaced
    p.set_defaults(func=_cmd_calibrate, results=lambda a: (Path(a.out), FILES))
