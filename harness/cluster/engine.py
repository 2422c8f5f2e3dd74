"""Trace-driven cluster simulation (seed 000 §VI), event-driven with 1 s semantics.

The reference semantics is the paper's loop over 1 s ticks. At tick ``t``:

1. jobs whose remaining work reached zero during ``[t-1, t)`` leave their GPU (a GPU with no
   job is powered off; its slot may be reused);
2. processes whose restart (MPS change) ends at ``t`` resume; parked controllers whose outer
   step is due wake up;
3. jobs arriving at ``t`` are dispatched in trace order: the placement picks among the
   powered-on GPUs where the job's demanded utilization and memory fit; when none fits a GPU
   is powered on (the lowest free slot whose memory is large enough);
4. if ``t`` is a multiple of 4 s (GPUColo) or 25 s (GSLICE), the controllers of the GPUs that
   are not settled run once (see :mod:`harness.cluster.control`);
5. rates are recomputed on the GPUs that changed, and every job progresses ``rate`` seconds of
   its trace length during ``[t, t+1)``.

``Simulation.run()`` skips the ticks at which nothing can happen: between events every rate
is constant, so it computes each job's finishing tick directly (one heap entry per GPU: its
earliest finishing job) and jumps to the next arrival, completion, restart end, wake-up or
(while some controller is unsettled) control tick. With ``stepwise=True`` it walks every
second as above and subtracts the rates each second; the tests check both give the same
per-job completion ticks and daily GPU counts.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable

import numpy as np

from harness.cluster.config import DEFAULT_GPUS, GpuType, SimConfig, SimResult
from harness.cluster.control import EPS_WORK, ControllerMixin
from harness.cluster.placement import KacePredictor, choose, observed_features
from harness.cluster.policies import fixed_shares, make_policy, proportional_shares, rates
from harness.cluster.traces import DAY, INFERENCE, TRAINING, Trace
from harness.cluster.vcontrol import VectorTwoTier

INF = 1 << 62

__all__ = ["DEFAULT_GPUS", "GpuType", "SimConfig", "SimResult", "Simulation", "simulate"]


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


class Simulation(ControllerMixin):
    """Run one policy and placement over a trace. ``run()`` returns a :class:`SimResult`."""

    def __init__(self, trace: Trace, cfg: SimConfig | None = None, **kw) -> None:
        self.trace = trace
        self.cfg = cfg or SimConfig(**kw)
        self.pol = make_policy(self.cfg.policy)

    # -----------------------------------------------------------------------------------------
    def _setup(self) -> None:
        tr, cfg = self.trace, self.cfg
        n = len(tr)
        self.n = n
        self.arr = tr.arrival.tolist()
        self.d = tr.demand.tolist()
        self.memj = np.minimum(tr.mem_gb, max(gt.mem_gb for gt in cfg.gpu_types)).tolist()
        self.kindj = tr.kind.tolist()
        self.beta = tr.beta.tolist()
        self.sigma = tr.sigma.tolist()
        self.rem = tr.work.astype(float).tolist()
        self.tref = [0] * n
        self.rate = [0.0] * n
        self.gpu = [-1] * n
        self.finish = [-1] * n
        self.share = [0.0] * n          # GSLICE
        self.jrestart = [0] * n         # GSLICE: restarting until
        self.feat = observed_features(tr.demand, tr.beta, tr.sigma, tr.mem_gb, seed=cfg.seed)
        self.featl = self.feat.tolist()
        self.kace = None
        self.first_fit = cfg.placement == "first-fit"
        # first-fit's search structure (not needed when every job gets a GPU of its own)
        self.on_order = PowerOnOrder() if self.first_fit and not self.pol.exclusive else None
        if cfg.placement == "kace":
            self.kace = KacePredictor.train(self.feat, tr.demand, tr.beta, tr.sigma,
                                            cfg.plant.interference, seed=cfg.seed)
        self.pattern = [gt for gt in cfg.gpu_types for _ in range(max(1, int(gt.weight)))]
        p = cfg.plant
        self.smax, self.gamma, self.iter_s = p.max_speedup, p.interference, p.train_iteration_s
        G = 64
        self.G = 0
        self.free_u = np.zeros(G)
        self.free_m = np.zeros(G)
        self.nonempty = np.zeros(G, dtype=bool)
        self.order = np.full(G, INF, dtype=np.int64)
        self.pool = np.zeros(G, dtype=np.int8)
        self.memcap = np.zeros(G)
        self.count = np.zeros(G)
        self.n_inf = np.zeros(G)
        self.sig_inf = np.zeros(G)
        self.press = np.zeros(G)
        self.fsum = np.zeros((G, self.feat.shape[1]))
        # per-slot python state
        # gq, gbd: per job gamma * sigma and beta * d, the factors of the plant's pressure term
        names = ("speed", "gjobs", "gk", "gd", "gb", "gs", "gq", "gbd", "ijobs", "isig", "iB",
                 "DI", "DT", "BI", "BT", "colo", "trestart", "wait_since", "wait_count",
                 "wtoken", "gver")
        for name in names:
            setattr(self, name, [])
        self.free_slots: list[int] = []
        self.power_on = 0
        self.n_used = 0
        self.n_pool = [0, 0]
        c = cfg.control
        self.slo_lat = cfg.slo_latency
        self.setpoint = self.slo_lat * (1.0 - c.setpoint_margin)
        self.ctl = VectorTwoTier(self.setpoint, every=c.outer_every, threshold=c.threshold,
                                 sleep_bounds=(0.0, c.sleep_max_s), hold_periods=2)
        self.active: set[int] = set()
        self.heap: list[tuple[int, int, int]] = []    # (tick, version, gpu): earliest finish
        self.rheap: list[tuple[int, int]] = []         # (tick, gpu): restart ends
        self.wheap: list[tuple[int, int, int]] = []   # (tick, gpu, token): parked wake-ups
        self.dirty: set[int] = set()
        self.stats = {"controller_updates": 0, "mps_changes": 0, "restarts": 0}
        self.scheduled = c.gain == "scheduled"
        self.sleep_tol, self.sleep_max, self.detune = c.sleep_tolerance_s, c.sleep_max_s, c.detune
        self.period = c.inner_period_s if self.pol.controller == "gpucolo" else (
            c.gslice_period_s if self.pol.controller == "gslice" else 0)

    def _grow(self) -> None:
        G = len(self.free_u) * 2
        for name in ("free_u", "free_m", "nonempty", "order", "pool", "memcap", "count",
                     "n_inf", "sig_inf", "press"):
            a = getattr(self, name)
            b = np.full(G, INF if name == "order" else 0, dtype=a.dtype)
            b[:len(a)] = a
            setattr(self, name, b)
        f = np.zeros((G, self.fsum.shape[1]))
        f[:len(self.fsum)] = self.fsum
        self.fsum = f

    def _new_slot(self) -> int:
        g = self.G
        if g >= len(self.free_u):
            self._grow()
        self.G += 1
        gt = self.pattern[g % len(self.pattern)]
        self.memcap[g] = gt.mem_gb
        self.speed.append(gt.speed)
        for name in ("gjobs", "gk", "gd", "gb", "gs", "gq", "gbd", "ijobs", "isig", "iB"):
            getattr(self, name).append([])
        for name in ("DI", "DT", "BI", "BT"):
            getattr(self, name).append(0.0)
        self.colo.append(False)
        for name in ("trestart", "wait_count", "wtoken", "gver"):
            getattr(self, name).append(0)
        self.wait_since.append(-1)
        self.ctl.ensure(self.G)
        return g

    def _power_on(self, mem: float, pool: int) -> int:
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
            s = self._new_slot()
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

    # -----------------------------------------------------------------------------------------
    def _dispatch(self, j: int, t: int) -> None:
        d, m, k = self.d[j], self.memj[j], self.kindj[j]
        pool = 0 if self.pol.mixed else k
        g = -1
        if not (self.pol.exclusive or (k == TRAINING and self.pol.exclusive_training)) \
                and self.G:
            if self.first_fit:
                g = self.on_order.first(d, m, None if self.pol.mixed else pool)
            else:
                G = self.G
                # powered-off slots have free_u = 0 < d, so they never fit
                mask = (self.free_u[:G] >= d - 1e-9) & (self.free_m[:G] >= m - 1e-9)
                if not self.pol.mixed:
                    mask &= self.pool[:G] == pool
                cand = np.flatnonzero(mask)
                if len(cand):
                    g = choose(self.cfg.placement, cand, self.order, fx=self.feat[j], kind=k,
                               count=self.count, fsum=self.fsum, n_inf=self.n_inf,
                               sig_inf=self.sig_inf, press=self.press, kace=self.kace)
        if g < 0:
            g = self._power_on(m, pool)
        self._add(j, g, t)

    def _add(self, j: int, g: int, t: int) -> None:
        d, k, b, s = self.d[j], self.kindj[j], self.beta[j], self.sigma[j]
        self.gjobs[g].append(j)
        self.gk[g].append(k)
        self.gd[g].append(d)
        self.gb[g].append(b)
        self.gs[g].append(s)
        self.gq[g].append(self.gamma * s)
        self.gbd[g].append(b * d)
        self.gpu[j] = g
        self.tref[j] = t
        self.free_u[g] -= d
        self.free_m[g] -= self.memj[j]
        if self.on_order is not None:
            self.on_order.set(g, self.free_u[g], self.free_m[g])
        self._aggregate(j, g, +1)
        if self.pol.controller == "gslice" and k == INFERENCE:
            used = sum(self.share[i] for i in self.gjobs[g] if i != j)
            self.share[j] = min(d, max(0.0, 1.0 - used))
        self._changed(g, t)

    def _aggregate(self, j: int, g: int, sign: int) -> None:
        d, b, s = self.d[j], self.beta[j], self.sigma[j]
        self.count[g] += sign
        inference = self.kindj[j] == INFERENCE
        if not self.first_fit:      # placement aggregates
            fx = self.featl[j]
            self.fsum[g] += sign * self.feat[j]
            self.press[g] += sign * fx[1]
            if inference:
                self.sig_inf[g] += sign * fx[2]
        if inference:
            self.n_inf[g] += sign
            self.DI[g] += sign * d
            self.BI[g] += sign * b * d
            if sign > 0:
                self.ijobs[g].append(j)
                self.isig[g].append(s)
                self.iB[g].append(s * b * d)
            else:
                i = self.ijobs[g].index(j)
                for lst in (self.ijobs[g], self.isig[g], self.iB[g]):
                    lst.pop(i)
        else:
            self.DT[g] += sign * d
            self.BT[g] += sign * b * d

    def _remove(self, j: int, t: int) -> None:
        g = self.gpu[j]
        jobs = self.gjobs[g]
        i = jobs.index(j)
        for lst in (jobs, self.gk[g], self.gd[g], self.gb[g], self.gs[g], self.gq[g],
                    self.gbd[g]):
            lst.pop(i)
        self.finish[j] = t
        self.free_u[g] += self.d[j]
        self.free_m[g] += self.memj[j]
        self._aggregate(j, g, -1)
        if self.on_order is not None:
            if jobs:
                self.on_order.set(g, self.free_u[g], self.free_m[g])
            else:
                self.on_order.remove(g)
        if not jobs:
            self.nonempty[g] = False
            self.order[g] = INF
            self.free_u[g] = self.free_m[g] = 0.0
            self.count[g] = self.press[g] = self.n_inf[g] = self.sig_inf[g] = 0.0
            self.fsum[g] = 0.0
            self.DI[g] = self.DT[g] = self.BI[g] = self.BT[g] = 0.0
            self.n_used -= 1
            self.n_pool[int(self.pool[g])] -= 1
            heapq.heappush(self.free_slots, g)
            if self.colo[g]:
                self.colo[g] = False
                self.ctl.reset(g)
            self._forget(g)
            self.trestart[g] = 0
            self.gver[g] += 1
            self.dirty.discard(g)
            return
        self._changed(g, t)

    def _changed(self, g: int, t: int) -> None:
        self.dirty.add(g)
        if self.pol.controller == "gslice":
            if self.n_inf[g] > 0:
                self._activate(g, t)
        elif self.pol.controller == "gpucolo":
            self._colo_changed(g, t)

    # ---- rates ------------------------------------------------------------------------------
    def _rates(self, g: int, t: int) -> list[float]:
        pol, p = self.pol, self.cfg.plant
        if pol.controller == "gpucolo":
            if self.colo[g]:
                return self._colo_rates(g, t)
            u = proportional_shares(self.gd[g], self.smax)
            if t < self.trestart[g]:
                u = [0.0 if k == TRAINING else x for k, x in zip(self.gk[g], u)]
        elif pol.controller == "gslice" and self.pool[g] == INFERENCE:
            u = [0.0 if t < self.jrestart[j] else min(self.share[j], self.smax * self.d[j])
                 for j in self.gjobs[g]]
        else:
            u = fixed_shares(self.gk[g], self.gd[g], pol.weights, self.smax,
                             pol.exclusive or pol.exclusive_training)
        return rates(u, self.gd[g], self.gb[g], self.gs[g], self.speed[g], p.interference)

    def _refresh(self, g: int, t: int) -> None:
        jobs = self.gjobs[g]
        if not jobs:
            return
        if self.stepwise:
            rate = self.rate
            for j, r in zip(jobs, self._rates(g, t)):
                rate[j] = r
            return
        bj = self._advance_colo(g, t) if self.colo[g] else self._advance(jobs, self._rates(g, t), t)
        v = self.gver[g] + 1
        self.gver[g] = v
        if bj >= 0:
            rate, rem, tref, eps = self.rate, self.rem, self.tref, EPS_WORK
            # the exact tick of the earliest: smallest k >= 1 with rem - eps - k r <= 0 (what
            # the 1 s loop finds); the others are checked when that tick comes
            r, x = rate[bj], rem[bj] - eps
            k = math.ceil(x / r)
            if k < 1:
                k = 1
            elif x - k * r > 0:
                k += 1
            elif k > 1 and x - (k - 1) * r <= 0:
                k -= 1
            heapq.heappush(self.heap, (tref[bj] + k, v, g))

    def _advance(self, jobs: list[int], new: list[float], t: int) -> int:
        """Give ``jobs`` their ``new`` rates from tick ``t`` (the work done at a changed job's
        old rate since its last change is booked first); returns the job that finishes first
        at these rates (-1 when none progresses). :meth:`_advance_colo` is the same loop."""
        rate, rem, tref, eps = self.rate, self.rem, self.tref, EPS_WORK
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

    # -----------------------------------------------------------------------------------------
    def run(self, *, stepwise: bool = False,
            progress: Callable[[float], None] | None = None) -> SimResult:
        """Simulate to the horizon (default: the end of the last arrival's day)."""
        t0 = time.perf_counter()
        self.stepwise = stepwise
        self._setup()
        n, arr = self.n, self.arr
        horizon = self.cfg.horizon_s
        if horizon is None:
            horizon = ((max(arr) // DAY) + 1) * DAY if n else DAY
        days = math.ceil(horizon / DAY)
        used_s, prov_s = np.zeros(days), np.zeros(days)
        ratio, period = self.pol.provision_ratio, self.period
        heap, rheap, wheap, gver, wtoken = self.heap, self.rheap, self.wheap, self.gver, self.wtoken
        active, dirty, gjobs = self.active, self.dirty, self.gjobs
        rem, rate, tref, eps = self.rem, self.rate, self.tref, EPS_WORK
        heappop, refresh = heapq.heappop, self._refresh
        controller = self.pol.controller
        step = self._step_gpucolo if controller == "gpucolo" else self._step_gslice
        ai, t, ticks, peak, last = 0, -1, 0, 0, 0.0
        acc_t, acc_used, acc_prov = 0, 0, 0     # GPU counts since tick acc_t
        running: set[int] = set()
        while True:
            if stepwise:
                nt = t + 1
            else:
                nt = arr[ai] if ai < n else INF
                while heap and heap[0][1] != gver[heap[0][2]]:
                    heappop(heap)
                if heap and heap[0][0] < nt:
                    nt = heap[0][0]
                if rheap and rheap[0][0] < nt:
                    nt = rheap[0][0]
                while wheap and wheap[0][2] != wtoken[wheap[0][1]]:
                    heappop(wheap)
                if wheap and wheap[0][0] < nt:
                    nt = wheap[0][0]
                if period and active:
                    nt = min(nt, (t // period + 1) * period)
            nt = min(nt, horizon)
            if t >= 0:     # GPU counts hold over [t, nt); integrate when they change
                used = self.n_used
                prov = used if not ratio else int((1 + ratio) * max(
                    self.n_pool[TRAINING], math.ceil(self.n_pool[INFERENCE] / ratio)))
                if used != acc_used or prov != acc_prov:
                    _accumulate(used_s, prov_s, acc_t, t, acc_used, acc_prov)
                    acc_t, acc_used, acc_prov = t, used, prov
                    peak = max(peak, prov)
            if nt >= horizon:
                _accumulate(used_s, prov_s, acc_t, horizon, acc_used, acc_prov)
                break
            t = nt
            ticks += 1
            # 1. completions
            done = None
            if stepwise:
                done = sorted(j for j in running if rem[j] <= eps)
                running.difference_update(done)
            elif heap and heap[0][0] <= t:
                done = []
                while heap and heap[0][0] <= t:
                    _, v, g = heappop(heap)
                    if v == gver[g]:
                        done += [j for j in gjobs[g] if rate[j] > 0
                                 and rem[j] - eps - (t - tref[j]) * rate[j] <= 0]
                done.sort()
            if done:
                for j in done:
                    self._remove(j, t)
            # 2. restart ends, wake-ups
            while rheap and rheap[0][0] <= t:
                _, g = heappop(rheap)
                if self.nonempty[g]:
                    dirty.add(g)
                    if controller == "gslice" or (controller and self.colo[g]):
                        self._activate(g, t)
            while wheap and wheap[0][0] <= t:
                _, g, tok = heappop(wheap)
                if tok == wtoken[g]:
                    self._activate(g, t)
            # 3. arrivals
            while ai < n and arr[ai] == t:
                self._dispatch(ai, t)
                if stepwise:
                    running.add(ai)
                ai += 1
            # 4. controllers
            if period and t % period == 0 and active:
                step(t)
            # 5. rates
            if dirty:
                for g in sorted(dirty):
                    refresh(g, t)
                dirty.clear()
            if stepwise:
                for j in running:
                    rem[j] -= rate[j]
            if progress is not None and ticks % 4096 == 0 and t / horizon - last > 0.001:
                last = t / horizon
                progress(last)
        if progress is not None:
            progress(1.0)
        return self._result(horizon, days, used_s, prov_s, time.perf_counter() - t0, ticks, peak)

    def _result(self, horizon, days, used_s, prov_s, wall, ticks, peak) -> SimResult:
        tr, cfg = self.trace, self.cfg
        finish = np.array(self.finish, dtype=np.int64)
        arrival = tr.arrival
        slo = tr.work / cfg.slo_factor if cfg.slo_mode == "rate" else tr.work * cfg.slo_factor
        viol = np.full(len(tr), -1, dtype=np.int8)
        inf = tr.kind == INFERENCE
        done = finish >= 0
        late = (finish - arrival) > slo + 1.0          # one tick of clock resolution
        viol[inf & done] = late[inf & done]
        viol[inf & ~done & ((horizon - arrival) > slo + 1.0)] = 1
        day_len = np.full(days, float(DAY))
        day_len[-1] = horizon - (days - 1) * DAY
        return SimResult(cfg.policy, cfg.placement, tr.name, days, prov_s / day_len,
                         used_s / day_len, finish, viol, tr.kind, arrival, tr.work, wall, ticks,
                         self.stats["controller_updates"], self.stats["mps_changes"],
                         self.stats["restarts"], peak,
                         self.kace.r2 if self.kace is not None else float("nan"))


def _accumulate(used_s: np.ndarray, prov_s: np.ndarray, t0: int, t1: int, used: int,
                prov: int) -> None:
    """Add ``used``/``prov`` GPU-seconds for every second in [t0, t1) into day bins."""
    while t0 < t1:
        d = t0 // DAY
        if d >= len(used_s):
            return
        e = min(t1, (d + 1) * DAY)
        used_s[d] += used * (e - t0)
        prov_s[d] += prov * (e - t0)
        t0 = e


def simulate(trace: Trace, policy: str = "gpucolo", placement: str = "first-fit", *,
             progress=None, stepwise: bool = False, **kw) -> SimResult:
    """Convenience wrapper: ``simulate(trace, "gpucolo", "kace")``."""
    return Simulation(trace, SimConfig(policy=policy, placement=placement, **kw)).run(
        progress=progress, stepwise=stepwise)
