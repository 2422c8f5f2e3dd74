"""What outlier periods cost the default controller on the plant zoo (no target yet).

An outlier period is a real reading far from what the sleep and the share explain: a batch
descheduled for seconds, a checkpoint, a neighbour's burst. The zoo's targets do not measure
them; real nodes have them. Each run is a steady load of 600 periods at the plant's SLO, once
clean and once with one reading in ``--every`` multiplied by ``--factor`` (from period
``every // 2``), same seed; the script prints per plant and backend the training of the
outlier run over the clean one (mean and worst seed) and the % of periods over 1.05 SLO in
both, not counting the outlier periods themselves (nor the period before each, which is
the delayed plant's reported one).

    python benchmarks/outliers.py [--seeds 8] [--every 60] [--factor 3]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# run as a script, this folder is first on sys.path and its sysid.py would shadow the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import numpy as np  # noqa: E402

from harness.args import DefaultsHelpFormatter, OneLineParser, integer, number, run_script  # noqa: E402
from harness.experiments.zoo_control import run  # noqa: E402
from harness.sim import zoo  # noqa: E402

KNOBS = {"free": "restart-free share", "mps": "MPS restarts"}
PERIODS = 600


def _over(res: dict, skip: set[int]) -> float:
    """% of periods over 1.05 SLO, the periods in ``skip`` left out."""
    keep = [k for k in range(len(res["periods_over"])) if k not in skip
            and np.isfinite(res["latency"][k])]
    return 100.0 * float(np.mean(res["periods_over"][keep]))


def measure(name: str, knob: str, seeds: int, every: int, factor: float) -> dict[str, float]:
    """Training ratio (mean, worst seed) and violations (clean, with outliers) on one plant."""
    hit = range(every // 2, PERIODS, every)
    skip = set(hit) | {k - 1 for k in hit}
    ratios, over_c, over_o = [], [], []
    for s in range(seeds):
        clean = run(name, s, np.ones(PERIODS), knob=knob)
        out = run(name, s, np.ones(PERIODS), knob=knob, outliers=(every, factor))
        ratios.append(float(out["training"].sum() / clean["training"].sum()))
        over_c.append(_over(clean, skip))
        over_o.append(_over(out, skip))
    return {"mean": float(np.mean(ratios)), "min": float(np.min(ratios)),
            "over_clean": float(np.mean(over_c)), "over_out": float(np.mean(over_o))}


def main(argv: list[str] | None = None) -> None:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--seeds", type=integer(1, 100), default=8, help="seeds per plant (1-100)")
    ap.add_argument("--every", type=integer(2, PERIODS), default=60,
                    help=f"one outlier period in this many (2-{PERIODS})")
    ap.add_argument("--factor", type=number(0.01, 1000.0), default=3.0,
                    help="what an outlier multiplies its period's readings by (0.01-1000)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"one reading x{a.factor:g} every {a.every} periods, steady load, {a.seeds} "
          f"seed{'s' if a.seeds > 1 else ''}\n")
    print("| plant | backend | training with outliers / without, mean (worst seed) "
          "| % periods > 1.05 SLO without / with |")
    print("|---|---|---|---|")
    for name in zoo.PLANTS:
        for knob, label in KNOBS.items():
            m = measure(name, knob, a.seeds, a.every, a.factor)
            print(f"| {name} | {label} | {m['mean']:.3f} ({m['min']:.3f}) "
                  f"| {m['over_clean']:.2f} / {m['over_out']:.2f} |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    run_script(main, "outliers.py")
