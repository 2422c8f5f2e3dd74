"""MPS resize study on the real GPU: restart downtime with and without shadow pre-start, and
the SM share and latency at each training MPS percentage (GPUColo paper, Sec. IV-B, Fig. 4).

For each mode (cold restart, shadow pre-start) one :class:`~harness.hil.gpu_plant.GPUPlant` steps
the training through the MPS levels (default 100, 80, 60, 40, 20 %, sleep 0). After each
change it waits for the restart to finish, lets ``settle_periods`` pass, and measures
``measure_periods`` periods. Writes ``levels.csv`` (one row per mode and level: latency, SM
share, training throughput), ``restarts.csv`` (one row per restart: the actuator's downtime,
the gap between the old process's last and the new one's first iteration, total time),
``summary.md``, ``meta.json`` (the command and the GPU) and ``mps_study.png``.

Run ``python -m harness.hil.mps_study --out docs/results/mps_restart``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.hil._lazy import GPUUnavailableError, gpu_entry_point, require_gpu
from harness.hil.gpu_plant import GPUPlant, GPUPlantConfig
from harness.results import atomic_write_text, save_figure, write_csv

__all__ = ["main", "mps_study"]


def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if isinstance(x, float) and math.isfinite(x)]
    return statistics.fmean(xs) if xs else math.nan


def mps_study(levels: Sequence[float] = (100, 80, 60, 40, 20), *,
              modes: Sequence[str] = ("cold", "shadow"), period_s: float = 4.0,
              settle_periods: int = 1, measure_periods: int = 3,
              config: GPUPlantConfig | None = None,
              restart_timeout_s: float = 300.0) -> tuple[list[dict[str, Any]],
                                                         list[dict[str, Any]]]:
    """Run the study; returns ``(level_rows, restart_rows)``."""
    from gpucontrol import Actuation

    if not levels:
        raise ValueError("levels must not be empty")
    for m in modes:
        if m not in ("cold", "shadow"):
            raise ValueError(f"modes must be 'cold' and/or 'shadow', got {m!r}")
    base = config if config is not None else GPUPlantConfig()
    level_rows: list[dict[str, Any]] = []
    restart_rows: list[dict[str, Any]] = []
    for mode in modes:
        cfg_kw: dict[str, Any] = {"shadow": mode == "shadow", "initial_mps_pct": float(levels[0]),
                  "initial_sleep_s": 0.0}
        if base.workdir is not None:
            cfg_kw["workdir"] = str(Path(base.workdir) / mode)
        with GPUPlant(base, **cfg_kw) as plant:
            if not plant.mps_enabled:
                raise RuntimeError("the MPS study needs MPS (nvidia-cuda-mps-control)")
            for pct in levels:
                act = Actuation(0.0, float(pct))
                plant.step(act, period_s)
                if not plant.wait_idle(restart_timeout_s):
                    raise RuntimeError(f"the restart to {pct:g}% did not finish in "
                                       f"{restart_timeout_s:g} s")
                for _ in range(settle_periods):
                    plant.step(act, period_s)
                res = [plant.step(act, period_s) for _ in range(measure_periods)]
                level_rows.append({
                    "mode": mode, "mps_pct": float(pct),
                    "latency_ms": _mean([r.mean_ms for r in res]),
                    "p99_ms": _mean([r.p99_ms for r in res]),
                    "training_sm_share": _mean([r.training_sm_share for r in res]),
                    "training_throughput": _mean([r.training_throughput for r in res]),
                    "inference_throughput": _mean([r.inference_throughput for r in res]),
                    "batches": sum(r.count for r in res)})
            for r in plant.restart_report():
                restart_rows.append({"mode": mode, **r})
    return level_rows, restart_rows


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows as CSV (union of keys, first-seen order), written atomically."""
    write_csv(rows, path)


