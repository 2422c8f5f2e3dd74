"""Job traces for the cluster simulator: the Alibaba openb pod list, the PAI 2020
``pai_task_table`` format, and a seeded synthetic generator.

Every loader returns a :class:`Trace` (one row per *per-GPU task*: multi-GPU tasks are split)
and a :class:`LoadReport` that counts every input row: kept, filtered by a stated rule, or
malformed. Nothing is dropped silently. A file whose header has unknown or missing columns
raises :class:`ValueError` naming them.

Mapping rules (also in docs/cluster.md)
--------------------------------------
openb (``openb_pod_list_default.csv``):

* ``qos`` LS → inference, BE → training, Guaranteed → inference (Kubernetes *Guaranteed* is
  what long-running services request), Burstable → training when it asks for at least half a
  GPU *and* ran at least one hour, else inference (the GPUColo paper, Sec. VI: training has higher
  utilization and longer duration).
* ``gpu_milli / 1000`` → demanded GPU utilization of each per-GPU task; ``num_gpu > 1`` →
  ``num_gpu`` sub-tasks; ``num_gpu == 0`` → filtered (no GPU).
* start = ``scheduled_time``, length = ``deletion_time - scheduled_time`` (s).
* ``pod_phase`` Failed → filtered (the GPUColo paper's rule: failed jobs out); Pending or no
  ``scheduled_time`` → filtered (never ran); zero length → filtered.
* GPU memory (the trace has none): ``MEMORY_PER_SHARE_GB[kind] * demand`` (training 24 GB per
  GPU share, inference 8 GB: Table I of the GPUColo paper (Chen et al., ICDCS 2024) has
  inference at 1/3 of training memory for the same utilization; 24 GB is the paper's RTX 3090).

PAI 2020 (``pai_task_table``): ``status`` Failed → filtered, other non-Terminated statuses or
missing times → filtered; ``plan_gpu`` (percent of one GPU) or ``plan_mem`` (GB, used as the
task's GPU memory, as the GPUColo paper, Sec. VI does) zero or missing → filtered; each of
``inst_num`` instances becomes a task; an instance above 100 % or 32 GB is split into
``n = max(ceil(gpu/100), ceil(mem/32))`` equal sub-tasks. Training vs inference: a
``task_name`` containing "train" is training, one containing "infer" or "serv" is inference;
otherwise training when at least two of (utilization >= 50 %, memory >= 8 GB, length >= 1 h).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from harness.checks import number

INFERENCE, TRAINING = 0, 1
_T = TypeVar("_T")
DAY = 86400

#: GPU memory per unit of demanded GPU share (GB), by kind (inference, training).
MEMORY_PER_SHARE_GB = (8.0, 24.0)
#: Sub-task limits of the PAI split rule (the GPUColo paper, Sec. VI).
SPLIT_UTIL, SPLIT_MEM_GB = 1.0, 32.0
#: Most per-GPU tasks one trace row may make (openb ``num_gpu``, PAI ``inst_num`` times the
#: split); a row asking for more is malformed (a ``num_gpu`` of 1e9 made a billion tasks).
MAX_TASKS_PER_ROW = 100_000

OPENB_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
                 "pod_phase", "creation_time", "deletion_time", "scheduled_time")
PAI_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time",
               "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")
OPENB_QOS = ("LS", "BE", "Burstable", "Guaranteed")
OPENB_PHASES = ("Running", "Succeeded", "Failed", "Pending")

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
OPENB_PODS = DATA_DIR / "openb_pod_list_default.csv"
OPENB_NODES = DATA_DIR / "openb_node_list_gpu_node.csv"


@dataclass
class LoadReport:
    """What happened to every input row.

    Parameters
    ----------
    source : str
        What was read.
    rows, kept_rows, tasks : int
        Input rows, rows kept and per-GPU tasks made from them.
    filtered : dict of str to int
        Rows dropped by a mapping rule, by rule.
    malformed : dict of str to int
        Rows that could not be read, by reason.
    malformed_lines : list of int
        The first (up to 20) malformed line numbers.
    """

    source: str
    rows: int = 0
    kept_rows: int = 0
    tasks: int = 0
    filtered: dict[str, int] = field(default_factory=dict)
    malformed: dict[str, int] = field(default_factory=dict)
    malformed_lines: list[int] = field(default_factory=list)

    def filter(self, reason: str) -> None:
        self.filtered[reason] = self.filtered.get(reason, 0) + 1

    def bad(self, reason: str, line: int) -> None:
        self.malformed[reason] = self.malformed.get(reason, 0) + 1
        if len(self.malformed_lines) < 20:
            self.malformed_lines.append(line)

    @property
    def n_malformed(self) -> int:
        return sum(self.malformed.values())

    @property
    def n_filtered(self) -> int:
        return sum(self.filtered.values())

    def check(self) -> None:
        """Every row is accounted for exactly once."""
        assert self.kept_rows + self.n_filtered + self.n_malformed == self.rows, self

    def summary(self) -> str:
        parts = [(f"{self.source}: {self.rows} rows -> {self.kept_rows} kept "
                  f"({self.tasks} per-GPU tasks)")]
        if self.filtered:
            parts.append("filtered by rule: " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.filtered.items())))
        if self.malformed:
            parts.append(f"MALFORMED {self.n_malformed}: " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.malformed.items()))
                + f" (first lines {self.malformed_lines[:5]})")
        else:
            parts.append("malformed 0")
        return "; ".join(parts)


@dataclass
class Trace:
    """Per-GPU tasks, sorted by arrival. Times in integer seconds from the trace start.

    Parameters
    ----------
    name : str
        Trace name.
    arrival : numpy.ndarray
        Arrival tick per task (int64, s).
    work : numpy.ndarray
        Length at trace speed (s).
    demand : numpy.ndarray
        Demanded GPU utilization, in (0, 1].
    mem_gb : numpy.ndarray
        GPU memory (GB).
    kind : numpy.ndarray
        0 inference, 1 training (int8).
    beta : numpy.ndarray
        Interference pressure per unit of GPU share used.
    sigma : numpy.ndarray
        Interference sensitivity.
    report : LoadReport, optional
        What the loader did with each input row.

    Raises
    ------
    ValueError
        When the columns differ in length.

    Examples
    --------
    >>> import numpy as np
    >>> t = Trace("toy", np.array([5, 0]), np.array([10.0, 20.0]), np.array([0.5, 0.5]),
    ...           np.array([4.0, 12.0]), np.array([0, 1]), np.zeros(2), np.ones(2))
    >>> t.arrival.tolist(), t.counts()["training"]
    ([0, 5], 1)
    """

    name: str
    arrival: np.ndarray   # int64, s
    work: np.ndarray      # float64, s at trace speed (the length in the trace)
    demand: np.ndarray    # float64 in (0, 1]: demanded GPU utilization
    mem_gb: np.ndarray    # float64 GPU memory
    kind: np.ndarray      # int8: 0 inference, 1 training
    beta: np.ndarray      # interference pressure per unit of GPU share used
    sigma: np.ndarray     # interference sensitivity
    report: LoadReport | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival)
        for k in ("work", "demand", "mem_gb", "kind", "beta", "sigma"):
            if len(getattr(self, k)) != n:
                raise ValueError(f"trace column {k} has {len(getattr(self, k))} rows, not {n}")
        order = np.argsort(self.arrival, kind="stable")
        for k in ("arrival", "work", "demand", "mem_gb", "kind", "beta", "sigma"):
            setattr(self, k, np.asarray(getattr(self, k))[order])
        self.arrival = self.arrival.astype(np.int64)
        self.kind = self.kind.astype(np.int8)
        if n:
            self._check_values()

    def _check_values(self) -> None:
        """Refuse NaN and out-of-range task values (a NaN memory made the engine look for a
        fitting GPU forever)."""
        rules = (("arrival", self.arrival >= 0, ">= 0"),
                 ("work", np.isfinite(self.work) & (self.work >= 1), "finite and >= 1 s"),
                 ("demand", (self.demand > 0) & (self.demand <= 1), "in (0, 1]"),
                 ("mem_gb", np.isfinite(self.mem_gb) & (self.mem_gb >= 0), "finite and >= 0"),
                 ("beta", np.isfinite(self.beta) & (self.beta >= 0), "finite and >= 0"),
                 ("sigma", np.isfinite(self.sigma) & (self.sigma >= 0), "finite and >= 0"),
                 ("kind", (self.kind == INFERENCE) | (self.kind == TRAINING),
                  f"{INFERENCE} (inference) or {TRAINING} (training)"))
        for name, ok, rng in rules:
            if not np.all(ok):
                i = int(np.argmin(ok))
                raise ValueError(f"trace {self.name!r}: every task's {name} must be {rng}; task "
                                 f"{i} has {getattr(self, name)[i]!r}")

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def days(self) -> float:
        return float(self.arrival.max() + 1) / DAY if len(self) else 0.0

    def take(self, mask: np.ndarray, name: str | None = None) -> Trace:
        return Trace(name or self.name, self.arrival[mask], self.work[mask], self.demand[mask],
                     self.mem_gb[mask], self.kind[mask], self.beta[mask], self.sigma[mask],
                     self.report)

    def window(self, start_day: float, days: float) -> Trace:
        """Tasks arriving in [start_day, start_day + days), re-based to start at 0;
        ``start_day`` in [0, 36500], ``days`` in (0, 36500] (ValueError otherwise)."""
        number("window start_day", start_day, 0, 36500)
        number("window days", days, 0, 36500, lo_open=True)
        lo, hi = int(start_day * DAY), int((start_day + days) * DAY)
        m = (self.arrival >= lo) & (self.arrival < hi)
        t = self.take(m, f"{self.name}[{start_day:g}+{days:g}d]")
        t.arrival = t.arrival - lo
        return t

    def counts(self) -> dict[str, int]:
        return {"inference": int(np.sum(self.kind == INFERENCE)),
                "training": int(np.sum(self.kind == TRAINING))}

    @staticmethod
    def concat(name: str, parts: Iterable[Trace]) -> Trace:
        ps = list(parts)
        def cat(k):
            return np.concatenate([getattr(p, k) for p in ps])
        return Trace(name, cat("arrival"), cat("work"), cat("demand"), cat("mem_gb"),
                     cat("kind"), cat("beta"), cat("sigma"), ps[0].report if ps else None)


# ---------------------------------------------------------------------------------------------
# interference profile: the traces have no kernel metrics, so each task gets a deterministic
# pseudo-random "exclusive-run profile" from a hash of its id (documented in docs/cluster.md).

def profile_from_keys(keys: list[str], kind: np.ndarray, seed: int = 0
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(beta, sigma) per task from a stable hash of its key: beta ~ U(0.05, 0.45) for inference,
    U(0.2, 0.8) for training; sigma ~ U(0.5, 1.5)."""
    u = np.empty((len(keys), 2))
    for i, k in enumerate(keys):
        h = hashlib.blake2b(f"{seed}:{k}".encode(), digest_size=8).digest()
        u[i, 0] = int.from_bytes(h[:4], "little") / 2**32
        u[i, 1] = int.from_bytes(h[4:], "little") / 2**32
    return _profile(u, kind)


