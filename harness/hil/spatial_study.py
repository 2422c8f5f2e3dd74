"""The ``spatial`` hardware step: restart-free SM shares (green contexts) vs MPS restarts vs
sleeping, on the real GPU.

Three phases, each in its own ``try`` so one failing leaves the others' results:

1. ``probe`` (a child process, so that this one never holds a CUDA context that could keep
   the MPS server of the next phase from starting; no co-location): a
   :class:`~harness.hil.green_ctx.GreenContextPool`
   with one partition per share; per partition the SM count the driver gave, the SMs a
   %smid sample on its stream reaches (``smid_fraction``), the time of a fixed matmul batch
   (work rate per share), and the switch cost: ``select`` plus the first kernel on the new
   partition vs the same kernel on the partition already in use (goal: < 1 ms).
2. ``plant``, per backend, at each share: ``green-context`` (:class:`~harness.hil.
   spatial_plant.GreenGPUPlant`; the command goes through the hook file; with
   ``green-context+mps``, on request, both processes are also MPS clients), ``mps-restart``
   (:class:`~harness.hil.gpu_plant.GPUPlant`, shadow pre-start) and ``sleep`` (the green
   plant at 100 %, with the sleep that gives the same duty as the share:
   ``sleep = iter * (100 / share - 1)``). After each change: the resize latency, the
   inference latency in the first period after it and in ``measure`` steady periods, the
   training's %smid share and throughput.
3. outputs: ``partitions.csv``, ``levels.csv``, ``resizes.csv``, ``summary.md``,
   ``meta.json``, ``spatial.png``; ``python -m harness.hil.readme`` drafts the README.

``--dry-run`` prints the plan (phases, levels, the time each should take) as JSON and needs no
GPU. Run ``python -m harness.hil.spatial_study --out docs/results/spatial``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.hil._lazy import gpu_entry_point, require_gpu
from harness.results import atomic_write_text, markdown_table, read_csv, save_figure, write_csv

__all__ = ["BACKENDS", "main", "plan", "probe_partitions", "readme_section", "run_plant"]

BACKENDS = ("green-context", "mps-restart", "sleep", "green-context+mps")
#: What the campaign step runs; ``green-context+mps`` (green contexts inside MPS clients: how
#: the two combine) is extra, ``--backends green-context+mps``.
DEFAULT_BACKENDS = BACKENDS[:3]
#: Seconds a plant needs to start (MPS daemon, calibration, ResNet-50 warm-up), and an MPS
#: shadow restart (CuPy init + calibration load) -- rough, for the plan.
START_S, RESTART_S = 60.0, 20.0
GREEN_GOAL_S = 1e-3


def _mean(xs: Sequence[Any]) -> float:
    v = [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(float(x))]
    return statistics.fmean(v) if v else math.nan


def plan(backends: Sequence[str] = DEFAULT_BACKENDS, shares: Sequence[float] = (100, 75, 50, 25), *,
         period_s: float = 2.0, measure: int = 3, probe: bool = True) -> list[dict[str, Any]]:
    """The phases the study will run and their expected duration (s).

    Parameters
    ----------
    backends : sequence of str
        Any of :data:`BACKENDS`.
    shares : sequence of float
        Training shares, % in (0, 100].
    period_s : float
        Control period, s.
    measure : int
        Steady periods measured per level (plus one right after the change).
    probe : bool
        Whether the in-process partition probe runs first.

    Returns
    -------
    list[dict]
        One entry per phase: ``phase``, ``backend``, ``shares``, ``expected_s``.
    """
    bad = [b for b in backends if b not in BACKENDS]
    if bad:
        raise ValueError(f"backends must be among {', '.join(BACKENDS)}, got {', '.join(bad)}")
    for s in shares:
        if not 0 < float(s) <= 100:
            raise ValueError(f"shares must be in (0, 100], got {s!r}")
    if not (period_s > 0 and measure >= 1):
        raise ValueError(f"need period_s > 0 and measure >= 1, got {period_s!r}, {measure!r}")
    per_level = (measure + 1) * period_s
    out: list[dict[str, Any]] = []
    if probe:
        out.append({"phase": "probe", "backend": "green-context", "shares": list(shares),
                    "expected_s": 15.0 + 2.0 * len(shares)})
    for b in backends:
        extra = RESTART_S if b == "mps-restart" else 0.0
        out.append({"phase": "plant", "backend": b, "shares": list(shares),
                    "expected_s": START_S + len(shares) * (per_level + extra)})
    return out


# ---- phase 1: the partitions themselves ---------------------------------------------------------
def probe_partitions(shares: Sequence[float], *, matrix_n: int = 4096, matmuls: int = 20,
                     cupy: Any = None, lib: Any = None, sampler: Any = None
                     ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per partition of the pool (every share asked for, and 100 %, the full device): SMs
    given, SMs reached (%smid: visited, and held at once), matmul time, switch cost.

    Parameters
    ----------
    shares : sequence of float
        Shares, %.
    matrix_n, matmuls : int
        The fixed work timed on each partition.
    cupy, lib, sampler : module/object, optional
        CuPy, the driver library and the %smid sampler (injected by tests).

    Returns
    -------
    tuple[list[dict], dict]
        The rows and the pool's description.
    """
    from harness.hil._lazy import require
    from harness.hil.green_pools import open_pool
    from harness.hil.smid import SMIDSampler

    cp = cupy if cupy is not None else require("cupy")
    dev = cp.cuda.Device().id
    a = cp.ones((matrix_n, matrix_n), dtype=cp.float32)
    c = cp.empty_like(a)
    sampler = sampler if sampler is not None else SMIDSampler(cupy=cp)
    rows: list[dict[str, Any]] = []
    with open_pool(tuple(shares), device=dev, lib=lib) as pool:
        streams = {p.stream: cp.cuda.ExternalStream(p.stream, dev) for p in pool.partitions}
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()

        def timed(stream: Any, n: int) -> float:
            ev0.record(stream)
            with stream:
                for _ in range(n):
                    cp.matmul(a, a, out=c)
            ev1.record(stream)
            ev1.synchronize()
            return float(cp.cuda.get_elapsed_time(ev0, ev1)) / 1e3

        prev = pool.select(None)
        timed(streams[prev.stream], 2)  # warm-up on the full device
        # every partition the pool made, the full device included: the rows a reader compares
        for part in sorted(pool.partitions, key=lambda p: -p.share_pct):
            t0 = time.perf_counter()
            part = pool.select(part.share_pct)
            s = streams[part.stream]
            with s:
                cp.matmul(a, a, out=c)
            s.synchronize()
            first_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            with s:
                cp.matmul(a, a, out=c)
            s.synchronize()
            steady_s = time.perf_counter() - t1
            seen: set[int] = set()
            peak = 0
            for _ in range(5):
                smp = sampler.sample(s)
                seen.update(smp.sm_ids)
                peak = max(peak, smp.peak_sms or 0)
            rows.append({"share_pct": part.share_pct, "sm_count": part.sm_count,
                         "sm_given_fraction": part.sm_count / pool.total_sms,
                         "smid_n_sms": len(seen), "smid_fraction": len(seen) / pool.total_sms,
                         "smid_peak_n_sms": peak,
                         "matmul_s": timed(s, matmuls) / matmuls,
                         "select_s": pool.select_s[-1],
                         "switch_first_kernel_s": first_s, "steady_kernel_s": steady_s,
                         "switch_overhead_s": first_s - steady_s, "create_s": part.create_s})
            prev = part
        desc = pool.describe()
    return rows, desc


