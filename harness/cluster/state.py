"""The cluster engine's state, in one explicit object shared by the engine and the per-GPU
controllers (:mod:`harness.cluster.control`).

:class:`ClusterState` holds the per-job arrays (as Python lists: the engine touches them one
element at a time), the per-slot arrays the placement searches (numpy), the per-slot Python
lists the plant and the controllers read, and the event heaps. A *slot* is a GPU position;
a powered-off GPU's slot is reused by the next power-on that fits in its memory.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from harness.cluster.config import GpuType, SimConfig
from harness.cluster.placement import KacePredictor, observed_features
from harness.cluster.policies import Policy
from harness.cluster.traces import Trace

INF = 1 << 62
EPS_WORK = 1e-6    # remaining work (s) at which a job is done

#: per-slot numpy arrays of :class:`ClusterState` (grown together)
SLOT_ARRAYS = ("free_u", "free_m", "nonempty", "order", "pool", "memcap", "count", "n_inf",
               "sig_inf", "press")
#: per-slot lists of per-job values (``gq``, ``gbd``: gamma * sigma and beta * d per job, the
#: factors of the plant's pressure term; ``ijobs``/``isig``/``iB``: the inference jobs)
SLOT_JOB_LISTS = ("gjobs", "gk", "gd", "gb", "gs", "gq", "gbd", "ijobs", "isig", "iB")


class PowerOnOrder:
    """The powered-on GPUs in power-on order, for first-fit: per position the free share, free
    memory, pool and slot. A GPU keeps its position while it is on; a powered-off GPU leaves a
    dead position (free share -1: nothing fits), and the dead positions are dropped when they
    outnumber the live ones, so that a search scans at most about twice the GPUs that are on.
    First-fit is then the first position that fits: one pass of two comparisons and a boolean
    ``argmax`` instead of a masked ``argmin`` of the power-on counters over every slot."""

    def __init__(self, capacity: int = 64) -> None:
        self.fu = np.full(capacity, -1.0)
        self.fm = np.full(capacity, -1.0)
        self.pool = np.full(capacity, -1, dtype=np.int8)
        self.slot = np.full(capacity, -1, dtype=np.int64)
        self.pos: dict[int, int] = {}       # slot -> position
        self.n = 0                          # positions in use, live and dead
        self.dead = 0

    def add(self, g: int, fu: float, fm: float, pool: int) -> None:
        if self.n == len(self.fu):
            if 2 * self.dead >= self.n:
                self._compact()
            else:
                for name in ("fu", "fm", "pool", "slot"):
                    a = getattr(self, name)
                    b = np.full(2 * len(a), -1, dtype=a.dtype)
                    b[:len(a)] = a
                    setattr(self, name, b)
        p = self.n
        self.n += 1
        self.fu[p], self.fm[p], self.pool[p], self.slot[p] = fu, fm, pool, g
        self.pos[g] = p

    def set(self, g: int, fu: float, fm: float) -> None:
        p = self.pos[g]
        self.fu[p] = fu
        self.fm[p] = fm

    def remove(self, g: int) -> None:
        p = self.pos.pop(g)
        self.fu[p] = self.fm[p] = -1.0
        self.slot[p] = -1
        self.dead += 1
        if self.dead > 32 and 2 * self.dead > self.n:
            self._compact()

    def _compact(self) -> None:
        n = self.n
        keep = np.flatnonzero(self.slot[:n] >= 0)
        k = len(keep)
        for a in (self.fu, self.fm, self.pool, self.slot):
            a[:k] = a[keep]
            a[k:n] = -1
        self.pos = {g: p for p, g in enumerate(self.slot[:k].tolist())}
        self.n, self.dead = k, 0

    def first(self, d: float, m: float, pool: int | None = None) -> int:
        """The slot of the earliest powered-on GPU where demand ``d`` and memory ``m`` fit
        (and of ``pool`` when given), -1 if none (the engine's 1e-9 tolerances)."""
        n = self.n
        if not n:
            return -1
        mask = self.fu[:n] >= d - 1e-9
        mask &= self.fm[:n] >= m - 1e-9
        if pool is not None:
            mask &= self.pool[:n] == pool
        p = int(mask.argmax())
        return int(self.slot[p]) if mask[p] else -1


def _lists(n: int, value: float) -> list[float]:
    return [value] * n


@dataclass
class ClusterState:
    """Everything a simulation run changes, indexed by job ``j`` or slot ``g``.

    Build it with :meth:`build`; the fields are documented by the engine and controller code
    that uses them (``docs/cluster.md`` describes the model).

    Parameters
    ----------
    trace : Trace
        The trace being simulated.
    cfg : SimConfig
        The run's configuration.
    policy : Policy
        The co-location policy (from :func:`harness.cluster.policies.make_policy`).
    """

    trace: Trace
    cfg: SimConfig
    policy: Policy
    # ---- per job ----
    n: int = 0
    arr: list[int] = field(default_factory=list)
    d: list[float] = field(default_factory=list)
    memj: list[float] = field(default_factory=list)
    kindj: list[int] = field(default_factory=list)
    beta: list[float] = field(default_factory=list)
    sigma: list[float] = field(default_factory=list)
    rem: list[float] = field(default_factory=list)
    tref: list[int] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    gpu: list[int] = field(default_factory=list)
    finish: list[int] = field(default_factory=list)
    share: list[float] = field(default_factory=list)      # GSLICE
    jrestart: list[int] = field(default_factory=list)     # GSLICE: restarting until
    feat: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    featl: list[list[float]] = field(default_factory=list)
    kace: KacePredictor | None = None
    first_fit: bool = True
    on_order: PowerOnOrder | None = None
    pattern: list[GpuType] = field(default_factory=list)
    smax: float = 1.0
    gamma: float = 0.0
    iter_s: float = 1.0
    # ---- per slot: numpy (placement) ----
    G: int = 0
    free_u: np.ndarray = field(default_factory=lambda: np.zeros(0))
    free_m: np.ndarray = field(default_factory=lambda: np.zeros(0))
    nonempty: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    pool: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    memcap: np.ndarray = field(default_factory=lambda: np.zeros(0))
    count: np.ndarray = field(default_factory=lambda: np.zeros(0))
    n_inf: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sig_inf: np.ndarray = field(default_factory=lambda: np.zeros(0))
    press: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fsum: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    # ---- per slot: Python ----
    speed: list[float] = field(default_factory=list)
    gjobs: list[list[int]] = field(default_factory=list)
    gk: list[list[int]] = field(default_factory=list)
    gd: list[list[float]] = field(default_factory=list)
    gb: list[list[float]] = field(default_factory=list)
    gs: list[list[float]] = field(default_factory=list)
    gq: list[list[float]] = field(default_factory=list)
    gbd: list[list[float]] = field(default_factory=list)
    ijobs: list[list[int]] = field(default_factory=list)
    isig: list[list[float]] = field(default_factory=list)
    iB: list[list[float]] = field(default_factory=list)
    DI: list[float] = field(default_factory=list)
    DT: list[float] = field(default_factory=list)
    BI: list[float] = field(default_factory=list)
    BT: list[float] = field(default_factory=list)
    colo: list[bool] = field(default_factory=list)        # GPUColo: co-located now
    trestart: list[int] = field(default_factory=list)     # training restarting until
    wait_since: list[int] = field(default_factory=list)   # parked since (-1: not parked)
    wait_count: list[int] = field(default_factory=list)   # outer count when parked
    wtoken: list[int] = field(default_factory=list)       # wake-up token
    gver: list[int] = field(default_factory=list)         # finish-heap version
    # ---- cluster ----
    free_slots: list[int] = field(default_factory=list)
    power_on: int = 0
    n_used: int = 0
    n_pool: list[int] = field(default_factory=lambda: [0, 0])
    active: set[int] = field(default_factory=set)         # controllers being stepped
    heap: list[tuple[int, int, int]] = field(default_factory=list)   # (tick, version, gpu)
    rheap: list[tuple[int, int]] = field(default_factory=list)       # (tick, gpu): restarts
    wheap: list[tuple[int, int, int]] = field(default_factory=list)  # (tick, gpu, token)
    dirty: set[int] = field(default_factory=set)          # slots whose rates must be redone
    stats: dict[str, int] = field(default_factory=lambda: {
        "controller_updates": 0, "mps_changes": 0, "restarts": 0})

    @classmethod
    def build(cls, trace: Trace, cfg: SimConfig, policy: Policy, capacity: int = 64
              ) -> ClusterState:
        """The state at the start of a run.

        Parameters
        ----------
        trace : Trace
            The trace to simulate.
        cfg : SimConfig
            The run's configuration.
        policy : Policy
            The co-location policy.
        capacity : int
            Initial number of slots (grown on demand).

        Returns
        -------
        ClusterState
            No GPU powered on, every job waiting for its arrival.
        """
        n = len(trace)
        s = cls(trace, cfg, policy, n=n)
        s.arr = trace.arrival.tolist()
        s.d = trace.demand.tolist()
        s.memj = np.minimum(trace.mem_gb, max(gt.mem_gb for gt in cfg.gpu_types)).tolist()
        s.kindj = trace.kind.tolist()
        s.beta = trace.beta.tolist()
        s.sigma = trace.sigma.tolist()
        s.rem = trace.work.astype(float).tolist()
        s.tref = [0] * n
        s.rate = _lists(n, 0.0)
        s.gpu = [-1] * n
        s.finish = [-1] * n
        s.share = _lists(n, 0.0)
        s.jrestart = [0] * n
        s.feat = observed_features(trace.demand, trace.beta, trace.sigma, trace.mem_gb,
                                   seed=cfg.seed)
        s.featl = s.feat.tolist()
        s.first_fit = cfg.placement == "first-fit"
        # first-fit's search structure (not needed when every job gets a GPU of its own)
        s.on_order = PowerOnOrder() if s.first_fit and not policy.exclusive else None
        if cfg.placement == "kace":
            s.kace = KacePredictor.train(s.feat, trace.demand, trace.beta, trace.sigma,
                                         cfg.plant.interference, seed=cfg.seed)
        s.pattern = [gt for gt in cfg.gpu_types for _ in range(max(1, int(gt.weight)))]
        p = cfg.plant
        s.smax, s.gamma, s.iter_s = p.max_speedup, p.interference, p.train_iteration_s
        G = capacity
        for name in SLOT_ARRAYS:
            setattr(s, name, np.zeros(G))
        s.nonempty = np.zeros(G, dtype=bool)
        s.order = np.full(G, INF, dtype=np.int64)
        s.pool = np.zeros(G, dtype=np.int8)
        s.fsum = np.zeros((G, s.feat.shape[1]))
        return s

    # ---- slots ------------------------------------------------------------------------------
    def _grow(self) -> None:
        G = len(self.free_u) * 2
        for name in SLOT_ARRAYS:
            a = getattr(self, name)
            b = np.full(G, INF if name == "order" else 0, dtype=a.dtype)
            b[:len(a)] = a
            setattr(self, name, b)
        f = np.zeros((G, self.fsum.shape[1]))
        f[:len(self.fsum)] = self.fsum
        self.fsum = f

    def new_slot(self) -> int:
        """Add a slot (powered off) of the next GPU type in the pool's pattern.

        Returns
        -------
        int
            The new slot.
        """
        g = self.G
        if g >= len(self.free_u):
            self._grow()
        self.G += 1
        gt = self.pattern[g % len(self.pattern)]
        self.memcap[g] = gt.mem_gb
        self.speed.append(gt.speed)
        for name in SLOT_JOB_LISTS:
            getattr(self, name).append([])
        for name in ("DI", "DT", "BI", "BT"):
            getattr(self, name).append(0.0)
        self.colo.append(False)
        for name in ("trestart", "wait_count", "wtoken", "gver"):
            getattr(self, name).append(0)
        self.wait_since.append(-1)
        return g

    def power_on_slot(self, mem: float, pool: int) -> int:
        """Power on the lowest free slot with at least ``mem`` GB (adding slots as needed).

        Parameters
        ----------
        mem : float
            Memory the job needs (GB).
        pool : int
            The GPU's pool (``INFERENCE`` or ``TRAINING`` for split policies, else 0).

        Returns
        -------
        int
            The powered-on slot.
        """
        skipped, g = [], -1
        while self.free_slots:
            s = heapq.heappop(self.free_slots)
            if self.memcap[s] >= mem - 1e-9:
                g = s
                break
            skipped.append(s)
        for s in skipped:
            heapq.heappush(self.free_slots, s)
        while g < 0:
            s = self.new_slot()
            if self.memcap[s] >= mem - 1e-9:
                g = s
            else:
                heapq.heappush(self.free_slots, s)
        self.power_on += 1
        self.order[g] = self.power_on
        self.nonempty[g] = True
        self.free_u[g] = 1.0
        self.free_m[g] = self.memcap[g]
        self.pool[g] = pool
        if self.on_order is not None:
            self.on_order.add(g, 1.0, self.memcap[g], pool)
        self.n_used += 1
        self.n_pool[pool] += 1
        return g


def advance_jobs(s: ClusterState, jobs: list[int], new: list[float], t: int) -> int:
    """Give ``jobs`` their ``new`` rates from tick ``t`` (the work done at a changed job's
    old rate since its last change is booked first).

    Parameters
    ----------
    s : ClusterState
        The state whose ``rate``/``rem``/``tref`` are updated.
    jobs : list of int
        The jobs of one GPU.
    new : list of float
        Their new rates (trace seconds per second).
    t : int
        The tick from which the rates hold.

    Returns
    -------
    int
        The job that finishes first at these rates (-1 when none progresses).
    """
    rate, rem, tref, eps = s.rate, s.rem, s.tref, EPS_WORK
    best, bj = math.inf, -1
    for j, r in zip(jobs, new):
        rj = rate[j]
        if r != rj:
            if rj:
                rem[j] -= rj * (t - tref[j])
            tref[j] = t
            rate[j] = r
        if r > 0:
            f = tref[j] + (rem[j] - eps) / r
            if f < best:
                best, bj = f, j
    return bj