def _profile(u: np.ndarray, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    train = kind == TRAINING
    beta = np.where(train, 0.2 + 0.6 * u[:, 0], 0.05 + 0.4 * u[:, 0])
    sigma = 0.5 + u[:, 1]
    return beta, sigma


def memory_model(demand: np.ndarray, kind: np.ndarray) -> np.ndarray:
    per = np.where(kind == TRAINING, MEMORY_PER_SHARE_GB[1], MEMORY_PER_SHARE_GB[0])
    return demand * per


def _check_header(header: list[str], expected: tuple[str, ...], what: str) -> list[int]:
    names = [h.strip() for h in header]
    missing = [c for c in expected if c not in names]
    unknown = [c for c in names if c not in expected]
    if missing or unknown:
        msg = [f"{what}: unexpected header"]
        if missing:
            msg.append(f"missing column(s): {', '.join(missing)}")
        if unknown:
            msg.append(f"unknown column(s): {', '.join(unknown)}")
        raise ValueError("; ".join(msg) + f" (expected: {', '.join(expected)})")
    return [names.index(c) for c in expected]


def _int(s: str) -> int:
    s = s.strip()
    v = float(s)  # accepts "12" and "12.0"
    if not math.isfinite(v) or v != int(v):
        raise ValueError(s)
    return int(v)


class _Skip(Exception):
    """A trace row left out: ``kind`` ``"bad"`` (malformed, with its line) or ``"filter"``
    (well formed, not a task we simulate), and why."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason

    def count(self, rep: LoadReport, line: int) -> None:
        if self.kind == "bad":
            rep.bad(self.reason, line)
        else:
            rep.filter(self.reason)


def _openb_fields(r: dict[str, str]) -> tuple[int, int, int | None, int | None, str, str]:
    """The pod's numbers and labels, checked: ``(num_gpu, milli, sched, deleted, qos,
    phase)``; raises :class:`_Skip` for a malformed row."""
    try:
        num_gpu, milli = _int(r["num_gpu"]), _int(r["gpu_milli"])
        created = _int(r["creation_time"])
        deleted = _int(r["deletion_time"]) if r["deletion_time"].strip() else None
        sched = _int(r["scheduled_time"]) if r["scheduled_time"].strip() else None
    except ValueError:
        raise _Skip("bad", "non-integer number") from None
    qos, phase = r["qos"].strip(), r["pod_phase"].strip()
    if qos not in OPENB_QOS:
        raise _Skip("bad", "unknown qos")
    if phase not in OPENB_PHASES:
        raise _Skip("bad", "unknown pod_phase")
    if num_gpu < 0 or milli < 0 or milli > 1000 or created < 0:
        raise _Skip("bad", "value out of range")
    if num_gpu > MAX_TASKS_PER_ROW:
        raise _Skip("bad", f"more than {MAX_TASKS_PER_ROW} per-GPU tasks")
    return num_gpu, milli, sched, deleted, qos, phase


def _openb_pod(r: dict[str, str]) -> tuple[int, int, int, int, str]:
    """A pod we simulate: ``(num_gpu, milli, sched, length, qos)``; raises :class:`_Skip`
    (the module docstring's rules, in their order) otherwise."""
    num_gpu, milli, sched, deleted, qos, phase = _openb_fields(r)
    if num_gpu == 0:
        raise _Skip("filter", "no GPU (num_gpu=0)")
    if phase == "Failed":
        raise _Skip("filter", "failed")
    if phase == "Pending" or sched is None:
        raise _Skip("filter", "never scheduled")
    if deleted is None:
        raise _Skip("bad", "missing deletion_time")
    if deleted < sched or sched < 0:
        raise _Skip("bad", "deletion before scheduling")
    if deleted == sched:
        raise _Skip("filter", "zero length")
    if milli == 0:
        raise _Skip("filter", "zero GPU share")
    return num_gpu, milli, sched, deleted - sched, qos


def _openb_kind(qos: str, milli: int, length: int) -> int:
    """Inference or training by QoS class (Burstable: by share and length)."""
    if qos in ("LS", "Guaranteed"):
        return INFERENCE
    if qos == "BE":
        return TRAINING
    return TRAINING if (milli >= 500 and length >= 3600) else INFERENCE  # Burstable


# ---------------------------------------------------------------------------------------------
def _text_file(load: Callable[..., _T]) -> Callable[..., _T]:
    """A loader whose file turns out not to be UTF-8 text raises a ``ValueError`` naming the
    file (the bare ``UnicodeDecodeError`` named only a byte)."""
    @functools.wraps(load)
    def wrapped(*args: object, **kw: object) -> _T:
        try:
            return load(*args, **kw)
        except UnicodeDecodeError as exc:
            path = args[0] if args else kw.get("path", "the file")
            raise ValueError(f"{path}: not a UTF-8 text CSV file ({exc.reason} at byte "
                             f"{exc.start})") from None
    return wrapped


@_text_file
def load_openb(path: str | Path = OPENB_PODS, *, seed: int = 0) -> Trace:
    """Load an openb pod list (see the module docstring for the mapping rules).

    Parameters
    ----------
    path : str or Path
        The pod list CSV (default: the copy in ``harness/data``).
    seed : int
        Seed of the interference profiles.

    Returns
    -------
    Trace
        One task per GPU of each kept pod; ``report`` accounts for every row.
    """
    path = Path(path)
    rep = LoadReport(f"openb {path.name}")
    keys: list[str] = []
    arr, work, dem, kind = [], [], [], []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"{path}: empty file, expected header "
                             f"{', '.join(OPENB_COLUMNS)}") from None
        idx = _check_header(header, OPENB_COLUMNS, str(path))
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            rep.rows += 1
            if len(row) != len(header):
                rep.bad("wrong field count", line)
                continue
            r = dict(zip(OPENB_COLUMNS, (row[i] for i in idx)))
            try:
                num_gpu, milli, sched, length, qos = _openb_pod(r)
            except _Skip as skip:
                skip.count(rep, line)
                continue
            k = _openb_kind(qos, milli, length)
            rep.kept_rows += 1
            d = milli / 1000.0
            for j in range(num_gpu):
                keys.append(f"{r['name'].strip()}#{j}")
                arr.append(sched)
                work.append(float(length))
                dem.append(d)
                kind.append(k)
    rep.tasks = len(arr)
    rep.check()
    kind_a = np.array(kind, dtype=np.int8)
    dem_a = np.array(dem, dtype=float)
    beta, sigma = profile_from_keys(keys, kind_a, seed)
    a = np.array(arr, dtype=np.int64)
    if len(a):
        a = a - a.min()
    return Trace("openb", a, np.array(work), dem_a, memory_model(dem_a, kind_a), kind_a,
                 beta, sigma, rep)