# ---- phase 2: co-located, per backend -----------------------------------------------------------
def run_plant(backend: str, shares: Sequence[float], *, period_s: float = 2.0,
              measure: int = 3, batch: int = 105, restart_timeout_s: float = 300.0,
              base: Any = None, training_backend: str = "cupy-green"
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One backend through the shares; returns ``(level_rows, resize_rows)``.

    Parameters
    ----------
    backend : str
        One of :data:`BACKENDS`.
    shares : sequence of float
        Training shares, %.
    period_s, measure : float, int
        Control period and steady periods per level.
    batch : int
        Inference batch.
    restart_timeout_s : float
        Longest wait for an MPS restart.
    base : GPUPlantConfig, optional
        The plant set-up to start from (tests: the CPU stand-ins); ``batch`` still applies.
    training_backend : str
        The green plant's training on partitions (``"cupy-green"``, ``"torch"``;
        ``"numpy-green"`` / ``"torch-dry-run"``: CPU dry runs); the MPS-restart plant runs the
        same training (the emulator, or PyTorch for the two torch ones).

    Returns
    -------
    tuple[list[dict], list[dict]]
        Per level and per resize.
    """
    from gpucontrol import Actuation
    from harness.hil.gpu_plant import GPUPlant, GPUPlantConfig
    from harness.hil.spatial_plant import GreenGPUPlant

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    levels: list[dict[str, Any]] = []
    resizes: list[dict[str, Any]] = []
    plant: Any
    cfg = base if base is not None else GPUPlantConfig()
    if backend == "mps-restart":
        plant = GPUPlant(cfg, batch=batch, shadow=True, initial_mps_pct=float(shares[0]),
                         training="torch" if training_backend.startswith("torch")
                         else cfg.training)
    else:
        plant = GreenGPUPlant(cfg, shares_pct=tuple(float(s) for s in shares),
                              training_backend=training_backend, batch=batch,
                              mps_enabled=backend == "green-context+mps", initial_mps_pct=100.0)
    with plant:
        if backend in ("mps-restart", "green-context+mps") and not plant.mps_enabled:
            raise RuntimeError(f"{backend} needs MPS (nvidia-cuda-mps-control)")
        iter_s = float((getattr(plant, "calibration", None) or {}).get("target_iter_s", 0.2))
        for share in shares:
            if backend == "sleep":
                act = Actuation(iter_s * (100.0 / float(share) - 1.0), 100.0)
            else:
                act = Actuation(0.0, float(share))
            t0 = time.time()
            first = plant.step(act, period_s)
            if backend == "mps-restart":
                plant.wait_idle(restart_timeout_s)
                first = plant.step(act, period_s)  # the first full period at the new share
            resize_s = time.time() - t0 if backend == "mps-restart" else math.nan
            res = [plant.step(act, period_s) for _ in range(measure)]
            levels.append({
                "backend": backend, "share_pct": float(share), "sleep_s": act.sleep_s,
                "latency_first_ms": first.mean_ms, "latency_ms": _mean([r.mean_ms for r in res]),
                "p99_ms": _mean([r.p99_ms for r in res]),
                "training_sm_share": _mean([r.training_sm_share for r in res]),
                "training_throughput": _mean([r.training_throughput for r in res]),
                "inference_throughput": _mean([r.inference_throughput for r in res]),
                "resize_wall_s": resize_s})
        if backend == "mps-restart":
            for r in plant.restart_report():
                resizes.append({"backend": backend, "share_pct": r["new_pct"],
                                "latency_s": r["total_s"], "downtime_s": r["downtime_s"],
                                "gap_s": r["gap_s"], "ok": r["ok"]})
        elif backend.startswith("green-context"):
            for r in plant.switch_report():
                resizes.append({"backend": backend, "share_pct": r["share_pct"],
                                "latency_s": r["delay_s"], "switch_s": r["switch_s"],
                                "sm_count": r["sm_count"], "ok": math.isfinite(r["delay_s"])})
    return levels, resizes


# ---- outputs ------------------------------------------------------------------------------------
def summarize(parts: list[dict[str, Any]], levels: list[dict[str, Any]],
              resizes: list[dict[str, Any]]) -> str:
    """Markdown tables of the three CSVs and the verdicts.

    Parameters
    ----------
    parts, levels, resizes : list of dict
        The rows of ``partitions.csv``, ``levels.csv``, ``resizes.csv``.

    Returns
    -------
    str
        Markdown.
    """
    out = []
    if parts:
        out += ["## Green-context partitions (in-process probe)", "", markdown_table(
            parts, ["share_pct", "sm_count", "smid_n_sms", "smid_fraction"]
            + (["smid_peak_n_sms"] if "smid_peak_n_sms" in parts[0] else [])
            + ["matmul_s", "select_s", "switch_overhead_s"], digits=4), ""]
    if levels:
        out += ["## Per backend and share (co-located with ResNet-50 inference)", "",
                markdown_table(levels, ["backend", "share_pct", "sleep_s", "latency_first_ms",
                                        "latency_ms", "p99_ms", "training_sm_share",
                                        "training_throughput"], digits=3), ""]
    if resizes:
        out += ["## Resize latency", ""]
        for b in sorted({r["backend"] for r in resizes}):
            lat = [float(r["latency_s"]) for r in resizes if r["backend"] == b
                   and isinstance(r.get("latency_s"), float) and math.isfinite(r["latency_s"])]
            if lat:
                out.append(f"- {b}: median {statistics.median(lat):.4f} s, max {max(lat):.4f} s "
                           f"over {len(lat)} changes")
        sw = [float(r["switch_s"]) for r in resizes if isinstance(r.get("switch_s"), float)
              and math.isfinite(r["switch_s"])]
        if sw:
            verdict = "met" if statistics.median(sw) < GREEN_GOAL_S else "**not met**"
            med_ms = 1e3 * statistics.median(sw)
            out.append(f"- green-context in-process switch: median {med_ms:.3f} ms (goal < 1 "
                       f"ms: {verdict}); the training follows at its next iteration boundary"
                       ", so the effective delay is up to one iteration")
        out.append("")
    by = {(r["backend"], r["share_pct"]): r for r in levels}
    cmp_rows = []
    for s in sorted({r["share_pct"] for r in levels}, reverse=True):
        g, z = by.get(("green-context", s)), by.get(("sleep", s))
        if g and z:
            lat_ok = g["latency_ms"] <= z["latency_ms"]
            thr_ok = g["training_throughput"] >= z["training_throughput"]
            verdict = ("spatial better" if lat_ok and thr_ok else "sleep better"
                       if not lat_ok and not thr_ok else "trade-off")
            cmp_rows.append({"share_pct": s, "green latency ms": g["latency_ms"],
                             "sleep latency ms": z["latency_ms"],
                             "green it/s": g["training_throughput"],
                             "sleep it/s": z["training_throughput"], "verdict": verdict})
    if cmp_rows:
        out += ["## Spatial (green context) vs sleeping at the same nominal share", "",
                markdown_table(cmp_rows, list(cmp_rows[0]), digits=3),
                "Spatial sharing beats sleeping at a share when it gives lower inference "
                "latency at no less training throughput (or more throughput at equal latency).",
                ""]
    return "\n".join(out) + "\n"


def _plot(parts: list[dict[str, Any]], levels: list[dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for bk in sorted({r["backend"] for r in levels}):
        rows = [r for r in levels if r["backend"] == bk]
        a.plot([r["training_throughput"] for r in rows], [r["latency_ms"] for r in rows], "o-",
               label=bk)
    a.set(xlabel="training throughput (it/s)", ylabel="inference latency (ms)")
    if levels:
        a.legend()
    if parts:
        x = [r["share_pct"] for r in parts]
        b.plot(x, [100 * r["sm_given_fraction"] for r in parts], "s--", label="SMs given")
        b.plot(x, [100 * r["smid_fraction"] for r in parts], "o-",
               label="SMs visited (%smid union)")
        if "smid_peak_n_sms" in parts[0]:
            b.plot(x, [100 * r["smid_peak_n_sms"] / (r["sm_count"] / r["sm_given_fraction"])
                       for r in parts], "x-", label="SMs held at once (%smid peak)")
    for bk in ("green-context", "mps-restart", "green-context+mps"):
        rows = [r for r in levels if r["backend"] == bk]
        if rows:  # the training's time-weighted %smid share, co-located
            b.plot([r["share_pct"] for r in rows],
                   [100 * r["training_sm_share"] for r in rows], "^:",
                   label=f"{bk}, co-located (time-weighted)")
    if parts or levels:
        b.plot([0, 100], [0, 100], ":", color="grey")
        b.legend()
    b.set(xlabel="commanded share (%)", ylabel="SM share (%)")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def readme_section(folder: Path, sim: bool) -> list[str]:
    """The README section of a ``spatial/`` result folder (for :mod:`harness.hil.readme`).

    Parameters
    ----------
    folder : Path
        The result folder.
    sim : bool
        Unused (no simulated reference for green contexts).

    Returns
    -------
    list[str]
        Markdown lines.
    """
    def load(name: str) -> list[dict[str, Any]]:
        return read_csv(folder / name) if (folder / name).is_file() else []

    text = summarize(load("partitions.csv"), load("levels.csv"), load("resizes.csv"))
    out = [text.strip(), "",
           ("The GPUColo paper (Chen et al., ICDCS 2024) changes the share only by an MPS "
            "restart (5-15 s); the simulated plant has no restart-free knob, so there is no "
            "simulated column here.")]
    info = folder / "gpu.json"
    if info.is_file():
        try:
            found = json.loads(info.read_text()).get("spatial_backends") or []
        except ValueError:
            found = []
        if found:
            out += ["", "Backends found at start-up (`detect_backends`): " + "; ".join(
                f"{b['name']}: " + ("available" if b["available"] else f"no ({b['reason']})")
                for b in found) + "."]
    errs = folder / "errors.txt"
    if errs.is_file():
        out += ["", "Phases that failed (see errors.txt): " + ", ".join(
            line.split(":", 1)[0] for line in errs.read_text().splitlines()
            if line and not line.startswith(" "))]
    return out


def _probe_child(out: Path, shares: Sequence[float], timeout_s: float = 180.0
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the probe in a child process (``--probe-only``); its rows and pool description."""
    import subprocess

    argv = [sys.executable, "-m", "harness.hil.spatial_study", "--probe-only", "--out",
            str(out), "--shares", ",".join(f"{s:g}" for s in shares)]
    r = subprocess.run(argv, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError(f"the partition probe exited with {r.returncode}")
    return read_csv(out / "partitions.csv"), json.loads((out / "pool.json").read_text())


def _parser() -> argparse.ArgumentParser:
    from harness.args import OneLineParser, add_study_options, out_dir

    ap = OneLineParser(prog="python -m harness.hil.spatial_study", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=out_dir, default="results/spatial")
    ap.add_argument("--backends", default=",".join(DEFAULT_BACKENDS),
                    help=f"any of {', '.join(BACKENDS)} (default: the first three)")
    ap.add_argument("--shares", default="100,75,50,25", help="training shares, %% in (0, 100]")
    add_study_options(ap, period_s=2.0, measured="steady periods measured per share")
    ap.add_argument("--training", choices=("emulator", "torch"), default="emulator",
                    help="the training: the CuPy matmul emulator (default) or the PyTorch "
                         "ResNet-18 (python -m harness.hil.torch_training)")
    ap.add_argument("--no-probe", action="store_true")
    ap.add_argument("--probe-only", action="store_true",
                    help="run the partition probe here and write partitions.csv, pool.json")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU)")
    return ap


