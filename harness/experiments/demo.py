"""``gpucontrol demo``: the burst experiment on the simulated plant, with a progress bar,
results in ./results/ and a per-controller table on stdout."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from harness.experiments.burst import burst
from harness.experiments.common import ExperimentResult

__all__ = ["demo", "format_table"]

TABLE_COLUMNS = ("controller", "mean_latency_ms", "pct_over", "inference_throughput",
                 "training_throughput", "training_vs_oracle", "training_vs_gslice")
TABLE_HEADERS = ("controller", "mean latency (ms)", "% periods > 1.05 SLO",
                 "inference (img/s)", "training (it/s)", "training vs Oracle",
                 "training vs GSLICE-ext")


def format_table(res: ExperimentResult) -> str:
    """The demo's plain-text table (aligned columns)."""
    rows = [TABLE_HEADERS]
    for r in res.summary:
        rows.append((r["controller"], _f(r["mean_latency_ms"], 1), _f(r["pct_over"], 1),
                     _f(r["inference_throughput"], 0), _f(r["training_throughput"], 3),
                     _f(r["training_vs_oracle"], 2, "x"), _f(r["training_vs_gslice"], 2, "x")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEADERS))]
    lines = []
    for j, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _f(v: Any, digits: int, suffix: str = "") -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    return "—" if not math.isfinite(x) else f"{x:.{digits}f}{suffix}"


def demo(*, out_dir: str | Path = "results", seed: int = 0, duration_s: float = 400.0,
         plant: str = "sim", progress: bool | None = None, stream: TextIO | None = None,
         **kw: Any) -> ExperimentResult:
    """Run the burst experiment and print the per-controller table.

    Without ``burst_s`` the burst covers 22.5-72.5 % of the run (90-290 s of the paper's
    400 s); other keywords go to :func:`harness.experiments.burst.burst`.

    Parameters
    ----------
    out_dir : str or Path
        Results folder (the burst files go to ``out_dir/burst``).
    seed : int
        Seed of the plant.
    duration_s : float
        Length of each run, s.
    plant : str
        Plant kind from the registry.
    progress : bool or None
        Progress bar on stderr (None: when stderr is a terminal).
    stream : TextIO or None
        Where the table is printed (None: stdout).
    **kw : Any
        More arguments of :func:`~harness.experiments.burst.burst`.

    Returns
    -------
    ExperimentResult
        The burst result.
    """
    out = stream if stream is not None else sys.stdout
    if "burst_s" not in kw:   # the Fig 8 burst (90-290 s of 400 s), scaled to the duration
        kw["burst_s"] = (0.225 * duration_s, 0.725 * duration_s)
    t0 = time.perf_counter()
    res = burst(plant=plant, seed=seed, duration_s=duration_s, out_dir=Path(out_dir) / "burst",
                progress=progress, **kw)
    el = time.perf_counter() - t0
    m = res.meta
    print(f"Burst on the {m['plant']} plant: batch {m['batches'][0]} -> {m['batches'][1]} "
          f"from {m['burst_s'][0]:g} s to {m['burst_s'][1]:g} s, SLO {m['slo_ms']:g} ms, "
          f"{m['duration_s']:g} s, control period {m['period_s']:g} s, seed {m['seed']}.",
          file=out)
    print(format_table(res), file=out)
    print(f"\nThroughputs are means over the run; 'vs' columns divide training throughput "
          f"by the Oracle's and GSLICE-extended's. ({el:.1f} s)", file=out)
    print("Results: " + ", ".join(str(f) for f in res.files), file=out)
    return res
