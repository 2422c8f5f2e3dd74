"""Cluster simulator benchmark: wall time, GPUs saved, SLO violation, placement effect.

Prints, for the whole openb trace and for the synthetic 57-day trace (both with the GPUColo
paper's inference burst, days 20-40):

* wall time and CPU time per policy run (goals: openb <= 10 s, synthetic <= 60 s, 2 cores);
* mean GPUs, GPUs saved by GPUColo vs No Co-location (paper 74.9 %) and vs GSLICE (50.2 %);
* inference SLO violation rate (paper: GPUColo 1.1 %, GSLICE 27.2 %);
* the effect of the placement policy (first-fit, KACE-style, Mudi-style) on GSLICE and GPUColo;
* the violation rates against the assumed interference strength.

    python benchmarks/cluster.py [--scale 3000] [--placement-scale 300] [--quick]
                                 [--scalar-controllers]

``--scalar-controllers`` steps one ``gpucontrol.TwoTierController`` per GPU instead of the
vectorized ``VectorTwoTier`` (same equations), to measure what the vectorized path buys.
"""

from __future__ import annotations

import os
import platform
import time

from gpucontrol import (
    LinearLatencyModel,
    Measurement,
    OuterMPSOptimizer,
    ShareKnob,
    TwoTierController,
)
from harness.args import DefaultsHelpFormatter, OneLineParser, number, run_script
from harness.cluster import SimConfig, Simulation, inference_burst, load_openb, synthetic
from harness.cluster.figures import saved, window_violation
from harness.cluster.gpucolo import GpuColoController
from harness.cluster.policies import LABELS, PlantParams
from harness.cluster.vcontrol import VectorTwoTier


class ScalarTwoTier(VectorTwoTier):
    """One ``gpucontrol.TwoTierController`` per GPU behind ``VectorTwoTier``'s interface.

    The engine's per-GPU arrays (gain scheduling writes ``kp`` and ``mps_gain``, parking
    reverts ``sleep``, a wake-up sets ``count``) are copied into the GPU's controller before
    each step and its actuation copied back.
    """

    SMALL = 1 << 62      # never the numpy batch path

    def __init__(self, slo, **kw):
        super().__init__(slo, **kw)
        self.ctls = []

    def _ctl(self, g):
        while len(self.ctls) <= g:
            self.ctls.append(TwoTierController(
                LinearLatencyModel(-1.0, self.slo), self.slo,
                outer=OuterMPSOptimizer("paper", every=self.every, threshold=self.threshold),
                sleep=(self.lo, self.hi), share=ShareKnob(bounds_pct=(self.mlo, self.mhi))))
        return self.ctls[g]

    def update_one(self, g, latency, restarting=False):
        c = self._ctl(g)
        s = self.sleep.item(g)
        c.inner.kp = self.kp.item(g)
        c.inner.set_sleep(s)
        c.outer.mps_pct = self.mps.item(g)
        c.outer.mps_gain = self.mps_gain.item(g)
        c.outer.count = self.count.item(g)
        c._hold_left = self.hold.item(g)
        held = restarting or c._hold_left > 0
        a = c.update(Measurement(self.slo if latency != latency else latency, count=1,
                                 restarting=restarting))
        sat = 0 if not a.saturated else (1 if a.sleep_s >= self.hi else -1)
        self.sleep[g] = a.sleep_s
        self.mps[g] = a.mps_pct
        self.count[g] = c.outer.count
        self.hold[g] = c._hold_left
        return s, a.sleep_s, a.mps_changed, sat, held


def run(trace, policy, placement="first-fit"):
    c0 = time.process_time()
    r = Simulation(trace, SimConfig(policy=policy, placement=placement)).run()
    return r, time.process_time() - c0


def table(name, trace, policies, goal_s, burst):
    print(f"\n## {name}: {len(trace)} per-GPU tasks, {trace.days:.1f} days")
    print(f"{'policy':16s} {'mean GPUs':>9s} {'SLO viol':>8s} {'in burst':>8s} "
          f"{'train x':>7s} {'wall s':>7s} {'cpu s':>6s} {'ctl updates':>11s}")
    res = {}
    for pol in policies:
        r, cpu = run(trace, pol)
        res[pol] = r
        print(f"{LABELS[pol]:16s} {r.mean_gpus:9.1f} {100 * r.violation_rate:7.1f}% "
              f"{100 * window_violation(r, *burst):7.1f}% {r.training_slowdown():7.3f} "
              f"{r.wall_s:7.2f} {cpu:6.2f} {r.controller_updates:11d}")
    g, n, s = res["gpucolo"], res["nocolo"], res.get("gslice")
    total = sum(r.wall_s for r in res.values())
    print(f"GPUColo saves {100 * saved(n.mean_gpus, g.mean_gpus):.1f} % of GPUs vs No "
          f"Co-location (paper 74.9 %)" + (
              f", {100 * saved(s.mean_gpus, g.mean_gpus):.1f} % vs GSLICE (paper 50.2 %)"
              if s else ""))
    if s:
        print(f"SLO violation: GPUColo {100 * g.violation_rate:.1f} %, GSLICE "
              f"{100 * s.violation_rate:.1f} % (paper 1.1 % vs 27.2 %)")
    print(f"wall time: GPUColo run {g.wall_s:.1f} s, all {len(res)} policies {total:.1f} s "
          f"(goal <= {goal_s:g} s per run: {'met' if g.wall_s <= goal_s else 'NOT met'})")
    return res


