"""The CPU plant's per-period scatter at a fixed sleep: the floor a per-period loop works against.

Starts the CPU plant (:mod:`harness.hil.cpu.plant`) with the given settings, lets it settle,
then holds the training's sleep at three values in turn -- none, ``--mid`` run quanta and
``--top`` run quanta (the running fraction ``q / (q + s)`` is then 1, 1/2 and 2/7 whatever the
quantum) -- for ``--periods`` periods each, in interleaved blocks so a drift of the machine's
other load falls on all three alike. Per sleep: the mean latency and the rms scatter of the
per-period means; the scatter at the middle sleep is reported as a percentage of that
sleep's mean latency (about where the pipeline puts the SLO) and of the latency range (no
sleep minus top sleep: the knob's reach, the signal an identification sees).

    python benchmarks/cpu_noise.py [--quantum 0.2] [--rate 30] [--batch 256] [--period 2]
        [--periods 8] [--infer-threads 2] [--train-threads 1] [--train-batch 256]

One line of JSON per run, with the 1-minute load average before and after (the machine may
be shared). Every process it starts is resumed and stopped before it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_ROOT = str(_HERE.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

from gpucontrol import Actuation  # noqa: E402
from harness.cli.args import integer, number  # noqa: E402
from harness.hil.cpu.plant import make_cpu_plant  # noqa: E402


def measure(a: argparse.Namespace) -> dict[str, object]:
    """Run the three fixed sleeps; the figures of one configuration."""
    over = {"run_quantum_s": a.quantum, "rate_hz": a.rate, "batch": a.batch,
            "burst_batch": a.batch + max(1, a.batch // 4), "infer_threads": a.infer_threads,
            "train_threads": a.train_threads, "train_batch": a.train_batch,
            "backend": a.backend}
    load0 = os.getloadavg()[0]
    sleeps = (0.0, a.mid * a.quantum, a.top * a.quantum)
    lat: dict[float, list[float]] = {s: [] for s in sleeps}
    cnt: list[int] = []
    its: dict[float, list[int]] = {s: [] for s in sleeps}
    with make_cpu_plant("default", **over) as p:
        t_end = time.monotonic() + a.warmup
        while time.monotonic() < t_end:
            p.step(Actuation(sleep_s=0.0, mps_pct=100.0), 1.0)
        block = max(1, a.block)
        for _ in range(0, a.periods, block):
            for s in sleeps:
                p.step(Actuation(sleep_s=s, mps_pct=100.0), a.period)  # settle to this sleep
                for _ in range(block):
                    r = p.step(Actuation(sleep_s=s, mps_pct=100.0), a.period)
                    lat[s].append(r.mean_ms)
                    its[s].append(r.training_iterations)
                    cnt.append(r.count)
    m = {s: float(np.mean(v)) for s, v in lat.items()}
    sd = {s: float(np.std(v, ddof=1)) for s, v in lat.items()}
    mid = sleeps[1]
    rng = m[0.0] - m[sleeps[2]]
    return {"config": over, "period_s": a.period, "periods_per_sleep": len(lat[mid]),
            "sleeps_s": [round(s, 4) for s in sleeps],
            "mean_ms": [round(m[s], 3) for s in sleeps],
            "rms_ms": [round(sd[s], 3) for s in sleeps],
            "scatter_mid_pct_of_mean": round(100 * sd[mid] / m[mid], 2),
            "scatter_mid_pct_of_range": round(100 * sd[mid] / rng, 1) if rng > 0 else None,
            "requests_per_period": round(float(np.mean(cnt)), 1),
            "train_it_per_period": [round(float(np.mean(its[s])), 1) for s in sleeps],
            "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quantum", type=number(0.0, 60.0, lo_open=True, unit="s"), default=0.2,
                    help="run quantum (s)")
    ap.add_argument("--rate", type=number(0.0, 10_000.0, lo_open=True), default=30.0,
                    help="inference batches per second")
    ap.add_argument("--batch", type=integer(1, 100_000), default=256)
    ap.add_argument("--train-batch", type=integer(1, 100_000), default=256)
    ap.add_argument("--infer-threads", type=integer(1, 1024), default=2)
    ap.add_argument("--train-threads", type=integer(1, 1024), default=1)
    ap.add_argument("--backend", default="numpy", choices=("auto", "numpy", "torch"))
    ap.add_argument("--period", type=number(0.05, 3600.0, unit="s"), default=2.0)
    ap.add_argument("--periods", type=integer(1, 100_000), default=8, help="periods per sleep")
    ap.add_argument("--block", type=integer(1, 100_000), default=4,
                    help="periods per block of one sleep")
    ap.add_argument("--mid", type=number(0.0, 1000.0), default=1.0,
                    help="middle sleep, in run quanta")
    ap.add_argument("--top", type=number(0.0, 1000.0), default=2.5,
                    help="top sleep, in run quanta")
    ap.add_argument("--warmup", type=number(0.0, 3600.0, unit="s"), default=6.0,
                    help="seconds before measuring")
    a = ap.parse_args()
    print(json.dumps(measure(a)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