def pai_kind(task_name: str, util: float, mem_gb: float, length: float) -> int:
    """Training vs inference rule for PAI tasks (module docstring)."""
    n = task_name.lower()
    if "train" in n:
        return TRAINING
    if "infer" in n or "serv" in n:
        return INFERENCE
    score = (util >= 0.5) + (mem_gb >= 8.0) + (length >= 3600)
    return TRAINING if score >= 2 else INFERENCE


def _pai_fields(r: dict[str, str]) -> tuple[float, float, int, float, float]:
    """The task's numbers, checked: ``(plan_gpu, plan_mem, inst_num, start, end)``; raises
    :class:`_Skip` for a failed task or a malformed row."""
    if r["status"] == "Failed":
        raise _Skip("filter", "failed")
    try:
        gpu = float(r["plan_gpu"]) if r["plan_gpu"] else 0.0
        pmem = float(r["plan_mem"]) if r["plan_mem"] else 0.0
        inst = _int(r["inst_num"]) if r["inst_num"] else 1
        st = float(r["start_time"]) if r["start_time"] else math.nan
        en = float(r["end_time"]) if r["end_time"] else math.nan
    except ValueError:
        raise _Skip("bad", "non-numeric field") from None
    if not (math.isfinite(gpu) and math.isfinite(pmem)) or gpu < 0 or pmem < 0 or inst < 0:
        raise _Skip("bad", "value out of range")
    return gpu, pmem, inst, st, en