def placements(name, trace, burst):
    print(f"\n## placement effect — {name}: {len(trace)} tasks")
    print(f"{'policy':10s} {'placement':10s} {'mean GPUs':>9s} {'SLO viol':>8s} "
          f"{'train x':>7s} {'wall s':>7s}")
    for pol in ("gslice", "gpucolo"):
        for pl in ("first-fit", "kace", "mudi"):
            r, _ = run(trace, pol, pl)
            extra = f"  (KACE R^2 {r.kace_r2:.3f})" if pl == "kace" else ""
            print(f"{LABELS[pol]:10s} {pl:10s} {r.mean_gpus:9.1f} "
                  f"{100 * r.violation_rate:7.1f}% {r.training_slowdown():7.3f} "
                  f"{r.wall_s:7.2f}{extra}")


def sensitivity(scale: float) -> None:
    """SLO violation and savings against the interference strength (an assumption)."""
    tr = inference_burst(synthetic(days=57, target_gpus=scale, seed=0), 20, 40)
    print(f"\n## interference strength — synthetic 57 days, scale {scale:g}: {len(tr)} tasks")
    print(f"{'gamma':>5s} {'GSLICE viol':>11s} {'GPUColo viol':>12s} {'saved vs GSLICE':>15s} "
          f"{'GPUColo train x':>15s}")
    for gamma in (0.0, 0.25, 0.5, 1.0):
        plant = PlantParams(interference=gamma)
        s = Simulation(tr, SimConfig(policy="gslice", plant=plant)).run()
        g = Simulation(tr, SimConfig(policy="gpucolo", plant=plant)).run()
        print(f"{gamma:5.2f} {100 * s.violation_rate:10.1f}% {100 * g.violation_rate:11.1f}% "
              f"{100 * saved(s.mean_gpus, g.mean_gpus):14.1f}% {g.training_slowdown():15.2f}")


def main() -> None:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    # below one busy GPU the synthetic traces thin out to no task: tables of nan
    ap.add_argument("--scale", type=number(1.0, 1e6), default=3000.0,
                    help="synthetic: mean busy GPUs under No Co-location (paper ~3059), in "
                         "[1, 1e6]")
    ap.add_argument("--placement-scale", type=number(1.0, 1e6), default=300.0,
                    help="synthetic trace of the placement and interference tables: mean "
                         "busy GPUs, in [1, 1e6]")
    ap.add_argument("--quick", action="store_true", help="synthetic at 1/10 scale")
    ap.add_argument("--scalar-controllers", action="store_true",
                    help="one gpucontrol.TwoTierController per GPU instead of VectorTwoTier")
    args = ap.parse_args()
    if args.scalar_controllers:
        GpuColoController.backend = ScalarTwoTier
    scale = args.scale / 10 if args.quick else args.scale
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cores = os.cpu_count()
    print(f"python {platform.python_version()} on {platform.machine()}, "
          f"{cores} core{'s' if cores != 1 else ''}, load average {load:.1f} at start")
    burst = (20.0, 40.0)
    pols = ("nocolo", "separate", "simple", "conservative", "gslice", "gpucolo")
    t0 = time.perf_counter()
    openb = inference_burst(load_openb(), *burst)
    print(f"openb loaded in {time.perf_counter() - t0:.2f} s; {openb.report.summary()}")
    table("openb (whole trace, burst days 20-40)", openb, pols, 10, burst)
    dense = inference_burst(load_openb().window(112, 38), 13, 26)
    table("openb days 112-150 (where its arrivals are), burst days 13-26", dense, pols, 10,
          (13, 26))
    syn = inference_burst(synthetic(days=57, target_gpus=scale, seed=0), *burst)
    table(f"synthetic 57 days, scale {scale:g} GPUs", syn,
          ("nocolo", "separate", "gslice", "gpucolo"), 60, burst)
    placements(f"synthetic 57 days, scale {args.placement_scale:g}",
               inference_burst(synthetic(days=57, target_gpus=args.placement_scale, seed=0),
                               *burst), burst)
    placements("openb days 112-150", dense, (13, 26))
    sensitivity(args.placement_scale / 2)


if __name__ == "__main__":
    run_script(main, "cluster.py")
