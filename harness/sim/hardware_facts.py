"""Facts and plant set-up from the GPU harness's own record formats: the spatial study
(``python -m harness.hil.spatial_study``: ``levels.csv`` next to ``meta.json``, with
``partitions.csv``, ``pool.json`` and ``resizes.csv`` where the probe and the restarts ran) and
the smoke run (``inference.jsonl``: the inference alone, one row per batch).

The smoke run gives the inference alone at its batch (the training never runs: the fact's
sleep is infinite), its mean wall-clock batch latency — what the plant's latency is — and,
from ``training_emulator.jsonl`` beside it, the training alone on the whole GPU (no latency;
its rate is one over the mean iteration time).

One row of ``levels.csv`` is one backend at one commanded training share, already averaged
over the study's steady periods (3 of 2 s by default): a :class:`~harness.sim.facts.Fact` with
the backend's plant settings (:data:`harness.sim.physics.BACKENDS`), the inference batch of the
study (105 unless its meta says otherwise) and the inference at MPS 100 %. The ``sleep``
backend is time slicing on the whole GPU with the sleep that gives the commanded share's
duty, so its fact is at MPS 100 % with that sleep.

**Training rate under a sleep.** The GPU harness of the 2026-11-27 runs counted an iteration in
a period only when the training's log row, written after the hook's sleep, arrived before the
period ended (fixed since: :mod:`harness.hil._accounting` estimates the iteration in progress,
but the shipped records keep the bias); with a
sleep ``s`` the iterations that end in the last ``s`` seconds of every period are lost (25 %:
0.50 it/s counted where the latency implies about 1 it/s). The same rows give the iterations'
own busy time: ``training_sm_share`` over ``training_throughput`` is the mean of
``sm_fraction * iter_s`` over the counted iterations, with ``sm_fraction`` 1 on the whole GPU
(the probe's %smid reaches every SM there). A sleep row's rate is therefore
``1 / (iter_s + s)``; the count stays in the fact's details (``its_counted``).

**Set-up** (:func:`spatial_setup`): the device's SM count and partition granularity
(``pool.json``), the training kernel's thread blocks (``train_blocks``: the power of two whose
wave counts ``ceil(B/n)`` best match the probe's matmul times per partition) and, from the MPS
restarts with shadow pre-start, the resize delay (median command-to-done time) and the
training's downtime (median).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.results import read_csv
from harness.sim.facts import Fact, RecordSource
from harness.sim.physics import BACKENDS

__all__ = [
    "READERS",
    "SMOKE_FILE",
    "SPATIAL_BATCH",
    "SPATIAL_FILE",
    "hardware_sources",
    "level_rate",
    "smoke_facts",
    "spatial_facts",
    "spatial_setup",
    "wave_blocks",
]

#: The spatial study's per-level CSV (next to its ``meta.json``) and the smoke run's
#: inference log.
SPATIAL_FILE, SMOKE_FILE = "levels.csv", "inference.jsonl"

#: The inference batch of the spatial study when its meta does not say (its default).
SPATIAL_BATCH = 105
#: Steady periods of 2 s the study averages per level when its meta does not say.
SPATIAL_PERIODS, SPATIAL_PERIOD_S = 3, 2.0

_RANGES = {"share_pct": (1.0, 100.0), "sleep_s": (0.0, math.inf),
           "latency_ms": (0.0, math.inf), "training_throughput": (0.0, math.inf),
           "training_sm_share": (0.0, 1.0)}


def _value(csv: Path, line: int, row: Mapping[str, Any], col: str, required: bool) -> float:
    v = row.get(col, math.nan)
    if isinstance(v, str):
        raise ValueError(f"source {str(csv)!r}: line {line}: {col} is {v!r}, not a number")
    v = float(v)
    lo, hi = _RANGES[col]
    if math.isnan(v):
        if required:
            raise ValueError(f"source {str(csv)!r}: line {line}: {col} is empty")
        return v
    if not lo <= v <= hi:
        rng = f"[{lo:g}, {hi:g}]" if math.isfinite(hi) else f"[{lo:g}, inf)"
        raise ValueError(f"source {str(csv)!r}: line {line}: {col} is {v:g}, outside its "
                         f"range {rng}")
    return v


def level_rate(its: float, sm_share: float, sleep_s: float) -> tuple[float, dict[str, Any]]:
    """The training rate of a spatial study's level (iterations/s) and its details: the
    counted rate ``its`` where the row has no sleep, else ``1 / (iteration + sleep)`` with
    the iteration's busy time ``sm_share / its`` from the same row (module docstring: the
    study's harness dropped the iterations that ended within the sleep of a period's end).

    >>> round(level_rate(1.833, 0.7778, 0.0667)[0], 2)     # the H100 run's 75 % sleep row
    2.04
    """
    detail: dict[str, Any] = {"its_counted": its}
    if not (sleep_s > 1e-9 and its > 0 and math.isfinite(sm_share)):
        return its, detail
    busy = sm_share / its
    detail["its_note"] = (f"1 / (iteration {busy:.3f} s + sleep {sleep_s:.3f} s); the count "
                          f"({its:.3f} it/s) drops iterations ending within the sleep of a "
                          f"period's end")
    return 1.0 / (busy + sleep_s), detail


def spatial_facts(src: RecordSource, *, label: str | None = None, sm_weight: float = 1.0,
                  its_weight: float = 1.0
                  ) -> tuple[list[Fact], list[dict[str, Any]], dict[str, Any]]:
    """Facts from a spatial study's ``levels.csv`` (one per row; module docstring).

    Parameters
    ----------
    src : RecordSource
        The study's records (:func:`harness.sim.facts.find_records`).
    label : str or None
        Prefix of the fact names when the folder has no name (the folder's name is used:
        ``spatial``, ``spatial_mps``).
    sm_weight, its_weight : float
        Weights of each fact's training SM share and training rate in the fit (>= 0; with
        ``sm_weight`` 0 the SM share is not read).

    Returns
    -------
    tuple[list[Fact], list[dict], dict]
        The facts, per-fact details and the source's account.
    """
    lab = src.csv.parent.name or label or "spatial"   # spatial, spatial_mps, ...
    batch = int(src.meta.get("batch", SPATIAL_BATCH))
    periods = int(src.meta.get("measure", SPATIAL_PERIODS))
    facts: list[Fact] = []
    details: list[dict[str, Any]] = []
    for i, r in enumerate(src.rows):
        line = i + 2
        backend = r.get("backend")
        if backend not in BACKENDS:
            raise ValueError(f"source {str(src.csv)!r}: line {line}: backend is {backend!r}, "
                             f"not one of {', '.join(BACKENDS)}")
        share = _value(src.csv, line, r, "share_pct", True)
        sleep = _value(src.csv, line, r, "sleep_s", True)
        lat = _value(src.csv, line, r, "latency_ms", True)
        its = _value(src.csv, line, r, "training_throughput", False)
        sm = _value(src.csv, line, r, "training_sm_share", False)
        rate, detail = level_rate(its, sm, sleep)
        mps = 100.0 if backend == "sleep" else share
        over = {**BACKENDS[backend], "batch": batch, "inference_mps_pct": 100.0}
        name = f"{lab}/{backend}: share {share:g} %" + (f", sleep {sleep:.2f} s" if sleep else "")
        facts.append(Fact(name, over, sleep, mps, lat,
                          100.0 * sm if sm_weight > 0 else math.nan, float(sm_weight), rate,
                          float(its_weight)))
        details.append({"source": str(src.csv), "run": backend, "periods": periods,
                        "latency_sd_ms": math.nan, "sleep_min_s": sleep, "sleep_max_s": sleep,
                        "sm_periods": periods, **detail})
    if not facts:
        raise ValueError(f"source {str(src.csv)!r}: no levels recorded")
    info = {"path": str(src.csv), "experiment": "spatial", "plant": "gpu", "preset": None,
            "seed": None, "facts": len(facts), "periods": periods * len(facts),
            "restarting": 0, "settling": 0, "no_latency": 0, "thin": 0,
            "used": periods * len(facts)}
    return facts, details, info


def wave_blocks(sm_counts: Sequence[float], seconds: Sequence[float], total_sms: int
                ) -> tuple[int, float]:
    """The power-of-two block count ``B`` (64..65536) of a kernel timed on partitions of
    ``sm_counts`` SMs (``seconds`` each) whose waves ``ceil(B/n)`` best match the times
    relative to the whole device's, and its RMS relative error. Ties go to the smaller B."""
    n = np.asarray(sm_counts, float)
    t = np.asarray(seconds, float)
    full = float(t[np.argmax(n)])
    best, err = 0, math.inf
    for k in range(6, 17):
        b = 2.0 ** k
        model = np.ceil(b / n) / math.ceil(b / total_sms)
        e = float(np.sqrt(np.mean((model / (t / full) - 1.0) ** 2)))
        if e < err - 1e-12:
            best, err = int(b), e
    return best, err


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.suffix == ".json" \
            else read_csv(path)
    except (OSError, ValueError):
        return None