def _pai_split(gpu: float, pmem: float, inst: int) -> int:
    """Sub-tasks per instance (the split rule); raises :class:`_Skip` when the row would
    make more than :data:`MAX_TASKS_PER_ROW` per-GPU tasks."""
    n = max(math.ceil(gpu / 100.0 / SPLIT_UTIL - 1e-9), math.ceil(pmem / SPLIT_MEM_GB - 1e-9), 1)
    if inst * n > MAX_TASKS_PER_ROW:
        raise _Skip("bad", f"more than {MAX_TASKS_PER_ROW} per-GPU tasks")
    return n


def _pai_task(r: dict[str, str]) -> tuple[float, float, int, float, int, int]:
    """A task we simulate: ``(plan_gpu, plan_mem, inst_num, start, length, split)``; raises
    :class:`_Skip` (the module docstring's rules, in their order) otherwise."""
    gpu, pmem, inst, st, en = _pai_fields(r)
    if r["status"] != "Terminated" or not (math.isfinite(st) and math.isfinite(en)):
        raise _Skip("filter", "not terminated / no times")
    if en < st:
        raise _Skip("bad", "end before start")
    if gpu == 0 or pmem == 0 or inst == 0:
        raise _Skip("filter", "zero GPU, memory or instances")
    length = math.floor(en) - math.floor(st)
    if length < 1:
        raise _Skip("filter", "zero length")
    return gpu, pmem, inst, st, length, _pai_split(gpu, pmem, inst)


