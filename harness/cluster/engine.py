"""Trace-driven cluster simulation, event-driven with 1 s semantics (the GPUColo paper
(Chen et al., ICDCS 2024), Sec. VI).

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

The state is one explicit :class:`~harness.cluster.state.ClusterState`; the policy's
controller (:func:`make_controller`) works on it through the hooks of
:class:`~harness.cluster.control.SlotController`. ``run`` is the loop above, one method per
step (``_completions``, ``_restarts_and_wakeups``, ``_arrivals``, the controller's ``step``,
``_rates_changed``) with the GPU-seconds kept by :class:`Accounting`.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.cluster.config import DEFAULT_GPUS, GpuType, SimConfig, SimResult
from harness.cluster.control import GsliceController, SlotController
from harness.cluster.gpucolo import GpuColoController
from harness.cluster.placement import choose
from harness.cluster.policies import make_policy
from harness.cluster.state import EPS_WORK, INF, ClusterState, PowerOnOrder
from harness.cluster.traces import DAY, INFERENCE, TRAINING, Trace

__all__ = ["DEFAULT_GPUS", "Accounting", "GpuType", "PowerOnOrder", "SimConfig", "SimResult",
           "Simulation", "make_controller", "simulate"]


def make_controller(state: ClusterState) -> SlotController:
    """The controller of ``state.policy``.

    Parameters
    ----------
    state : ClusterState
        The engine's state.

    Returns
    -------
    SlotController
        :class:`~harness.cluster.gpucolo.GpuColoController`,
        :class:`~harness.cluster.control.GsliceController` or
        :class:`~harness.cluster.control.SlotController` (fixed shares).
    """
    kind = state.policy.controller
    if kind == "gpucolo":
        return GpuColoController(state)
    if kind == "gslice":
        return GsliceController(state)
    return SlotController(state)


@dataclass
class Accounting:
    """GPU-seconds per day, integrated over the intervals where the GPU counts are constant.

    Parameters
    ----------
    days : int
        Number of day bins.
    """

    days: int
    used_s: np.ndarray = field(init=False)
    prov_s: np.ndarray = field(init=False)
    since: int = 0          # the counts below hold since this tick
    used: int = 0
    prov: int = 0
    peak: int = 0

    def __post_init__(self) -> None:
        self.used_s = np.zeros(self.days)
        self.prov_s = np.zeros(self.days)

    def update(self, t: int, used: int, prov: int) -> None:
        """The counts from tick ``t`` on are ``used`` / ``prov``.

        Parameters
        ----------
        t : int
            The tick.
        used : int
            GPUs hosting a job.
        prov : int
            GPUs provisioned.
        """
        if used != self.used or prov != self.prov:
            _accumulate(self.used_s, self.prov_s, self.since, t, self.used, self.prov)
            self.since, self.used, self.prov = t, used, prov
            self.peak = max(self.peak, prov)

    def close(self, horizon: int) -> None:
        """Integrate up to the horizon.

        Parameters
        ----------
        horizon : int
            The last tick (exclusive).
        """
        _accumulate(self.used_s, self.prov_s, self.since, horizon, self.used, self.prov)


class Simulation:
    """Run one policy and placement over a trace.

    The engine owns a :class:`~harness.cluster.state.ClusterState` (``self.state``) and the
    policy's controller (``self.controller``, see :func:`make_controller`), both built here
    and rebuilt by a second :meth:`run`.

    Parameters
    ----------
    trace : Trace
        The trace to simulate.
    cfg : SimConfig, optional
        The run's configuration (default: ``SimConfig(**kw)``).
    **kw : Any
        :class:`SimConfig` fields, when ``cfg`` is not given.

    Examples
    --------
    >>> from harness.cluster import synthetic
    >>> r = Simulation(synthetic(days=1, target_gpus=5, seed=2), policy="simple").run()
    >>> r.policy, r.days
    ('simple', 1)
    """

    def __init__(self, trace: Trace, cfg: SimConfig | None = None, **kw: Any) -> None:
        self.trace = trace
        self.cfg = cfg or SimConfig(**kw)
        self.pol = make_policy(self.cfg.policy)
        self._fresh = False
        self._build()

    def _build(self) -> None:
        self.state = ClusterState.build(self.trace, self.cfg, self.pol)
        self.controller = make_controller(self.state)
        self._fresh = True

    # ---- placement --------------------------------------------------------------------------
    def _dispatch(self, j: int, t: int) -> None:
        s, pol = self.state, self.pol
        d, m, k = s.d[j], s.memj[j], s.kindj[j]
        pool = 0 if pol.mixed else k
        g = -1
        if not (pol.exclusive or (k == TRAINING and pol.exclusive_training)) and s.G:
            if s.on_order is not None:
                g = s.on_order.first(d, m, None if pol.mixed else pool)
            else:
                G = s.G
                # powered-off slots have free_u = 0 < d, so they never fit
                mask = (s.free_u[:G] >= d - 1e-9) & (s.free_m[:G] >= m - 1e-9)
                if not pol.mixed:
                    mask &= s.pool[:G] == pool
                cand = np.flatnonzero(mask)
                if len(cand):
                    g = choose(self.cfg.placement, cand, s.order, fx=s.feat[j], kind=k,
                               count=s.count, fsum=s.fsum, n_inf=s.n_inf, sig_inf=s.sig_inf,
                               press=s.press, kace=s.kace)
        if g < 0:
            n_before = s.G
            g = s.power_on_slot(m, pool)
            if n_before != s.G:
                self.controller.slot_added(s.G)
        self._add(j, g, t)

    def _add(self, j: int, g: int, t: int) -> None:
        s = self.state
        d, k, b, sg = s.d[j], s.kindj[j], s.beta[j], s.sigma[j]
        s.gjobs[g].append(j)
        s.gk[g].append(k)
        s.gd[g].append(d)
        s.gb[g].append(b)
        s.gs[g].append(sg)
        s.gq[g].append(s.gamma * sg)
        s.gbd[g].append(b * d)
        s.gpu[j] = g
        s.tref[j] = t
        s.free_u[g] -= d
        s.free_m[g] -= s.memj[j]
        if s.on_order is not None:
            s.on_order.set(g, s.free_u[g], s.free_m[g])
        self._aggregate(j, g, +1)
        self.controller.job_added(j, g)
        s.dirty.add(g)
        self.controller.jobs_changed(g, t)

    def _aggregate(self, j: int, g: int, sign: int) -> None:
        s = self.state
        d, b, sg = s.d[j], s.beta[j], s.sigma[j]
        s.count[g] += sign
        inference = s.kindj[j] == INFERENCE
        if not s.first_fit:      # placement aggregates
            fx = s.featl[j]
            s.fsum[g] += sign * s.feat[j]
            s.press[g] += sign * fx[1]
            if inference:
                s.sig_inf[g] += sign * fx[2]
        if inference:
            s.n_inf[g] += sign
            s.DI[g] += sign * d
            s.BI[g] += sign * b * d
            if sign > 0:
                s.ijobs[g].append(j)
                s.isig[g].append(sg)
                s.iB[g].append(sg * b * d)
            else:
                i = s.ijobs[g].index(j)
                for lst in (s.ijobs[g], s.isig[g], s.iB[g]):
                    lst.pop(i)
        else:
            s.DT[g] += sign * d
            s.BT[g] += sign * b * d

    def _remove(self, j: int, t: int) -> None:
        s = self.state
        g = s.gpu[j]
        jobs = s.gjobs[g]
        i = jobs.index(j)
        for lst in (jobs, s.gk[g], s.gd[g], s.gb[g], s.gs[g], s.gq[g], s.gbd[g]):
            lst.pop(i)
        s.finish[j] = t
        s.free_u[g] += s.d[j]
        s.free_m[g] += s.memj[j]
        self._aggregate(j, g, -1)
        if s.on_order is not None:
            if jobs:
                s.on_order.set(g, s.free_u[g], s.free_m[g])
            else:
                s.on_order.remove(g)
        if jobs:
            s.dirty.add(g)
            self.controller.jobs_changed(g, t)
            return
        self._power_off(g)

    def _power_off(self, g: int) -> None:
        s = self.state
        s.nonempty[g] = False
        s.order[g] = INF
        s.free_u[g] = s.free_m[g] = 0.0
        s.count[g] = s.press[g] = s.n_inf[g] = s.sig_inf[g] = 0.0
        s.fsum[g] = 0.0
        s.DI[g] = s.DT[g] = s.BI[g] = s.BT[g] = 0.0
        s.n_used -= 1
        s.n_pool[int(s.pool[g])] -= 1
        heapq.heappush(s.free_slots, g)
        self.controller.slot_freed(g)
        s.trestart[g] = 0
        s.gver[g] += 1
        s.dirty.discard(g)

    # ---- rates ------------------------------------------------------------------------------
    def _refresh(self, g: int, t: int) -> None:
        s = self.state
        jobs = s.gjobs[g]
        if not jobs:
            return
        if self.stepwise:
            rate = s.rate
            for j, r in zip(jobs, self.controller.rates(g, t)):
                rate[j] = r
            return
        bj = self.controller.advance(g, t)
        v = s.gver[g] + 1
        s.gver[g] = v
        if bj >= 0:
            heapq.heappush(s.heap, (s.tref[bj] + _finish_ticks(s.rem[bj], s.rate[bj]), v, g))

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, *, stepwise: bool = False,
            progress: Callable[[float], None] | None = None) -> SimResult:
        """Simulate to the horizon (default: the end of the last arrival's day).

        Parameters
        ----------
        stepwise : bool
            Walk every second (the reference semantics) instead of jumping between events.
        progress : callable, optional
            Called with the fraction of the horizon done.

        Returns
        -------
        SimResult
            GPU counts per day, completion ticks and SLO violations.
        """
        t0 = time.perf_counter()
        if not self._fresh:
            self._build()
        self._fresh = False
        self.stepwise = stepwise
        s = self.state
        horizon = self.cfg.horizon_s
        if horizon is None:
            horizon = ((max(s.arr) // DAY) + 1) * DAY if s.n else DAY
        days = math.ceil(horizon / DAY)
        acc = Accounting(days)
        step, ratio = self.controller.step, self.pol.provision_ratio
        ai, t, ticks, last = 0, -1, 0, 0.0
        running: set[int] = set()
        while True:
            nt = min(t + 1 if stepwise else self._next_event(t, ai), horizon)
            if t >= 0:     # GPU counts hold over [t, nt); integrate when they change
                used = s.n_used
                prov = self._provisioned() if ratio else used
                if used != acc.used or prov != acc.prov:
                    acc.update(t, used, prov)
            if nt >= horizon:
                acc.close(horizon)
                break
            t = nt
            ticks += 1
            self._completions(t, running)
            self._restarts_and_wakeups(t)
            ai = self._arrivals(t, ai, running)
            if self.controller.period and t % self.controller.period == 0 and s.active:
                step(t)
            self._rates_changed(t, running)
            if progress is not None and ticks % 4096 == 0 and t / horizon - last > 0.001:
                last = t / horizon
                progress(last)
        if progress is not None:
            progress(1.0)
        return self._result(horizon, days, acc, time.perf_counter() - t0, ticks)

    def _next_event(self, t: int, ai: int) -> int:
        """The next tick at which something can happen: an arrival, the earliest completion,
        a restart end, a wake-up or (while some controller is unsettled) a control tick."""
        s = self.state
        heap, rheap, wheap, gver, wtoken = s.heap, s.rheap, s.wheap, s.gver, s.wtoken
        nt = s.arr[ai] if ai < s.n else INF
        while heap and heap[0][1] != gver[heap[0][2]]:
            heapq.heappop(heap)
        if heap and heap[0][0] < nt:
            nt = heap[0][0]
        if rheap and rheap[0][0] < nt:
            nt = rheap[0][0]
        while wheap and wheap[0][2] != wtoken[wheap[0][1]]:
            heapq.heappop(wheap)
        if wheap and wheap[0][0] < nt:
            nt = wheap[0][0]
        period = self.controller.period
        if period and s.active:
            nt = min(nt, (t // period + 1) * period)
        return nt

    def _provisioned(self) -> int:
        """GPUs provisioned: the used ones, or Separate's ratio of pools."""
        s, ratio = self.state, self.pol.provision_ratio
        if not ratio:
            return s.n_used
        return int((1 + ratio) * max(s.n_pool[TRAINING], math.ceil(s.n_pool[INFERENCE] / ratio)))

    def _completions(self, t: int, running: set[int]) -> None:
        """Step 1: jobs whose work reached zero leave their GPU (in job order)."""
        s = self.state
        if self.stepwise:
            done = sorted(j for j in running if s.rem[j] <= EPS_WORK)
            running.difference_update(done)
        else:
            heap = s.heap
            if not (heap and heap[0][0] <= t):
                return
            gver, gjobs, rate, rem, tref = s.gver, s.gjobs, s.rate, s.rem, s.tref
            done = []
            while heap and heap[0][0] <= t:
                _, v, g = heapq.heappop(heap)
                if v == gver[g]:
                    done += [j for j in gjobs[g] if rate[j] > 0
                             and rem[j] - EPS_WORK - (t - tref[j]) * rate[j] <= 0]
            done.sort()
        for j in done:
            self._remove(j, t)

    def _restarts_and_wakeups(self, t: int) -> None:
        """Step 2: restarts that end now; parked controllers whose outer step is due."""
        s = self.state
        rheap, wheap = s.rheap, s.wheap
        while rheap and rheap[0][0] <= t:
            _, g = heapq.heappop(rheap)
            if s.nonempty[g]:
                s.dirty.add(g)
                self.controller.restart_ended(g, t)
        while wheap and wheap[0][0] <= t:
            _, g, tok = heapq.heappop(wheap)
            if tok == s.wtoken[g]:
                self.controller.activate(g, t)

    def _arrivals(self, t: int, ai: int, running: set[int]) -> int:
        """Step 3: dispatch the jobs arriving now, in trace order; returns the next job."""
        s = self.state
        arr, n = s.arr, s.n
        while ai < n and arr[ai] == t:
            self._dispatch(ai, t)
            if self.stepwise:
                running.add(ai)
            ai += 1
        return ai

    def _rates_changed(self, t: int, running: set[int]) -> None:
        """Step 5: new rates on the GPUs that changed; stepwise, one second of progress."""
        s = self.state
        if s.dirty:
            for g in sorted(s.dirty):
                self._refresh(g, t)
            s.dirty.clear()
        if self.stepwise:
            rem, rate = s.rem, s.rate
            for j in running:
                rem[j] -= rate[j]

    def _result(self, horizon: int, days: int, acc: Accounting, wall: float, ticks: int
                ) -> SimResult:
        tr, cfg, s = self.trace, self.cfg, self.state
        finish = np.array(s.finish, dtype=np.int64)
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
        return SimResult(cfg.policy, cfg.placement, tr.name, days, acc.prov_s / day_len,
                         acc.used_s / day_len, finish, viol, tr.kind, arrival, tr.work, wall,
                         ticks, s.stats["controller_updates"], s.stats["mps_changes"],
                         s.stats["restarts"], acc.peak,
                         s.kace.r2 if s.kace is not None else float("nan"))


def _finish_ticks(rem: float, r: float) -> int:
    """The smallest ``k >= 1`` with ``rem - eps - k r <= 0`` (what the 1 s loop finds)."""
    x = rem - EPS_WORK
    k = math.ceil(x / r)
    if k < 1:
        k = 1
    elif x - k * r > 0:
        k += 1
    elif k > 1 and x - (k - 1) * r <= 0:
        k -= 1
    return k


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
             progress: Callable[[float], None] | None = None, stepwise: bool = False,
             **kw: Any) -> SimResult:
    """Run one policy and placement over a trace: ``simulate(trace, "gpucolo", "kace")``.

    Parameters
    ----------
    trace : Trace
        The trace to simulate.
    policy : str
        One of :data:`~harness.cluster.policies.POLICIES`.
    placement : str
        One of :data:`~harness.cluster.placement.PLACEMENTS`.
    progress : callable, optional
        Called with the fraction of the horizon done.
    stepwise : bool
        Walk every second instead of jumping between events (same results, slower).
    **kw : Any
        Further :class:`SimConfig` fields.

    Returns
    -------
    SimResult
        The run's result.
    """
    return Simulation(trace, SimConfig(policy=policy, placement=placement, **kw)).run(
        progress=progress, stepwise=stepwise)