def spatial_setup(src: RecordSource) -> dict[str, dict[str, Any]]:
    """The plant set-up a spatial study's folder states (module docstring): field ->
    ``{"value", "source", "how"}``; empty where the folder holds none of it."""
    folder = src.csv.parent
    out: dict[str, dict[str, Any]] = {}
    pool = src.meta.get("pool") or _read(folder / "pool.json")
    total = int(pool.get("total_sms", 0)) if isinstance(pool, Mapping) else 0
    if total:
        out["sm_count"] = {"value": total, "source": str(folder), "how": "pool: total_sms"}
        step = int(pool.get("granularity_step_sms") or 0)
        if step:
            out["sm_granularity"] = {"value": step, "source": str(folder),
                                     "how": "pool: granularity_step_sms"}
    parts = _read(folder / "partitions.csv")
    if total and parts:
        ok = [p for p in parts if float(p.get("matmul_s", math.nan)) > 0]
        if len(ok) >= 2:
            b, err = wave_blocks([p["sm_count"] for p in ok], [p["matmul_s"] for p in ok],
                                 total)
            out["train_blocks"] = {"value": b, "source": str(folder / "partitions.csv"),
                                   "how": f"waves ceil(B/n) vs the probe's matmul times, RMS "
                                          f"{100 * err:.1f} %"}
    restarts = [r for r in _read(folder / "resizes.csv") or []
                if r.get("backend") == "mps-restart" and r.get("ok")]
    if restarts:
        delay = float(np.median([r["latency_s"] for r in restarts]))
        down = [r.get("downtime_s", math.nan) for r in restarts]
        down = [float(x) for x in down if isinstance(x, float) and math.isfinite(x)]
        out["resize_delay_s"] = {"value": delay, "source": str(folder / "resizes.csv"),
                                 "how": f"median of {len(restarts)} MPS restarts (shadow)"}
        if down:
            out["restart_s"] = {"value": float(np.median(down)),
                                "source": str(folder / "resizes.csv"),
                                "how": "median training downtime of the MPS restarts"}
    return out


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise ValueError(f"source {str(path)!r}: line {i + 1} is not JSON") from None
        if isinstance(row, dict) and "summary" not in row:
            rows.append(row)
    return rows


