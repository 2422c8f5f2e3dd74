"""Facts from experiment records: the steady periods of each run, averaged per operating point.

A :class:`Fact` is ``(name, plant overrides, sleep s, training MPS %, latency ms, training
SM % or NaN, SM weight)``: what was measured (or published) at one static operating point.
:func:`find_records` locates the per-period CSVs an experiment wrote (with their meta JSON),
:func:`facts_from_source` turns one into facts and :func:`facts_from_records` does it for
every record under some folders. :mod:`harness.sim.calibration` fits the simulated plant to
them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from harness.results import read_csv
from harness.sim.simulated import preset_overrides

__all__ = ["COLUMN_RANGES", "GPU_SLEEP_NOTE", "RECORD_FILES", "Fact",
           "MeasuredFacts", "RecordSource", "facts_from_records", "facts_from_source",
           "find_records"]


class Fact(NamedTuple):
    """One operating point with what was measured (or published) there. An infinite
    ``sleep_s`` is the inference alone (the training never runs); a NaN ``latency_ms`` with a
    training rate ``its`` is the training alone (no inference)."""

    name: str
    #: :class:`ColocationParams` overrides that hold at this point (``mps_enabled``, ``batch``...)
    overrides: Mapping[str, Any]
    sleep_s: float
    mps_pct: float
    latency_ms: float
    #: time-averaged training SM share in %, NaN when not measured
    sm_pct: float = math.nan
    #: weight of the SM share's relative error against the latency's (weight 1)
    sm_weight: float = 1.0
    #: training iterations per second, NaN when not measured
    its: float = math.nan
    #: weight of the training rate's relative error against the latency's
    its_weight: float = 1.0


# ---- facts from measured experiment records -----------------------------------------------------
#: The per-period CSV each experiment writes next to its ``<experiment>_meta.json``.
RECORD_FILES: dict[str, str] = {"knobs": "knobs.csv", "identify": "identify_periods.csv",
                                "burst": "burst.csv", "slo_sweep": "slo_sweep.csv"}


#: Allowed range of each number column a per-period record may carry (``[lo, hi]``; a
#: missing value, an empty cell, is allowed: such a period is left out).
COLUMN_RANGES: dict[str, tuple[float, float]] = {
    "latency_ms": (0.0, math.inf), "sleep_s": (0.0, math.inf), "mps_pct": (1.0, 100.0),
    "inference_mps_pct": (1.0, 100.0), "batch": (1.0, 4096.0), "count": (0.0, math.inf),
    "training_sm_share": (0.0, 1.0), "training_throughput": (0.0, math.inf)}


def _check_rows(csv: Path, rows: Sequence[Mapping[str, Any]], skip: Sequence[str] = ()
                ) -> None:
    """Refuse a number column holding text (a damaged or foreign file) or a value outside
    :data:`COLUMN_RANGES`, naming the file, line, column and range; columns in ``skip`` (not
    used by the fit) are not read."""
    for i, row in enumerate(rows):
        for c in (*(k for k in COLUMN_RANGES if k not in skip), "t_start_s"):
            v = row.get(c)
            if isinstance(v, str):
                raise ValueError(f"source {str(csv)!r}: line {i + 2}: {c} is {v!r}, not a "
                                 f"number")
            if c not in COLUMN_RANGES or v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            lo, hi = COLUMN_RANGES[c]
            if not lo <= float(v) <= hi or not math.isfinite(float(v)):
                rng = f"[{lo:g}, {hi:g}]" if math.isfinite(hi) else f"[{lo:g}, inf)"
                hint = ("; --sm-weight 0 leaves the SM share out of the fit"
                        if c == "training_sm_share" else "")
                raise ValueError(f"source {str(csv)!r}: line {i + 2}: {c} is {v:g}, outside "
                                 f"its range {rng}{hint}")


@dataclass(frozen=True)
class RecordSource:
    """One experiment's per-period records: the CSV, its meta JSON (``{}`` if none) and rows."""

    csv: Path
    meta: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def experiment(self) -> str:
        return str(self.meta.get("experiment") or self.csv.stem)


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"source {str(path)!r}: not a readable JSON file ({exc})") from None
    return meta if isinstance(meta, dict) else {}


