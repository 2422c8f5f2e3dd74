"""Mean cost of one TwoTierController.update (goal < 50 us).

Prints the mean time per update for the controller in several configurations and, as a
same-process baseline, the bare GPUColo formula ``s = clamp(s + (slo - l) / m)`` written
inline, so the ratio shows what validation, saturation logic and the outer loop cost.

    python benchmarks/controller_overhead.py [--n 200000]
"""

from __future__ import annotations

import argparse
import platform
import random
import time

from gpucontrol import LinearLatencyModel, Measurement, TwoTierController
from harness.cli.args import integer


def bare_formula(latencies: list[float]) -> float:
    s, m, slo = 0.0, -12.0, 90.0
    t0 = time.perf_counter()
    for l in latencies:
        s = min(max(s + (slo - l) / m, 0.0), 1.0)
    return (time.perf_counter() - t0) / len(latencies)


def controller(latencies: list, **kw) -> float:
    ctl = TwoTierController(LinearLatencyModel(-12.0, 95.0), 90.0, **kw)
    update = ctl.update
    t0 = time.perf_counter()
    for l in latencies:
        update(l)
    return (time.perf_counter() - t0) / len(latencies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=integer(1, 100_000_000), default=200_000)
    n = ap.parse_args().n
    rng = random.Random(0)
    floats = [90.0 + rng.gauss(0, 3) for _ in range(n)]
    rich = [Measurement(x, x * 1.2, 25) for x in floats]
    base = bare_formula(floats)
    print(f"python {platform.python_version()} on {platform.machine()}, n={n}")
    print(f"{'configuration':42s} {'mean us/update':>15s} {'x bare formula':>15s}")
    print(f"{'bare formula (baseline)':42s} {base * 1e6:15.3f} {1.0:15.1f}")
    cases = [
        ("two-tier default (throughput), float input", floats, {}),
        ("two-tier default, Measurement input", rich, {}),
        ("two-tier paper, float input", floats, {"outer": "paper"}),
        ("two-tier paper, Measurement input", rich, {"outer": "paper"}),
        ("two-tier mid-range + adaptive", floats, {"outer": "mid-range", "adaptive": True}),
        ("two-tier default p99 mode, Measurement", rich, {"mode": "p99"}),
    ]
    worst = 0.0
    for name, data, kw in cases:
        t = controller(data, **kw)
        worst = max(worst, t)
        print(f"{name:42s} {t * 1e6:15.3f} {t / base:15.1f}")
    print(f"worst mean cost {worst * 1e6:.2f} us (goal < 50 us): "
          f"{'met' if worst < 50e-6 else 'NOT met'}")


if __name__ == "__main__":
    main()
