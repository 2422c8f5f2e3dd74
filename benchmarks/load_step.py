"""Where the load step's violations come from: per seed, per phase, beside what the seed drew.

The control-quality benchmark's load step (300 periods, the load +30 % at period 100, +10 %
on "ours") counts the periods over 1.05 SLO over the whole run. This script splits them per
seed into the opening (periods 0-99, before the step), the answer to the step (periods
100-114) and the rest (115-299). For the drawn plant ("random") it prints beside them what the
seed drew: the ratio of the plant's interference to the identified one (the gain the inner
loop's model gets wrong, drawn in [0.3, 3]), whether its readings come one period late, and the
latency with no training at all after the step, over the SLO (near 1, the SLO is barely
feasible). It then groups the drawn seeds by that ratio, against the P loop's design: at detune
0.5 a loop whose plant is ``g`` times its model closes ``g/2`` of an error a period (what the
outer loop's belief of the curve's scale corrects aside), and ``g < 2`` keeps it stable with a
period's delay (``g < 4`` without).

    python benchmarks/load_step.py [--seeds 16] [--plants random,h100]
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

# run as a script, this folder is first on sys.path and its sysid.py would shadow the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import numpy as np  # noqa: E402

from harness.args import DefaultsHelpFormatter, OneLineParser, integer, name_list, run_script  # noqa: E402
from harness.experiments.zoo_control import run  # noqa: E402
from harness.sim import zoo  # noqa: E402

STEP_AT, ANSWER, PERIODS = 100, 15, 300
#: The drawn plant's interference ratio bands (against the model) the summary groups by.
BANDS = ((0.0, 0.5, "ratio < 0.5 (the loop closes < 1/4 of an error a period)"),
         (0.5, 1.5, "ratio 0.5-1.5"),
         (1.5, math.inf, "ratio >= 1.5 (near or past the delayed loop's bound of 2)"))


def _drawn(name: str, seed: int) -> tuple[float, int, float] | None:
    """What a drawn plant drew: interference ratio, reporting delay, and the latency with no
    training at the step's load over the SLO (None for a fixed plant)."""
    if name != "random":
        return None
    plant = zoo.make_plant(name, seed=seed)
    slo = zoo.slo_ms(name, plant)
    base = plant
    while hasattr(base, "inner"):
        base = base.inner
    alone = float(plant.expected_latency_ms(1e6, 1.0, load=1.3)) / slo
    return float(base.gain_ratio), int(base.delay), alone


def measure(name: str, seed: int) -> dict[str, float]:
    """One seed's load step: periods over 1.05 SLO per phase and the whole run's %."""
    f = 1.1 if name == "ours" else 1.3
    r = run(name, seed, np.r_[np.ones(STEP_AT), np.full(PERIODS - STEP_AT, f)])
    po = np.asarray(r["periods_over"], dtype=bool)
    end = STEP_AT + ANSWER
    return {"opening": int(po[:STEP_AT].sum()), "answer": int(po[STEP_AT:end].sum()),
            "rest": int(po[end:].sum()), "pct": float(r["over"])}


def main(argv: list[str] | None = None) -> None:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--seeds", type=integer(1, 100), default=16, help="seeds per plant (1-100)")
    ap.add_argument("--plants", type=name_list(zoo.PLANTS), default="random,h100",
                    help=f"comma-separated, of {', '.join(zoo.PLANTS)}")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"load step at period {STEP_AT}, {PERIODS} periods, {a.seeds} "
          f"seed{'s' if a.seeds > 1 else ''}; periods over 1.05 SLO in periods "
          f"0-{STEP_AT - 1} / {STEP_AT}-{STEP_AT + ANSWER - 1} / "
          f"{STEP_AT + ANSWER}-{PERIODS - 1}\n")
    print("| plant | seed | interference / model | delay | no training after the step, "
          "/ SLO | over: opening / answer / rest | % over, whole run |")
    print("|---|---|---|---|---|---|---|")
    drawn: list[tuple[float, float]] = []
    for name in a.plants:
        for s in range(a.seeds):
            m, d = measure(name, s), _drawn(name, s)
            cols = ("—", "—", "—") if d is None else (f"{d[0]:.2f}", str(d[1]), f"{d[2]:.3f}")
            print(f"| {name} | {s} | {' | '.join(cols)} | {m['opening']} / {m['answer']} / "
                  f"{m['rest']} | {m['pct']:.2f} |", flush=True)
            if d is not None:
                drawn.append((d[0], m["pct"]))
    if drawn:
        print("\n| random, seeds by drawn ratio | seeds | % over, mean | worst |")
        print("|---|---|---|---|")
        for lo, hi, label in BANDS:
            v = [p for g, p in drawn if lo <= g < hi]
            if v:
                print(f"| {label} | {len(v)} | {np.mean(v):.2f} | {np.max(v):.2f} |")
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    run_script(main, "load_step.py")