def find_records(source: str | os.PathLike[str]) -> list[RecordSource]:
    """The experiment records under ``source``: a results folder (``<out>`` or
    ``<out>/<experiment>``; every ``*_meta.json`` in it or one level below whose per-period CSV,
    :data:`RECORD_FILES`, is present) or one per-period CSV (with the ``*_meta.json`` beside
    it, if any)."""
    p = Path(source)
    if not p.exists():
        raise ValueError(f"source {str(source)!r}: no such file or folder")
    if p.is_file():
        if p.suffix.lower() != ".csv":
            raise ValueError(f"source {str(source)!r}: expected a results folder or a "
                             f"per-period CSV ({', '.join(RECORD_FILES.values())})")
        meta: dict[str, Any] = {}
        for cand in (p.with_name(f"{p.stem}_meta.json"),
                     p.with_name(f"{p.stem.split('_')[0]}_meta.json")):
            if cand.is_file():
                meta = _read_meta(cand)
                break
        return [RecordSource(p, meta, read_csv(p))]
    from harness.sim.hardware_facts import hardware_sources

    out = hardware_sources(p)
    for m in sorted(p.glob("*_meta.json")) + sorted(p.glob("*/*_meta.json")):
        meta = _read_meta(m)
        name = RECORD_FILES.get(str(meta.get("experiment")))
        if name and (m.parent / name).is_file():
            out.append(RecordSource(m.parent / name, meta, read_csv(m.parent / name)))
    if not out:
        raise ValueError(
            f"source {str(source)!r}: no experiment records found (expected an "
            f"<experiment>_meta.json with its per-period CSV — "
            f"{', '.join(RECORD_FILES.values())} — or the GPU harness's spatial study "
            f"(meta.json, levels.csv) or smoke run (inference.jsonl), in the folder or one "
            f"level below)")
    return out


def _num(r: Mapping[str, Any], key: str) -> float:
    v = r.get(key, math.nan)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _key(x: float, digits: int) -> float | None:
    """A grouping key: rounded, None for NaN (NaN never equals itself)."""
    return round(x, digits) if math.isfinite(x) else None


def _label(r: Mapping[str, Any]) -> str:
    for key in ("run", "controller"):
        v = r.get(key)
        if isinstance(v, str) and v:
            return v
    return ""


