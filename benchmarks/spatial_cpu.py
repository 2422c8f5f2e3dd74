"""CPU side of the restart-free (green-context) share change: what it costs without the GPU.

* daemon side: ``GreenContextBackend.set_share_pct`` -- one publish into the hook file (mmap);
* training side: ``PartitionSwitcher.boundary()`` at an iteration boundary -- read the hook
  file, pick the partition, log a switch -- with and without a change of share, over the
  simulated pool (the GPU part, the first kernel on the new partition's stream, is measured
  by the ``spatial`` hardware step).

Goal for the whole green-context switch: < 1 ms.

    python benchmarks/spatial_cpu.py [--n 20000]
"""

from __future__ import annotations

import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from gpucontrol.node.actuators.spatial import GreenContextBackend
from gpucontrol.node.hooks import HookReader, HookWriter
from harness.args import DefaultsHelpFormatter, OneLineParser, integer, run_script
from harness.hil.green_emulator import PartitionSwitcher, SimulatedPool


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    # every other boundary meets a change of share: one of each needs two (--n 1 died in
    # statistics.median of none)
    ap.add_argument("--n", type=integer(2, 100_000_000), default=20000,
                    help="publishes and boundaries timed, in [2, 1e8] (half the boundaries "
                         "meet a change of share)")
    n = ap.parse_args().n
    with tempfile.TemporaryDirectory() as d:
        w = HookWriter(Path(d) / "gpu.hook")
        b = GreenContextBackend(w, granularity_pct=100 * 8 / 132, shares_pct=(25, 50, 75))
        shares = [25, 50, 75, 100]
        pub = [b.set_share_pct(shares[i % 4]) for i in range(n)]
        sw = PartitionSwitcher(SimulatedPool((25, 50, 75)).open(), HookReader(w.path).share_pct,
                               lambda p: p.stream, log_path=str(Path(d) / "sw.csv"))
        same, change = [], []
        for i in range(n):
            if i % 2:
                w.set_share(shares[(i // 2) % 4] if shares[(i // 2) % 4] < 100 else None)
            t = time.perf_counter()
            k = len(sw.switches)
            sw.boundary()
            dt = time.perf_counter() - t
            (change if len(sw.switches) > k else same).append(dt)
        sw.close()
        w.close()
    out = {"python": platform.python_version(), "n": n}
    for name, xs in (("publish", pub), ("boundary_no_change", same),
                     ("boundary_with_switch", change)):
        out[name] = {"p50_us": 1e6 * statistics.median(xs), "p99_us": 1e6 * pct(xs, 0.99),
                     "count": len(xs)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    run_script(main, "spatial_cpu.py")
