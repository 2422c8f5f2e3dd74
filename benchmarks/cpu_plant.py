"""The CPU plant closed loop: the whole pipeline on real processes, and the CPU-share knob.

* Closed loop (``gpucontrol demo --plant cpu``, :func:`harness.experiments.pipeline.run_pipeline`):
  identification R² (fit and held-out), then the daemon process on the training with a load
  burst; median |l - SLO|/SLO and the share of periods over 1.05 SLO after the first five
  closed-loop periods, training iterations per period. Targets: median <= 3 %, <= 5 % over
  1.05 SLO, training progressing.
* The plant's floor: right after each closed loop, a fresh plant holds the closed loop's
  median sleep fixed for ``--floor`` periods. Its periods' median |l - median l| / median l and
  share over 1.05 x their median are what a loop that knew the right constant sleep would
  show; the closed loop's figures are also given as ratios to them.
* CPU share (:class:`gpucontrol.node.actuators.cpu_share.CpuShare`): the latency of a share
  change (write and read-back) over ``--resizes`` changes on a busy loop, and the granularity.

    python benchmarks/cpu_plant.py [--runs 1] [--period 4] [--identify 24] [--closed 30]
        [--detune 0.35] [--backend numpy] [--out DIR]

The plant's per-period scatter at fixed sleeps, one setting at a time, is
``benchmarks/cpu_noise.py``.

Every process it starts is resumed and stopped before it exits.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path

# benchmarks/sysid.py would shadow the sysid package the identification imports
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_ROOT = str(_HERE.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

from gpucontrol import Actuation  # noqa: E402
from gpucontrol.errors import ConfigurationError  # noqa: E402
from gpucontrol.node.actuators.cpu_share import CpuShare  # noqa: E402
from harness.args import DefaultsHelpFormatter, OneLineParser, integer, number, out_dir, run_script  # noqa: E402
from harness.experiments.pipeline import run_pipeline  # noqa: E402
from harness.experiments.plants import ExperimentFailed  # noqa: E402
from harness.hil.cpu.plant import make_cpu_plant  # noqa: E402
from harness.results import result_note  # noqa: E402


def fixed_sleep_floor(sleep_s: float, periods: int, period_s: float,
                      backend: str) -> dict[str, object]:
    """Hold one sleep on a fresh CPU plant: the per-period scatter no loop can remove."""
    lat = []
    with make_cpu_plant("default", backend=backend) as p:
        t_end = time.monotonic() + 8.0
        while time.monotonic() < t_end:
            p.step(Actuation(sleep_s=sleep_s, mps_pct=100.0), 1.0)
        for _ in range(periods):
            r = p.step(Actuation(sleep_s=sleep_s, mps_pct=100.0), period_s)
            if r.count > 0:
                lat.append(r.mean_ms)
    x = np.asarray(lat)
    if not len(x):   # no period served a batch: no figure (None, never a NaN in the JSON)
        return {"sleep_s": round(sleep_s, 4), "periods": 0, "median_ms": None,
                "median_dev_pct": None, "over_105_pct": None, "rms_pct": None}
    med = float(np.median(x))
    return {"sleep_s": round(sleep_s, 4), "periods": len(x), "median_ms": round(med, 3),
            "median_dev_pct": round(100 * float(np.median(np.abs(x - med))) / med, 2),
            "over_105_pct": round(100 * float(np.mean(x > 1.05 * med)), 1),
            "rms_pct": round(100 * float(np.std(x, ddof=1)) / med, 2) if len(x) > 1 else None}


def share_resizes(n: int) -> dict[str, object]:
    """Latency of ``n`` share changes on a busy loop (None where no controller is writable)."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        share = CpuShare([p.pid], name=f"gpucontrol-bench-{uuid.uuid4().hex[:8]}")
    except ConfigurationError as exc:
        p.kill()
        p.wait()
        return {"backend": None, "why": str(exc)}
    try:
        cycle = (20.0, 60.0, 35.0, 90.0)     # n changes, not n // 4 cycles of four
        lat = [share.set_share_pct(cycle[k % len(cycle)]) for k in range(n)]
        return {"backend": share.backend, "resizes": len(lat),
                "median_us": round(1e6 * float(np.median(lat)), 1),
                "p99_us": round(1e6 * float(np.percentile(lat, 99)), 1),
                "granularity_pct": share.granularity_pct, "min_share_pct": share.min_share_pct,
                "enforced_within_s": share.period_us / 1e6}
    finally:
        share.close()
        p.kill()
        p.wait()