def hardware_sources(folder: Path) -> list[RecordSource]:
    """The spatial studies and smoke runs in ``folder`` or one level below."""
    out = []
    for meta in sorted(folder.glob("meta.json")) + sorted(folder.glob("*/meta.json")):
        if (meta.parent / SPATIAL_FILE).is_file():
            data = _read(meta)
            out.append(RecordSource(meta.parent / SPATIAL_FILE,
                                    {**(data if isinstance(data, dict) else {}),
                                     "experiment": "spatial", "plant": "gpu"},
                                    read_csv(meta.parent / SPATIAL_FILE)))
    for log in sorted(folder.glob(SMOKE_FILE)) + sorted(folder.glob(f"*/{SMOKE_FILE}")):
        out.append(RecordSource(log, {"experiment": "smoke", "plant": "gpu"}, _jsonl(log)))
    return out


def smoke_facts(src: RecordSource, *, label: str | None = None, sm_weight: float = 1.0,
                its_weight: float = 1.0
                ) -> tuple[list[Fact], list[dict[str, Any]], dict[str, Any]]:
    """The inference-alone and training-alone facts of a smoke run (module docstring)."""
    lat = np.array([r.get("wall_ms", math.nan) for r in src.rows], float)
    sizes = {r.get("batch_size") for r in src.rows}
    size = next(iter(sizes)) if len(sizes) == 1 else None
    if not (lat.size and np.all(np.isfinite(lat)) and np.all(lat > 0)) or not (
            isinstance(size, int) and 1 <= size <= 4096):
        raise ValueError(f"source {str(src.csv)!r}: expected one row per batch with a "
                         f"wall_ms > 0 and one batch_size in [1, 4096]")
    batch = int(size)
    lab = src.csv.parent.name or label or "smoke"
    fact = Fact(f"{lab}: inference alone, batch {batch}",
                {"batch": batch, "inference_mps_pct": 100.0, "mps_enabled": True}, math.inf,
                100.0, float(lat.mean()), math.nan, 0.0)
    detail = {"source": str(src.csv), "run": "inference alone", "periods": int(lat.size),
              "latency_sd_ms": float(lat.std(ddof=1)) if lat.size > 1 else math.nan,
              "sleep_min_s": math.inf, "sleep_max_s": math.inf, "sm_periods": 0}
    facts, details = [fact], [detail]
    train = src.csv.with_name("training_emulator.jsonl")
    iters = np.array([r.get("iter_s", math.nan) for r in (_jsonl(train) if train.is_file()
                                                          else [])], float)
    if iters.size and np.all(np.isfinite(iters)) and np.all(iters > 0):
        facts.append(Fact(f"{lab}: training alone", {"batch": batch}, 0.0, 100.0, math.nan,
                          math.nan, 0.0, float(1.0 / iters.mean()), float(its_weight)))
        details.append({"source": str(train), "run": "training alone",
                        "periods": int(iters.size), "latency_sd_ms": math.nan,
                        "sleep_min_s": 0.0, "sleep_max_s": 0.0, "sm_periods": 0})
    info = {"path": str(src.csv), "experiment": "smoke", "plant": "gpu", "preset": None,
            "seed": None, "facts": len(facts), "periods": int(lat.size), "restarting": 0,
            "settling": 0, "no_latency": 0, "thin": 0, "used": int(lat.size)}
    return facts, details, info


#: The readers of the hardware record formats, by experiment.
READERS = {"spatial": spatial_facts, "smoke": smoke_facts}
