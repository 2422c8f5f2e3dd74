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
be shared). A period with no samples (a failed or late scrape on a loaded machine, or no
batch served) is left out of the figures and counted in ``empty_periods`` (per sleep); a
figure that cannot be computed (no usable period for a mean, fewer than two for an rms) is
``null`` and named in ``not_computed``, with a line on stderr and exit status 1. Every process
it starts is resumed and stopped before it exits.
"""

from __future__ import annotations

import argparse
import json
import math
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
from harness.args import DefaultsHelpFormatter, OneLineParser, integer, number, run_script  # noqa: E402
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
        for start in range(0, a.periods, block):
            for s in sleeps:
                p.step(Actuation(sleep_s=s, mps_pct=100.0), a.period)  # settle to this sleep
                for _ in range(min(block, a.periods - start)):  # the last block: what is left
                    r = p.step(Actuation(sleep_s=s, mps_pct=100.0), a.period)
                    lat[s].append(r.mean_ms)
                    its[s].append(r.training_iterations)
                    cnt.append(r.count)
    return {"config": over, "period_s": a.period,
            **figures(sleeps, lat, its, cnt),
            "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def _usable(v: list[float]) -> list[float]:
    """The periods that measured something: a period with no samples (a failed or late
    scrape on a loaded machine, or no batch served) reads NaN and is left out."""
    return [x for x in v if math.isfinite(x)]


def figures(sleeps: tuple[float, float, float], lat: dict[float, list[float]],
            its: dict[float, list[int]], cnt: list[int]) -> dict[str, object]:
    """The figures from the per-period means, empty periods skipped and counted.

    A figure that cannot be computed (no usable period for a mean, fewer than two for an rms)
    is None and named in ``not_computed``; the result never holds a NaN.
    """
    ok = {s: _usable(v) for s, v in lat.items()}
    m = {s: float(np.mean(v)) if v else None for s, v in ok.items()}
    sd = {s: float(np.std(v, ddof=1)) if len(v) > 1 else None for s, v in ok.items()}
    mid, top = sleeps[1], sleeps[2]
    sd_mid, m_mid, m0, m_top = sd[mid], m[mid], m[0.0], m[top]
    pct_mean = 100 * sd_mid / m_mid if sd_mid is not None and m_mid else None
    rng = m0 - m_top if m0 is not None and m_top is not None else None
    pct_rng = 100 * sd_mid / rng if sd_mid is not None and rng is not None and rng > 0 else None
    out: dict[str, object] = {
        "periods_per_sleep": len(lat[mid]),
        "empty_periods": [len(lat[s]) - len(ok[s]) for s in sleeps],
        "sleeps_s": [round(s, 4) for s in sleeps],
        "mean_ms": [None if m[s] is None else round(m[s], 3) for s in sleeps],
        "rms_ms": [None if sd[s] is None else round(sd[s], 3) for s in sleeps],
        "scatter_mid_pct_of_mean": None if pct_mean is None else round(pct_mean, 2),
        "scatter_mid_pct_of_range": None if pct_rng is None else round(pct_rng, 1),
        "requests_per_period": round(float(np.mean(cnt)), 1),
        "train_it_per_period": [round(float(np.mean(its[s])), 1) for s in sleeps]}
    out["not_computed"] = [k for k in ("mean_ms", "rms_ms") if None in out[k]] + (
        ["scatter_mid_pct_of_mean"] if pct_mean is None else [])
    return out


def main() -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--quantum", type=number(0.0, 60.0, lo_open=True, unit="s"), default=0.2,
                    help="run quantum (s)")
    ap.add_argument("--rate", type=number(0.0, 10_000.0, lo_open=True), default=30.0,
                    help="inference batches per second")
    ap.add_argument("--batch", type=integer(1, 100_000), default=256,
                    help="inference batch (a burst's is a quarter larger)")
    ap.add_argument("--train-batch", type=integer(1, 100_000), default=256,
                    help="training batch")
    ap.add_argument("--infer-threads", type=integer(1, 1024), default=2,
                    help="the inference's compute threads")
    ap.add_argument("--train-threads", type=integer(1, 1024), default=1,
                    help="the training's compute threads")
    ap.add_argument("--backend", default="numpy", choices=("auto", "numpy", "torch"),
                    help="the inference's and training's compute library")
    ap.add_argument("--period", type=number(0.05, 3600.0, unit="s"), default=2.0,
                    help="control period (s): one latency figure per period")
    ap.add_argument("--periods", type=integer(1, 100_000), default=8, help="periods per sleep")
    ap.add_argument("--block", type=integer(1, 100_000), default=4,
                    help="periods per block of one sleep")
    ap.add_argument("--mid", type=number(0.0, 1000.0), default=1.0,
                    help="middle sleep, in run quanta (> 0)")
    ap.add_argument("--top", type=number(0.0, 1000.0), default=2.5,
                    help="top sleep, in run quanta (> --mid)")
    ap.add_argument("--warmup", type=number(0.0, 3600.0, unit="s"), default=6.0,
                    help="seconds before measuring")
    a = ap.parse_args()
    if not 0 < a.mid < a.top:   # one sleep twice: its periods were pooled, the figures wrong
        ap.error(f"--mid {a.mid:g} and --top {a.top:g}: three distinct sleeps need "
                 "0 < --mid < --top")
    out = measure(a)
    print(json.dumps(out, allow_nan=False), flush=True)
    if out["not_computed"]:
        print(f"cpu_noise: could not compute {', '.join(map(str, out['not_computed']))}: "
              f"periods with no samples per sleep {out['empty_periods']} of "
              f"{out['periods_per_sleep']} (a failed or late scrape, or no batch served, "
              "on a loaded machine); an rms needs two usable periods. Rerun with more "
              "--periods or on a quieter machine.", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    run_script(main, "cpu_noise.py")