def _split_runs(rows: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Consecutive rows of one run: a new run starts where the run/controller label changes
    or the period index (``period`` or ``k``) does not increase."""
    runs: list[list[Mapping[str, Any]]] = []
    prev_label, prev_idx = None, math.nan
    for r in rows:
        lab = _label(r)
        idx = _num(r, "period") if "period" in r else _num(r, "k")
        if not runs or lab != prev_label or (math.isfinite(idx) and math.isfinite(prev_idx)
                                             and idx <= prev_idx):
            runs.append([])
        runs[-1].append(r)
        prev_label, prev_idx = lab, idx
    return runs


def _source_defaults(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Batch and inference MPS of a source whose CSV does not say (from its meta)."""
    out: dict[str, Any] = {}
    pp = meta.get("plant_params") if meta.get("plant", "sim") == "sim" else None
    if isinstance(pp, Mapping):
        out.update({k: pp[k] for k in ("batch", "inference_mps_pct") if k in pp})
    if "preset" in meta:
        try:
            pre = preset_overrides(str(meta["preset"]))
        except ValueError:
            pre = {}
        for k in ("batch", "inference_mps_pct"):
            if k not in out and k in pre:
                out[k] = pre[k]
    return out


def _mps_enabled(meta: Mapping[str, Any], run: str) -> bool:
    """Whether a run shared the GPU through MPS, from the experiment's meta (default True)."""
    runs = meta.get("runs")
    r = runs.get(run) if isinstance(runs, Mapping) else None
    if isinstance(r, Mapping):
        if r.get("mps_enabled") is not None:
            return bool(r["mps_enabled"])
        over = r.get("overrides")
        if isinstance(over, Mapping) and "mps_enabled" in over:
            return bool(over["mps_enabled"])
    if meta.get("mps_enabled") is not None:
        return bool(meta["mps_enabled"])
    pp = meta.get("plant_params")
    if meta.get("plant", "sim") == "sim" and isinstance(pp, Mapping) and "mps_enabled" in pp:
        return bool(pp["mps_enabled"])
    return True


@dataclass(frozen=True)
class MeasuredFacts:
    """Facts from records: ``facts``, per fact ``details`` (source, run, periods, spread) and
    per source ``sources`` (path, experiment, plant, preset and how many periods were used or
    why not)."""

    facts: list[Fact]
    details: list[dict[str, Any]]
    sources: list[dict[str, Any]]
    #: plant set-up the records state: field -> ``{"value", "source", "how"}``
    setup: dict[str, dict[str, Any]] = field(default_factory=dict)


def _check_options(settle_periods: Any, sleep_bin_s: Any, min_periods: Any,
                   sm_weight: Any, its_weight: Any = 1.0) -> None:
    def integer(name: str, v: Any, lo: int) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")

    def number(name: str, v: Any, lo: float, strict: bool) -> None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or (v <= lo if strict else v < lo):
            raise ValueError(f"{name} must be a number {'>' if strict else '>='} {lo:g}, "
                             f"got {v!r}")

    integer("settle_periods", settle_periods, 0)
    number("sleep_bin_s", sleep_bin_s, 0.0, True)
    integer("min_periods", min_periods, 1)
    number("sm_weight", sm_weight, 0.0, False)
    number("its_weight", its_weight, 0.0, False)


def _operating_point(r: Mapping[str, Any], defaults: Mapping[str, Any]
                     ) -> tuple[float, float, float, float]:
    """``(sleep s, training MPS %, batch, inference MPS %)`` of a row; the source's defaults
    fill a missing batch or inference MPS."""
    b = _num(r, "batch")
    if not math.isfinite(b) and "batch" in defaults:
        b = float(defaults["batch"])
    ci = _num(r, "inference_mps_pct")
    if not math.isfinite(ci) and defaults.get("inference_mps_pct") is not None:
        ci = float(defaults["inference_mps_pct"])
    return _num(r, "sleep_s"), _num(r, "mps_pct"), b, ci


def _steady(knobs: Sequence[tuple[Any, ...]], restarting: Sequence[bool], settle_periods: int
            ) -> list[bool]:
    """Per period of one run: not restarting and at least ``settle_periods`` periods after the
    run start, a knob change (``knobs`` differs from the period before) or a restart."""
    out, left = [], 0
    for i, (k, r) in enumerate(zip(knobs, restarting)):
        if r:
            left = settle_periods + 1
        elif i == 0 or k != knobs[i - 1]:
            left = max(left, settle_periods)
        out.append(left == 0)
        left = max(0, left - 1)
    return out


#: Why a GPU record's training rate at a positive sleep is left out of a fact.
GPU_SLEEP_NOTE = ("left out: the GPU harness counts an iteration in a period only when its "
                  "log row, written after the sleep, arrives before the period ends, so "
                  "periods with a sleep under-count")


def _group_its(rs: Sequence[Mapping[str, Any]], sleep_s: float, gpu: bool
               ) -> tuple[float, dict[str, Any]]:
    """The training rate of a group of periods (iterations/s, NaN when not recorded or, on
    the GPU harness, biased by a sleep: :data:`GPU_SLEEP_NOTE`) and its details."""
    its = np.array([_num(r, "training_throughput") for r in rs])
    its = its[np.isfinite(its)]
    if not its.size:
        return math.nan, {}
    mean = float(its.mean())
    if gpu and sleep_s > 1e-9:
        return math.nan, {"its_counted": mean, "its_note": GPU_SLEEP_NOTE}
    return mean, {"its_counted": mean}


def _group_fact(label: str, key: tuple[Any, ...], rs: Sequence[Mapping[str, Any]],
                show_batch: bool, weights: tuple[float, float], csv: Path, gpu: bool
                ) -> tuple[Fact, dict[str, Any]]:
    """The fact of one group of steady periods and its details; ``weights``: the SM share's
    and the training rate's."""
    name, mps_on, b, ci, m, _sk = key
    lat = np.array([_num(r, "latency_ms") for r in rs])
    w = np.array([_num(r, "count") for r in rs])
    mean_lat = (float(np.sum(lat * w) / np.sum(w))
                if np.all(np.isfinite(w)) and np.sum(w) > 0 else float(np.mean(lat)))
    s = np.array([_num(r, "sleep_s") for r in rs])
    sm = 100.0 * np.array([_num(r, "training_sm_share") for r in rs])
    sm = sm[np.isfinite(sm)]
    over: dict[str, Any] = {"mps_enabled": bool(mps_on)}
    if b is not None:
        over["batch"] = int(b)
    if ci is not None:
        over["inference_mps_pct"] = float(ci)
    text = (f"{label}{'/' + name if name else ''}: sleep {float(s.mean()):.2f} s, "
            f"MPS {m:g} %" + ("" if mps_on else " (no MPS)")
            + (f", batch {int(b)}" if show_batch and b is not None else ""))
    its, its_detail = _group_its(rs, float(s.mean()), gpu)
    fact = Fact(text, over, float(s.mean()), float(m), mean_lat,
                float(sm.mean()) if sm.size and weights[0] > 0 else math.nan,
                float(weights[0]), its, float(weights[1]))
    detail = {"source": str(csv), "run": name, "periods": len(rs),
              "latency_sd_ms": float(np.std(lat, ddof=1)) if len(rs) > 1 else math.nan,
              "sleep_min_s": float(s.min()), "sleep_max_s": float(s.max()),
              "sm_periods": int(sm.size), **its_detail}
    return fact, detail


def facts_from_source(src: RecordSource, *, label: str | None = None, settle_periods: int = 2,
                      sleep_bin_s: float = 0.1, min_periods: int = 3, sm_weight: float = 1.0,
                      its_weight: float = 1.0
                      ) -> tuple[list[Fact], list[dict[str, Any]], dict[str, Any]]:
    """Facts from one experiment's per-period records (the spatial study's per-level records:
    and smoke runs: :mod:`harness.sim.hardware_facts`).

    Every number column must hold a number in its :data:`COLUMN_RANGES` range or be empty
    (ValueError naming the file, line, column and range otherwise). A period is steady when
    it has a latency, neither process was restarting, and it is not
    among the first ``settle_periods`` periods of a run, of an operating point or after a
    restart. Steady periods are grouped per run and operating point: training MPS, inference
    MPS, batch, whether MPS was on (from the meta JSON: the knobs "Sleep" run is time-sliced)
    and the sleep. In a run whose sleep changes nearly every period (the white-noise
    excitation of ``identify``, a closed loop) a sleep change is not a knob change and the
    sleep is binned by ``sleep_bin_s``. Each group of at least ``min_periods`` periods is a
    fact: mean latency (weighted by the batches counted, where known), mean sleep, mean
    training SM share (NaN when not recorded or ``sm_weight`` is 0: the column is then not
    read) and mean training rate (NaN when not recorded, or on the GPU harness with a sleep:
    :data:`GPU_SLEEP_NOTE`).

    Parameters
    ----------
    src : RecordSource
        The records (:func:`find_records`).
    label : str or None
        Prefix of the fact names; None: the experiment's name.
    settle_periods : int
        Periods left out after a run start, a knob change or a restart (>= 0).
    sleep_bin_s : float
        Sleep bin of runs whose sleep moves nearly every period, s (> 0).
    min_periods : int
        Fewest steady periods that make a fact (>= 1).
    sm_weight : float
        Weight of each fact's SM share in the fit (>= 0).
    its_weight : float
        Weight of each fact's training rate in the fit (>= 0).

    Returns
    -------
    tuple[list[Fact], list[dict], dict]
        The facts, per-fact details and a per-source account of the periods.
    """
    _check_options(settle_periods, sleep_bin_s, min_periods, sm_weight, its_weight)
    from harness.sim.hardware_facts import READERS

    if src.experiment in READERS:
        return READERS[src.experiment](src, label=label, sm_weight=sm_weight,
                                       its_weight=its_weight)
    rows = src.rows
    lab = src.experiment if label is None else label
    cols = set().union(*(r.keys() for r in rows)) if rows else set()
    missing = [c for c in ("latency_ms", "sleep_s", "mps_pct") if c not in cols]
    if rows and missing:
        raise ValueError(f"source {str(src.csv)!r}: column(s) {', '.join(missing)} missing; "
                         f"per-period records need latency_ms, sleep_s and mps_pct")
    _check_rows(src.csv, rows, () if sm_weight > 0 else ("training_sm_share",))
    defaults = _source_defaults(src.meta)
    count = {"periods": len(rows), "restarting": 0, "settling": 0, "no_latency": 0,
             "thin": 0, "used": 0}
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}  # insertion order = first seen
    batches: set[int] = set()
    for run in _split_runs(rows):
        name = _label(run[0])
        mps_on = _mps_enabled(src.meta, name)
        points = [_operating_point(r, defaults) for r in run]
        moves = int(np.sum(np.abs(np.diff([p[0] for p in points])) > 1e-9))
        excited = len(run) >= 3 and moves > 0.5 * (len(run) - 1)
        knobs = [(_key(m, 6), _key(ci, 6), _key(b, 0)) + (() if excited else (_key(s, 6),))
                 for s, m, b, ci in points]
        restarting = [_num(r, "restarting") > 0 or _num(r, "inference_restarting") > 0
                      for r in run]
        for r, (s, m, b, ci), restart, steady in zip(
                run, points, restarting, _steady(knobs, restarting, settle_periods)):
            lat, n = _num(r, "latency_ms"), _num(r, "count")
            if not steady:
                count["restarting" if restart else "settling"] += 1
            elif not (math.isfinite(lat) and lat > 0 and math.isfinite(s) and math.isfinite(m)
                      and n != 0):
                count["no_latency"] += 1
            else:
                sk = round(s / sleep_bin_s) if excited else round(s, 4)
                key = (name, mps_on, _key(b, 0), _key(ci, 3) if mps_on else None, round(m, 3),
                       sk)
                groups.setdefault(key, []).append(r)
                if math.isfinite(b):
                    batches.add(int(b))
    # facts in the order: run first seen, MPS before time slicing, batch, MPS, sleep
    run_order = {k: i for i, k in enumerate(dict.fromkeys(k[0] for k in groups))}
    keys = sorted(groups, key=lambda k: (run_order[k[0]], not k[1],
                                         -1 if k[2] is None else k[2], k[4], k[5]))
    facts: list[Fact] = []
    details: list[dict[str, Any]] = []
    for key in keys:
        rs = groups[key]
        if len(rs) < min_periods:
            count["thin"] += len(rs)
            continue
        count["used"] += len(rs)
        fact, detail = _group_fact(lab, key, rs, len(batches) > 1, (sm_weight, its_weight),
                                   src.csv, src.meta.get("plant") == "gpu")
        facts.append(fact)
        details.append(detail)
    if not facts:
        raise ValueError(
            f"source {str(src.csv)!r}: no usable periods ({count['periods']} read: "
            f"{count['restarting']} restarting or just after, {count['settling']} within "
            f"settle_periods={settle_periods} of a run start or knob change, "
            f"{count['no_latency']} without a latency, {count['thin']} in operating points with "
            f"fewer than min_periods={min_periods}); lower settle_periods (an integer >= 0) or "
            f"min_periods (an integer >= 1), or record longer runs")
    info = {"path": str(src.csv), "experiment": src.experiment,
            "plant": src.meta.get("plant"), "preset": src.meta.get("preset"),
            "seed": src.meta.get("seed"), "facts": len(facts), **count}
    return facts, details, info


def facts_from_records(sources: Sequence[str | os.PathLike[str]], **options: Any
                       ) -> MeasuredFacts:
    """Facts from every experiment record under ``sources`` (folders or CSVs,
    :func:`find_records`); ``options`` go to :func:`facts_from_source`."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    if not sources:
        raise ValueError("sources must name at least one results folder or CSV")
    found = [s for src in sources for s in find_records(src)]
    seen: dict[str, int] = {}
    facts: list[Fact] = []
    details: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []
    setup: dict[str, dict[str, Any]] = {}
    for src in found:
        seen[src.experiment] = seen.get(src.experiment, 0) + 1
        lab = src.experiment + (f"#{seen[src.experiment]}" if seen[src.experiment] > 1 else "")
        f, d, info = facts_from_source(src, label=lab, **options)
        facts += f
        details += d
        infos.append(info)
        if src.experiment == "spatial":
            from harness.sim.hardware_facts import spatial_setup

            setup.update(spatial_setup(src))
    return MeasuredFacts(facts, details, infos, setup)