def summarize(level_rows: list[dict[str, Any]], restart_rows: list[dict[str, Any]]) -> str:
    """A Markdown summary of the two tables."""
    lines = ["| mode | MPS % | latency ms | training SM share % | training it/s |",
             "|---|---|---|---|---|"]
    for r in level_rows:
        lines.append(f"| {r['mode']} | {r['mps_pct']:g} | {r['latency_ms']:.2f} | "
                     f"{100 * r['training_sm_share']:.1f} | {r['training_throughput']:.2f} |")
    lines += ["", ("| mode | from % | to % | ok | actuator downtime s | iteration gap s | "
                   "total s |"), "|---|---|---|---|---|---|---|"]
    for r in restart_rows:
        lines.append(f"| {r['mode']} | {r['old_pct']:g} | {r['new_pct']:g} | {r['ok']} | "
                     f"{r['downtime_s']:.3f} | {r['gap_s']:.3f} | {r['total_s']:.2f} |")
    for mode in ("cold", "shadow"):
        gaps = [r["gap_s"] for r in restart_rows if r["mode"] == mode and r["ok"]]
        if gaps:
            lines.append(f"\n{mode}: median iteration gap {statistics.median(gaps):.3f} s over "
                         f"{len(gaps)} restarts (max {max(gaps):.3f} s)")
    return "\n".join(lines) + "\n"


def _plot(level_rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in sorted({r["mode"] for r in level_rows}):
        rows = [r for r in level_rows if r["mode"] == mode]
        x = [r["mps_pct"] for r in rows]
        a.plot(x, [r["latency_ms"] for r in rows], "o-", label=mode)
        b.plot(x, [100 * r["training_sm_share"] for r in rows], "o-", label=mode)
    a.set(xlabel="training MPS %", ylabel="inference latency (ms)")
    b.set(xlabel="training MPS %", ylabel="training SM share (%)")
    a.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def _parser() -> argparse.ArgumentParser:
    from harness.args import OneLineParser, add_study_options, name_list, number_list, out_dir

    ap = OneLineParser(prog="python -m harness.hil.mps_study", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=out_dir, default="results/mps_restart")
    ap.add_argument("--levels", type=number_list(1, 100, unit="%", example="100,60,20"),
                    default="100,80,60,40,20", help="training MPS levels, %% in [1, 100]")
    ap.add_argument("--modes", type=name_list(("cold", "shadow")), default="cold,shadow")
    add_study_options(ap, period_s=4.0, measured="periods measured per level")
    return ap


@gpu_entry_point("python -m harness.hil.mps_study")
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    levels, modes = list(args.levels), list(args.modes)
    # before any folder or process: the study needs a CUDA GPU and the MPS control binary
    require_gpu("cupy", "torch", what="the MPS study")
    if shutil.which(GPUPlantConfig.mps_binary) is None:
        raise GPUUnavailableError(f"the MPS study needs MPS, and {GPUPlantConfig.mps_binary} "
                                  "is not installed here (MPS not available)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    level_rows, restart_rows = mps_study(levels, modes=modes, period_s=args.period,
                                         measure_periods=args.measure,
                                         config=GPUPlantConfig(batch=args.batch))
    _write_csv(out / "levels.csv", level_rows)
    _write_csv(out / "restarts.csv", restart_rows)
    atomic_write_text(out / "summary.md", summarize(level_rows, restart_rows))
    meta: dict[str, Any] = {"command": " ".join([sys.executable, "-m", "harness.hil.mps_study",
                                                 *(argv if argv is not None else sys.argv[1:])]),
                            "started_unix": t0, "duration_s": time.time() - t0,
                            "python": platform.python_version()}
    try:
        from harness.hil.gpu_plant import gpu_info

        meta["gpu"] = gpu_info()
    except Exception as exc:
        meta["gpu_error"] = str(exc)
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=2))
    try:
        _plot(level_rows, out / "mps_study.png")
    except Exception as exc:
        print(f"plot skipped: {exc}", file=sys.stderr)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