def main() -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--runs", type=integer(1, 1000), default=1,
                    help="closed loops run, each on a fresh plant")
    ap.add_argument("--period", type=number(0.05, 3600.0, unit="s"), default=4.0,
                    help="control period (s)")
    ap.add_argument("--identify", type=integer(10, 100_000), default=24,
                    help="identification periods per run")
    ap.add_argument("--closed", type=integer(1, 100_000), default=30,
                    help="closed-loop periods per run")
    ap.add_argument("--detune", type=number(0.0, 2.0, lo_open=True, hi_open=True), default=0.35,
                    help="the daemon's --detune")
    ap.add_argument("--backend", default="numpy", choices=("auto", "numpy", "torch"),
                    help="the inference's and training's compute library")
    ap.add_argument("--resizes", type=integer(1, 1_000_000), default=200,
                    help="CPU-share changes timed")
    ap.add_argument("--floor", type=integer(0, 100_000), default=15,
                    help="periods of the fixed-sleep floor after each run (0: skip)")
    ap.add_argument("--out", type=out_dir, default="results/bench_cpu_plant",
                    help="results folder (checked before the benchmark runs)")
    a = ap.parse_args()
    print(f"# CPU plant, {time.strftime('%Y-%m-%d')}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(json.dumps({"cpu_share": share_resizes(a.resizes)}))
    rows = []
    for i in range(a.runs):
        t0 = time.monotonic()
        load0 = os.getloadavg()[0]
        try:
            res = run_pipeline(Path(a.out) / f"run{i}", period_s=a.period,
                               identify_periods=a.identify, closed_periods=a.closed,
                               detune=a.detune, backend=a.backend, progress=False)
        except ExperimentFailed as exc:   # the plant ran, the result was out of reach: say why
            note = result_note(exc)
            print(f"cpu_plant.py: run {i}: {exc}" + (f"; {note}" if note else ""),
                  file=sys.stderr)
            return 1
        keep = ("slo_ms", "identify_r2", "identify_r2_validation", "gain_ms_per_s",
                "offset_ms", "median_abs_err_pct", "over_105_pct", "mean_latency_ms",
                "training_it_per_period", "identify_it_per_period_unslept", "closed_periods",
                "noise_pct_of_slo",
                "daemon_exit")
        row = {k: res[k] for k in keep}
        row["wall_s"] = round(time.monotonic() - t0, 1)
        row["load_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        row["mean_over_slo"] = round(res["mean_latency_ms"] / res["slo_ms"], 3)
        row["median_sleep_s"] = res["median_sleep_s"]
        if a.floor > 0 and res["median_sleep_s"] is not None:
            fl = fixed_sleep_floor(float(res["median_sleep_s"]), a.floor, a.period, a.backend)
            row["floor"] = fl
            if fl["median_dev_pct"] and res["median_abs_err_pct"] is not None:
                row["median_err_over_floor"] = round(
                    float(res["median_abs_err_pct"]) / float(fl["median_dev_pct"]), 2)
        rows.append(row)
        print(json.dumps(row))
    print("| run | R² fit | R² held-out | SLO ms | residual rms % of SLO | median abs err % | "
          "% over 1.05 SLO | mean l / SLO | train it/period (unslept) | load | wall s | "
          "fixed-sleep floor: median dev % / % over 1.05 / rms % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        print(f"| {i} | {r['identify_r2']:.2f} | {r['identify_r2_validation']:.2f} | "
              f"{r['slo_ms']:.2f} | {r['noise_pct_of_slo']} | {r['median_abs_err_pct']} | "
              f"{r['over_105_pct']} | {r['mean_over_slo']} | "
              f"{r['training_it_per_period']} ({r['identify_it_per_period_unslept']}) | "
              f"{r['load_1min'][0]}-{r['load_1min'][1]} | {r['wall_s']} | "
              + (f"{r['floor']['median_dev_pct']} / {r['floor']['over_105_pct']} / "
                 f"{r['floor']['rms_pct']} |" if "floor" in r else "— |"))
    return 0


if __name__ == "__main__":
    run_script(main, "cpu_plant.py")
