"""GPUColo's two-tier controller inside the cluster engine (the model and the loop are described
in :mod:`harness.cluster.control`).
"""

from __future__ import annotations

import heapq
import math

from harness.cluster.control import SlotController, inner_design
from harness.cluster.policies import gpucolo_shares, proportional_shares, rates
from harness.cluster.state import EPS_WORK, ClusterState, advance_jobs
from harness.cluster.traces import INFERENCE, TRAINING
from harness.cluster.vcontrol import CORE_DEFAULTS, VectorTwoTier

__all__ = ["GpuColoController"]


class GpuColoController(SlotController):
    """GPUColo's two-tier loop on every co-located GPU (see the module docstring).

    The controller constants come from the core: the inner design and its decoupling check
    from :func:`inner_design`, the two-tier equations from
    :class:`~harness.cluster.vcontrol.VectorTwoTier` (``gpucontrol.TwoTierController``'s).

    Parameters
    ----------
    state : ClusterState
        The engine's state (shared, changed in place).
    """

    #: the per-GPU two-tier state and equations (``benchmarks/cluster.py --scalar-controllers``
    #: swaps in one ``gpucontrol.TwoTierController`` per GPU to time the vectorized path)
    backend: type[VectorTwoTier] = VectorTwoTier

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        c = state.cfg.control
        self.params = c
        self.period = c.inner_period_s
        self.design, self.gain_range, self.settling_periods = inner_design(c)
        # kp = kp_scale / m for an identified slope m: kp_scale is the design's detune
        self.kp_scale = self.design.kp * self.design.model.gain
        self.scheduled = c.gain == "scheduled"
        self.sleep_tol, self.sleep_max = c.sleep_tolerance_s, c.sleep_max_s
        self.ctl = self.backend(self.setpoint, every=c.outer_every, threshold=c.threshold,
                                 sleep_bounds=(CORE_DEFAULTS["sleep_bounds_s"][0], c.sleep_max_s))

    # ---- engine hooks -----------------------------------------------------------------------
    def slot_added(self, n_slots: int) -> None:
        """Grow the controller arrays.

        Parameters
        ----------
        n_slots : int
            Number of slots.
        """
        self.ctl.ensure(n_slots)

    def slot_freed(self, g: int) -> None:
        """A fresh controller for the slot's next use.

        Parameters
        ----------
        g : int
            The GPU slot.
        """
        s = self.s
        if s.colo[g]:
            s.colo[g] = False
            self.ctl.reset(g)
        self.forget(g)

    def restart_ended(self, g: int, t: int) -> None:
        """Step a co-located GPU again.

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.
        """
        if self.s.colo[g]:
            self.activate(g, t)

    def activate(self, g: int, t: int) -> None:
        """Resume stepping; the calls skipped while parked count toward the outer period.

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.
        """
        s = self.s
        if g in s.active:
            return
        w = s.wait_since[g]
        if w >= 0:
            P = self.period
            skipped = max(0, (t - 1) // P - w // P)
            self.ctl.count[g] = (s.wait_count[g] + skipped) % self.ctl.every
        s.wait_since[g] = -1
        s.wtoken[g] += 1
        s.active.add(g)

    def _park(self, g: int, t: int, wake: bool) -> None:
        s = self.s
        s.active.discard(g)
        s.wait_since[g] = t
        c = self.ctl.count.item(g)
        s.wait_count[g] = c
        s.wtoken[g] += 1
        if wake:
            heapq.heappush(s.wheap, (t + (self.ctl.every - c) * self.period, g, s.wtoken[g]))

    def _restart_gpu(self, g: int, t: int) -> None:
        s = self.s
        r = s.cfg.plant.restart_s
        s.stats["restarts"] += 1
        if r > 0:
            s.trestart[g] = t + r
            heapq.heappush(s.rheap, (t + r, g))

    def jobs_changed(self, g: int, t: int) -> None:
        """Start, keep or stop the GPU's controller as it becomes or stops being co-located.

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.
        """
        s = self.s
        n_inf, count = s.n_inf.item(g), s.count.item(g)
        now = n_inf > 0 and count - n_inf > 0
        if now:
            if not s.colo[g]:
                self.ctl.reset(g)
                s.colo[g] = True
                s.wait_since[g] = -1
            if not self.scheduled:   # "scheduled" identifies before each step
                self._identify(g)
            self.activate(g, t)
        elif s.colo[g]:
            s.colo[g] = False
            if self.ctl.mps.item(g) < self.ctl.mhi and count > n_inf:
                self._restart_gpu(g, t)   # back to MPS 100 % for training alone
            self.ctl.reset(g)
            self.forget(g)

    # ---- plant ------------------------------------------------------------------------------
    def colo_latency(self, g: int, sleep: float, mps: float, restarting: bool = False
                     ) -> float:
        """Worst normalized inference latency on a co-located GPU (the plant of policies.py,
        written with per-GPU sums: O(inference jobs)).

        Parameters
        ----------
        g : int
            The GPU slot.
        sleep : float
            Training sleep (s).
        mps : float
            Training MPS percentage.
        restarting : bool
            Training restarting (uses nothing).

        Returns
        -------
        float
            The latency (100 = trace speed).
        """
        s = self.s
        it = s.iter_s
        cs = it / (it + sleep) * mps / 100.0
        ut = 0.0 if restarting else cs * s.DT[g]
        x = (1.0 - ut) / s.DI[g]
        if x > s.smax:
            x = s.smax
        if x <= 0.0:
            return 1e9
        P = (0.0 if restarting else cs * s.BT[g]) + x * s.BI[g]
        worst = 0.0
        for si, bi in zip(s.isig[g], s.iB[g]):
            w = si * P - bi * x
            if w > worst:
                worst = w
        return 100.0 * (1.0 + s.gamma * worst) / (s.speed[g] * x)

    def _colo_latency2(self, g: int, s0: float, s1: float, mps: float) -> tuple[float, float]:
        """:meth:`colo_latency` at two sleeps (same MPS) in one pass over the inference jobs
        (the same operations per point)."""
        s = self.s
        it, smax = s.iter_s, s.smax
        DT, DI = s.DT[g], s.DI[g]
        c0 = it / (it + s0) * mps / 100.0
        c1 = it / (it + s1) * mps / 100.0
        x0 = (1.0 - c0 * DT) / DI
        x1 = (1.0 - c1 * DT) / DI
        if x0 > smax:
            x0 = smax
        if x1 > smax:
            x1 = smax
        if x0 <= 0.0 or x1 <= 0.0:
            return self.colo_latency(g, s0, mps), self.colo_latency(g, s1, mps)
        BT, BI = s.BT[g], s.BI[g]
        P0 = c0 * BT + x0 * BI
        P1 = c1 * BT + x1 * BI
        w0 = w1 = 0.0
        for si, bi in zip(s.isig[g], s.iB[g]):
            w = si * P0 - bi * x0
            if w > w0:
                w0 = w
            w = si * P1 - bi * x1
            if w > w1:
                w1 = w
        gam, f = s.gamma, s.speed[g]
        return 100.0 * (1.0 + gam * w0) / (f * x0), 100.0 * (1.0 + gam * w1) / (f * x1)

    def _colo_plant(self, g: int, t: int) -> tuple[tuple[float, float], tuple[float, float],
                                                   float]:
        """A co-located GPU's operating point: the used share per unit of demand ``u`` and the
        GPU speed times it ``fu``, both indexed by kind (inference: ``x``, training: the duty
        ``cs``, 0 while restarting), and the pressure ``P``."""
        s = self.s
        if t < s.trestart[g]:
            cs = 0.0
        else:
            it = s.iter_s
            cs = it / (it + self.ctl.sleep.item(g)) * self.ctl.mps.item(g) / 100.0
        x = (1.0 - cs * s.DT[g]) / s.DI[g]
        if x > s.smax:
            x = s.smax
        elif x < 0.0:
            x = 0.0
        P = cs * s.BT[g] + x * s.BI[g]
        f = s.speed[g]
        return (x, cs), (f * x, f * cs), P        # INFERENCE = 0, TRAINING = 1

    def rates(self, g: int, t: int) -> list[float]:
        """Rates on slot ``g``: co-located, ``f u / (1 + gamma sigma (P - beta d u))`` with
        ``gamma sigma`` and ``beta d`` kept per job (``gq``, ``gbd``: the same products in the
        same order as the plant equation of policies.py); else demand-proportional shares.

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.

        Returns
        -------
        list of float
            One rate per job of ``state.gjobs[g]``.
        """
        s = self.s
        if s.colo[g]:
            u, fu, P = self._colo_plant(g, t)
            return [fu[k] / (1.0 + q * (P - bd * u[k]))
                    for k, q, bd in zip(s.gk[g], s.gq[g], s.gbd[g])]
        return super().rates(g, t)

    def shares(self, g: int, t: int) -> list[float]:
        """Demand-proportional shares (a GPU that is not co-located); training gets nothing
        while it restarts.

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.

        Returns
        -------
        list of float
            One share per job of ``state.gjobs[g]``.
        """
        s = self.s
        u = proportional_shares(s.gd[g], s.smax)
        if t < s.trestart[g]:
            u = [0.0 if k == TRAINING else x for k, x in zip(s.gk[g], u)]
        return u

    def advance(self, g: int, t: int) -> int:
        """:func:`advance_jobs` with :meth:`rates`, in one loop on co-located GPUs (most rate
        changes happen there).

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.

        Returns
        -------
        int
            The job that finishes first (-1 when none progresses).
        """
        s = self.s
        if not s.colo[g]:
            return advance_jobs(s, s.gjobs[g], super().rates(g, t), t)
        u, fu, P = self._colo_plant(g, t)
        rate, rem, tref, eps = s.rate, s.rem, s.tref, EPS_WORK
        best, bj = math.inf, -1
        for j, k, q, bd in zip(s.gjobs[g], s.gk[g], s.gq[g], s.gbd[g]):
            r = fu[k] / (1.0 + q * (P - bd * u[k]))
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

    # ---- identification ---------------------------------------------------------------------
    def _identify(self, g: int, sl: float | None = None, mps: float | None = None,
                  mps_slope: bool = True) -> tuple[float, float]:
        """kp = detune / slope on the noise-free plant at the MPS ``mps`` (default: the
        current one): the secant over the sleep range (``gain="fixed"``) or a 1 ms forward
        difference at the sleep ``sl`` (``"scheduled"``, ``sl`` clamped to
        ``[0, sleep_max - 1 ms]``). Returns the sleep ``a`` the slope starts from and the
        latency there."""
        ctl = self.ctl
        if mps is None:
            mps = ctl.mps.item(g)
        if not self.scheduled:
            a, b = 0.0, self.sleep_max
        else:
            sl = ctl.sleep.item(g) if sl is None else sl
            a = max(0.0, min(sl, self.sleep_max - 1e-3))
            b = a + 1e-3
        l0, l1 = self._colo_latency2(g, a, b, mps)
        m = min((l1 - l0) / (b - a), -0.01)
        ctl.kp[g] = self.kp_scale / m
        if mps_slope:
            self._mps_slope(g, a, l0, mps)
        return a, l0

    def _mps_slope(self, g: int, sl: float, l_s: float, mps: float | None = None) -> None:
        """The outer loop's latency-vs-MPS slope at sleep ``sl`` (latency there ``l_s``), over
        the 5 points of MPS below ``mps`` (default: the current MPS)."""
        if mps is None:
            mps = self.ctl.mps.item(g)
        lo_m = max(self.ctl.mlo, mps - 5.0)
        if lo_m < mps:
            lm = self.colo_latency(g, sl, lo_m)
            self.ctl.mps_gain[g] = max((l_s - lm) / (mps - lo_m), 0.01)

    # ---- steps ------------------------------------------------------------------------------
    def step(self, t: int) -> None:
        """One inner period for the active (unsettled) co-located GPUs.

        Parameters
        ----------
        t : int
            The tick.
        """
        s = self.s
        idx = sorted(s.active)
        if not idx:
            return
        s.stats["controller_updates"] += len(idx)
        ctl = self.ctl
        if len(idx) > ctl.SMALL:
            self._step_batch(idx, t)
            return
        # a handful of GPUs (the usual case): one at a time, in Python scalars
        trestart, hold, count, every = s.trestart, ctl.hold, ctl.count, ctl.every
        measure, update, after = self._measure, ctl.update_one, self._after_step
        for g in idx:
            rs = t < trestart[g]
            if rs or hold.item(g) > 0:
                l = math.nan     # a held period: the measurement is not used
            else:
                l = measure(g, count.item(g) + 1 >= every)
            s0, new_s, changed, sat, held = update(g, l, rs)
            after(g, t, l, s0, new_s, changed, sat, held)

    def _step_batch(self, idx: list[int], t: int) -> None:
        """The same step for many GPUs, the controller update vectorized."""
        ctl = self.ctl
        restarting = [t < self.s.trestart[g] for g in idx]
        hold, every = ctl.hold, ctl.every
        lat = [math.nan if rs or hold[g] > 0 else self._measure(g, ctl.count[g] + 1 >= every)
               for g, rs in zip(idx, restarting)]
        s0, changed, sat, held = ctl.update(idx, lat, restarting)
        for i, g in enumerate(idx):
            self._after_step(g, t, lat[i], float(s0[i]), float(ctl.sleep[g]), bool(changed[i]),
                             int(sat[i]), bool(held[i]))

    def _measure(self, g: int, outer_due: bool) -> float:
        """The GPU's latency at its sleep and MPS; with ``gain="scheduled"`` the gain is
        identified there too (and the MPS slope when the outer step is due)."""
        sl, m = self.ctl.sleep.item(g), self.ctl.mps.item(g)
        if not self.scheduled:
            return self.colo_latency(g, sl, m)
        a, l = self._identify(g, sl, m, mps_slope=outer_due)
        return l if a == sl else self.colo_latency(g, sl, m)

    def _after_step(self, g: int, t: int, l: float, s0: float, new_s: float, changed: bool,
                    sat: int, held: bool) -> None:
        """Act on one GPU's controller update: restart on an MPS change, park when the sleep
        move is below the actuator's resolution, mark the GPU's rates for recomputation."""
        s, ctl = self.s, self.ctl
        if changed:
            s.stats["mps_changes"] += 1
            self._restart_gpu(g, t)
            if not self.scheduled:
                self._identify(g)
            s.dirty.add(g)
        elif not held and abs(new_s - s0) < self.sleep_tol:
            # below the actuator's resolution: the move is not applied (no hold is pending:
            # the update was not held and changed no MPS)
            ctl.sleep[g] = s0
            m = ctl.mps.item(g)
            if self.scheduled:
                self._mps_slope(g, s0, l, m)
            will_act = ctl.outer_target_one(ctl.slo - l, sat, m, ctl.mps_gain.item(g)) != m
            self._park(g, t, will_act)
        elif new_s != s0:
            s.dirty.add(g)

    def colo_latency_check(self, g: int) -> tuple[float, float]:
        """(sum-form latency, generic-plant latency) of a co-located GPU, for tests.

        Parameters
        ----------
        g : int
            The GPU slot.

        Returns
        -------
        tuple of float
            :meth:`colo_latency` and the worst inference latency from
            :func:`~harness.cluster.policies.gpucolo_shares` and
            :func:`~harness.cluster.policies.rates`.
        """
        s = self.s
        sl, m = float(self.ctl.sleep[g]), float(self.ctl.mps[g])
        p = s.cfg.plant
        u = gpucolo_shares(s.gk[g], s.gd[g], sl, m, False, p.max_speedup, p.train_iteration_s)
        r = rates(u, s.gd[g], s.gb[g], s.gs[g], s.speed[g], p.interference)
        worst = max(100.0 / rk for rk, k in zip(r, s.gk[g]) if k == INFERENCE)
        return self.colo_latency(g, sl, m), worst