def _shares(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--shares takes numbers in (0, 100] separated by commas, got "
                         f"{text!r}") from None


@gpu_entry_point("python -m harness.hil.spatial_study")
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        shares = _shares(args.shares)
        steps = plan(backends, shares, period_s=args.period, measure=args.measure,
                     probe=not args.no_probe)
    except ValueError as exc:
        print(f"spatial_study: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if not args.dry_run:  # before any folder or process: the GPU packages and a device
        need = ("torch",) if args.training == "torch" and args.no_probe else ("cupy", "torch")
        require_gpu(*need, what="the spatial study")
    if args.probe_only:  # the child of the probe phase: this process may hold a CUDA context
        out.mkdir(parents=True, exist_ok=True)
        rows, pool = probe_partitions(shares)
        write_csv(rows, out / "partitions.csv")
        atomic_write_text(out / "pool.json", json.dumps(pool, indent=2))
        return 0
    if args.dry_run:
        print(json.dumps({"plan": steps, "expected_s": sum(s["expected_s"] for s in steps)},
                         indent=2))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    parts: list[dict[str, Any]] = []
    levels: list[dict[str, Any]] = []
    resizes: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"command": " ".join([sys.executable, "-m",
                                                 "harness.hil.spatial_study",
                                                 *(argv if argv is not None else sys.argv[1:])]),
                            "plan": steps, "python": platform.python_version()}
    errors: list[str] = []
    for st in steps:
        name = f"{st['phase']} {st['backend']}"
        print(f"[spatial] {name}: ~{st['expected_s']:.0f} s", file=sys.stderr, flush=True)
        try:
            if st["phase"] == "probe":
                parts, meta["pool"] = _probe_child(out, shares)
            else:
                lv, rs = run_plant(st["backend"], shares, period_s=args.period,
                                   measure=args.measure, batch=args.batch,
                                   training_backend="torch" if args.training == "torch"
                                   else "cupy-green")
                levels += lv
                resizes += rs
                write_csv(levels, out / "levels.csv")
                write_csv(resizes, out / "resizes.csv")
        except Exception as exc:  # keep the other phases' results
            errors.append(f"{name}: {type(exc).__name__}: {exc}\n" + "".join(
                "  " + x for x in traceback.format_exc().splitlines(True)))
            print(f"[spatial] {name} failed: {exc}", file=sys.stderr, flush=True)
    if errors:
        atomic_write_text(out / "errors.txt", "".join(errors))
    meta["duration_s"] = time.time() - t0
    try:
        from harness.hil.gpu_plant import gpu_info

        meta["gpu"] = gpu_info()
    except Exception as exc:
        meta["gpu_error"] = str(exc)
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=2, default=str))
    atomic_write_text(out / "summary.md", summarize(parts, levels, resizes))
    try:
        _plot(parts, levels, out / "spatial.png")
    except Exception as exc:
        print(f"plot skipped: {exc}", file=sys.stderr)
    print((out / "summary.md").read_text())
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