@_text_file
def load_pai(path: str | Path, *, seed: int = 0) -> Trace:
    """Load a PAI 2020 ``pai_task_table`` CSV (with or without its header row).

    Parameters
    ----------
    path : str or Path
        The CSV file.
    seed : int
        Seed of the interference profiles.

    Returns
    -------
    Trace
        The per-GPU tasks (see the module docstring); ``report`` accounts for every row.
    """
    path = Path(path)
    rep = LoadReport(f"pai {path.name}")
    keys: list[str] = []
    arr, work, dem, mem, kind = [], [], [], [], []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        first = next(reader, None)
        if first is None:
            raise ValueError(f"{path}: empty file")
        rows: Iterable[list[str]]
        looks_header = any(c.strip() in PAI_COLUMNS for c in first) or not any(
            c.strip().replace(".", "", 1).isdigit() for c in first)
        if looks_header:
            idx = _check_header(first, PAI_COLUMNS, str(path))
            rows, start = reader, 2
        else:
            if len(first) != len(PAI_COLUMNS):
                raise ValueError(f"{path}: no header and {len(first)} fields; a headerless "
                                 f"pai_task_table has {len(PAI_COLUMNS)}: "
                                 f"{', '.join(PAI_COLUMNS)}")
            idx = list(range(len(PAI_COLUMNS)))
            rows, start = _chain([first], reader), 1
        width = len(first)
        for line, row in enumerate(rows, start=start):
            if not row or all(not c.strip() for c in row):
                continue
            rep.rows += 1
            if len(row) != width:
                rep.bad("wrong field count", line)
                continue
            r = dict(zip(PAI_COLUMNS, (row[i].strip() for i in idx)))
            try:
                gpu, pmem, inst, st, length, n = _pai_task(r)
            except _Skip as skip:
                skip.count(rep, line)
                continue
            util = gpu / 100.0
            k = pai_kind(r["task_name"], util, pmem, length)
            rep.kept_rows += 1
            for i in range(inst):
                for j in range(n):
                    keys.append(f"{r['job_name']}/{r['task_name']}/{i}/{j}")
                    arr.append(math.floor(st))
                    work.append(float(length))
                    dem.append(util / n)
                    mem.append(pmem / n)
                    kind.append(k)
    rep.tasks = len(arr)
    rep.check()
    kind_a = np.array(kind, dtype=np.int8)
    beta, sigma = profile_from_keys(keys, kind_a, seed)
    a = np.array(arr, dtype=np.int64)
    if len(a):
        a = a - a.min()
    return Trace("pai", a, np.array(work), np.array(dem, dtype=float), np.array(mem, dtype=float),
                 kind_a, beta, sigma, rep)


def _chain(*its):
    for it in its:
        yield from it


@_text_file
def load_gpu_mix(path: str | Path = OPENB_NODES) -> dict[str, int]:
    """GPU models and counts from an openb node list (for heterogeneous pools)."""
    path = Path(path)
    out: dict[str, int] = {}
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty file")
        idx = _check_header(header, ("sn", "cpu_milli", "memory_mib", "gpu", "model"),
                            str(path))
        for line, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: wrong field count")
            model, n = row[idx[4]].strip(), _int(row[idx[3]])
            out[model] = out.get(model, 0) + n
    return out
