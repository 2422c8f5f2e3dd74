"""How far ahead must a policy know the load to reach a training figure when every share
change pays an MPS restart?

The control-quality benchmark's trace target (>= 0.95 of the per-period oracle's training,
MPS restarts of the plant's own length) sits between references that all know the plant
exactly (:mod:`harness.experiments.zoo_bounds`): the hindsight path (the whole day's load
known), a rent-or-buy rule (no foresight) and a trend forecast. This script adds the
receding-horizon reference with exact foresight of ``H`` periods (``zoo_bounds.lookahead``:
each period it plans the best share path over the next ``H`` periods' true load, paying each
restart, and takes the plan's first step) for a range of ``H``, and runs the default
controller on the same traces. The horizon at which the reference first reaches 0.95 at every
seed is a lower bound on the foresight the target asks for: no forecast beats exact knowledge
of the same periods. ``--day`` stretches the trace's one swing of the load over more periods
(the table's 600 are a day in 40 min; 21600 is a day of 4-s periods), the fast jitter staying
per period: how much of the gap is the day's compression.

    python benchmarks/foresight.py [--seeds 8] [--plants hyperbolic,mixture,delayed,queue]
                                   [--horizons 1,10,25,50,75,100,150,600] [--day 600]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# run as a script, this folder is first on sys.path and its sysid.py would shadow the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import numpy as np  # noqa: E402

from harness.args import DefaultsHelpFormatter, OneLineParser, integer, name_list, run_script  # noqa: E402
from harness.experiments import zoo_bounds as zb  # noqa: E402
from harness.experiments.zoo_control import run  # noqa: E402
from harness.sim import zoo  # noqa: E402

PERIODS, TARGET = 600, 0.95


def _horizons(text: str) -> list[int]:
    """Periods, in increasing order; none twice (as harness.args.number_list: a repeat would
    be run, and printed, twice; it was dropped unsaid)."""
    try:
        hs = [int(h) for h in text.split(",") if h.strip()]
    except ValueError:
        hs = []
    if not hs or not all(h >= 1 for h in hs):
        raise argparse.ArgumentTypeError(
            f"a comma-separated list of periods, each at least 1; got {text!r}")
    twice = sorted({h for h in hs if hs.count(h) > 1})
    if twice:
        raise argparse.ArgumentTypeError(
            f"{', '.join(map(str, twice))} given more than once; give each value once, "
            f"got {text!r}")
    return sorted(hs)


def _cell(v: list[float]) -> str:
    return f"{np.mean(v):.3f} ({np.min(v):.3f})"


def measure(name: str, seeds: int, horizons: list[int], day: int = PERIODS
            ) -> dict[str, list[float]]:
    """Per row (each horizon, the three references, the default), one figure per seed, on a
    trace of ``day`` periods."""
    rows: dict[str, list[float]] = {}
    for s in range(seeds):
        loads = zoo.load_trace(day, seed=s)
        for h in horizons:
            rows.setdefault(f"H={h}", []).append(zb.lookahead(name, s, loads, horizon=h)[0])
        rows.setdefault("causal", []).append(zb.causal(name, s, loads)[0])
        rows.setdefault("forecast", []).append(zb.forecast(name, s, loads)[0])
        rows.setdefault("hindsight", []).append(zb.hindsight(name, s, loads))
        rows.setdefault("default", []).append(float(run(name, s, loads)["efficiency"]))
        print(f"  {name} seed {s} done", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--seeds", type=integer(1, 100), default=8, help="seeds per plant (1-100)")
    ap.add_argument("--plants", type=name_list(zoo.PLANTS),
                    default="hyperbolic,mixture,delayed,queue",
                    help=f"comma-separated, of {', '.join(zoo.PLANTS)}")
    ap.add_argument("--horizons", type=_horizons, default="1,10,25,50,75,100,150,600",
                    help="periods known ahead, comma-separated, each in [1, the day's periods]")
    ap.add_argument("--day", type=integer(100, 100_000), default=PERIODS, metavar="PERIODS",
                    help="periods of the trace's one swing of the load (default %(default)s: a "
                         "day in 40 min; 21600: a day of 4-s periods)")
    a = ap.parse_args(argv)
    if a.horizons[-1] > a.day:
        ap.error(f"argument --horizons: each in [1, {a.day}] (the day's periods); "
                 f"got {a.horizons[-1]}")
    t0 = time.perf_counter()
    res = {name: measure(name, a.seeds, a.horizons, a.day) for name in a.plants}
    seeds = f"{a.seeds} seed{'s' if a.seeds > 1 else ''}"
    print(f"MPS restarts of each plant's own length, {a.day}-period trace, {seeds}; "
          "training over the per-period oracle's, mean (worst seed)\n")
    print("| policy | " + " | ".join(a.plants) + " |")
    print("|---|" + "---|" * len(a.plants))
    labels = {f"H={h}": f"knows the next {h} periods' load exactly" if h > 1 else
              "knows the next period's load exactly" for h in a.horizons}
    labels.update(causal="rent-or-buy, no foresight", forecast="trend forecast, 25 ahead",
                  hindsight="hindsight: the whole day known", default="the default controller")
    for key, label in labels.items():
        print(f"| {label} | " + " | ".join(_cell(res[n][key]) for n in a.plants) + " |")
    print(f"\nforesight the reference needs to reach {TARGET} at every seed:")
    for n in a.plants:
        h = next((h for h in a.horizons if min(res[n][f"H={h}"]) >= TARGET), None)
        last = a.horizons[-1]
        print(f"  {n}: " + (f"{h} period{'s' if h > 1 else ''} ({h * zb.T / 60:.1f} min)"
                            if h else f"more than {last} period{'s' if last > 1 else ''}"))
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    run_script(main, "foresight.py")
