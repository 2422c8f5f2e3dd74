"""Per-GPU controllers inside the cluster engine: GPUColo's two-tier loop and GSLICE.

A mixin of :class:`harness.cluster.engine.Simulation` (it uses the engine's per-GPU state).

GPUColo, on every GPU hosting both inference and training:

* the measured latency is the worst normalized latency (100 = trace speed) of the GPU's
  inference jobs; the set point is the SLO latency times ``1 - setpoint_margin``;
* the gain is identified on the noise-free plant whenever the GPU's jobs or MPS change, and
  (``gain="scheduled"``, default) before each inner step at the current sleep; so is the
  outer loop's latency-vs-MPS slope (what ``LatencyModelFamily.mps_gain`` gives
  ``TwoTierController``), so that one outer step lands near the MPS it needs;
* every ``inner_period_s`` (on multiples of 4 s) the *unsettled* GPUs are stepped together by
  :class:`~harness.cluster.vcontrol.VectorTwoTier` (the equations of
  ``gpucontrol.TwoTierController``); an MPS change restarts the GPU's training processes;
* a step that would move the sleep by less than the actuator resolution (1 ms) is not
  applied and *parks* the GPU: its later calls would change nothing, so they are skipped,
  but they still count toward the outer period; when the outer loop would act it is woken at
  the tick of that outer step.

GSLICE, on inference GPUs, every ``gslice_period_s``: a job above its SLO gets its share
scaled by latency/target (limited by the GPU's free share, most-violating first); a job more
than ``gslice_slack`` below target gets its share scaled down; each change restarts that job.
A GPU is measured only when none of its jobs is restarting; it settles when nothing changed.
"""

from __future__ import annotations

import heapq
import math

from harness.cluster.traces import INFERENCE

EPS_WORK = 1e-6    # remaining work (s) at which a job is done


class ControllerMixin:
    """Controller bookkeeping and steps (see the module docstring)."""

    # ---- activation -------------------------------------------------------------------------
    def _activate(self, g: int, t: int) -> None:
        """Resume stepping a GPU's controller; skipped calls count toward the outer period."""
        if g in self.active:
            return
        w = self.wait_since[g]
        if w >= 0 and self.pol.controller == "gpucolo":
            P = self.period
            skipped = max(0, (t - 1) // P - w // P)
            self.ctl.count[g] = (self.wait_count[g] + skipped) % self.ctl.every
        self.wait_since[g] = -1
        self.wtoken[g] += 1
        self.active.add(g)

    def _park(self, g: int, t: int, wake: bool) -> None:
        self.active.discard(g)
        self.wait_since[g] = t
        c = self.ctl.count.item(g)
        self.wait_count[g] = c
        self.wtoken[g] += 1
        if wake:
            heapq.heappush(self.wheap, (t + (self.ctl.every - c) * self.period, g,
                                        self.wtoken[g]))

    def _forget(self, g: int) -> None:
        self.active.discard(g)
        self.wait_since[g] = -1
        self.wtoken[g] += 1

    def _restart_gpu(self, g: int, t: int) -> None:
        r = self.cfg.plant.restart_s
        self.stats["restarts"] += 1
        if r > 0:
            self.trestart[g] = t + r
            heapq.heappush(self.rheap, (t + r, g))

    def _colo_changed(self, g: int, t: int) -> None:
        """GPUColo bookkeeping after the GPU's jobs changed."""
        n_inf, count = self.n_inf.item(g), self.count.item(g)
        now = n_inf > 0 and count - n_inf > 0
        if now:
            if not self.colo[g]:
                self.ctl.reset(g)
                self.colo[g] = True
                self.wait_since[g] = -1
            if not self.scheduled:   # "scheduled" identifies before each step
                self._identify(g)
            self._activate(g, t)
        elif self.colo[g]:
            self.colo[g] = False
            if self.ctl.mps.item(g) < self.ctl.mhi and count > n_inf:
                self._restart_gpu(g, t)   # back to MPS 100 % for training alone
            self.ctl.reset(g)
            self._forget(g)

    # ---- GPUColo plant ----------------------------------------------------------------------
    def _colo_latency(self, g: int, sleep: float, mps: float, restarting: bool = False) -> float:
        """Worst normalized inference latency on a co-located GPU (the plant of policies.py,
        written with per-GPU sums: O(inference jobs))."""
        it = self.iter_s
        cs = it / (it + sleep) * mps / 100.0
        ut = 0.0 if restarting else cs * self.DT[g]
        x = (1.0 - ut) / self.DI[g]
        if x > self.smax:
            x = self.smax
        if x <= 0.0:
            return 1e9
        P = (0.0 if restarting else cs * self.BT[g]) + x * self.BI[g]
        gam = self.gamma
        worst = 0.0
        for si, bi in zip(self.isig[g], self.iB[g]):
            w = si * P - bi * x
            if w > worst:
                worst = w
        return 100.0 * (1.0 + gam * worst) / (self.speed[g] * x)

    def _colo_latency2(self, g: int, s0: float, s1: float, mps: float) -> tuple[float, float]:
        """:meth:`_colo_latency` at two sleeps (same MPS) in one pass over the inference jobs
        (the same operations per point)."""
        it, smax = self.iter_s, self.smax
        DT, DI = self.DT[g], self.DI[g]
        c0 = it / (it + s0) * mps / 100.0
        c1 = it / (it + s1) * mps / 100.0
        x0 = (1.0 - c0 * DT) / DI
        x1 = (1.0 - c1 * DT) / DI
        if x0 > smax:
            x0 = smax
        if x1 > smax:
            x1 = smax
        if x0 <= 0.0 or x1 <= 0.0:
            return self._colo_latency(g, s0, mps), self._colo_latency(g, s1, mps)
        BT, BI = self.BT[g], self.BI[g]
        P0 = c0 * BT + x0 * BI
        P1 = c1 * BT + x1 * BI
        w0 = w1 = 0.0
        for si, bi in zip(self.isig[g], self.iB[g]):
            w = si * P0 - bi * x0
            if w > w0:
                w0 = w
            w = si * P1 - bi * x1
            if w > w1:
                w1 = w
        gam, f = self.gamma, self.speed[g]
        return 100.0 * (1.0 + gam * w0) / (f * x0), 100.0 * (1.0 + gam * w1) / (f * x1)

    def _colo_plant(self, g: int, t: int) -> tuple[tuple[float, float], tuple[float, float],
                                                   float]:
        """A co-located GPU's operating point: the used share per unit of demand ``u`` and the
        GPU speed times it ``fu``, both indexed by kind (inference: ``x``, training: the duty
        ``cs``, 0 while restarting), and the pressure ``P``."""
        if t < self.trestart[g]:
            cs = 0.0
        else:
            it = self.iter_s
            cs = it / (it + self.ctl.sleep.item(g)) * self.ctl.mps.item(g) / 100.0
        x = (1.0 - cs * self.DT[g]) / self.DI[g]
        if x > self.smax:
            x = self.smax
        elif x < 0.0:
            x = 0.0
        P = cs * self.BT[g] + x * self.BI[g]
        f = self.speed[g]
        return (x, cs), (f * x, f * cs), P        # INFERENCE = 0, TRAINING = 1

    def _colo_rates(self, g: int, t: int) -> list[float]:
        """Rates on a co-located GPU: ``f u / (1 + gamma sigma (P - beta d u))``; ``gamma sigma``
        and ``beta d`` are kept per job (``gq``, ``gbd``: the same products in the same
        order as the plant equation of policies.py)."""
        u, fu, P = self._colo_plant(g, t)
        return [fu[k] / (1.0 + q * (P - bd * u[k]))
                for k, q, bd in zip(self.gk[g], self.gq[g], self.gbd[g])]

    def _advance_colo(self, g: int, t: int) -> int:
        """``_advance(jobs, _colo_rates(g, t), t)`` in one loop (most rate changes happen on
        co-located GPUs)."""
        u, fu, P = self._colo_plant(g, t)
        rate, rem, tref, eps = self.rate, self.rem, self.tref, EPS_WORK
        best, bj = math.inf, -1
        for j, k, q, bd in zip(self.gjobs[g], self.gk[g], self.gq[g], self.gbd[g]):
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

    def _identify(self, g: int, s: float | None = None, mps: float | None = None,
                  mps_slope: bool = True) -> tuple[float, float]:
        """kp = detune / slope on the noise-free plant at the MPS ``mps`` (default: the
        current one): the secant over the sleep range (``gain="fixed"``) or a 1 ms forward
        difference at the sleep ``s`` (``"scheduled"``, ``s`` clamped to
        ``[0, sleep_max - 1 ms]``). Returns the sleep ``a`` the slope starts from and the
        latency there."""
        ctl = self.ctl
        if mps is None:
            mps = ctl.mps.item(g)
        if not self.scheduled:
            a, b = 0.0, self.sleep_max
        else:
            s = ctl.sleep.item(g) if s is None else s
            a = max(0.0, min(s, self.sleep_max - 1e-3))
            b = a + 1e-3
        l0, l1 = self._colo_latency2(g, a, b, mps)
        m = min((l1 - l0) / (b - a), -0.01)
        ctl.kp[g] = self.detune / m
        if mps_slope:
            self._mps_slope(g, a, l0, mps)
        return a, l0

    def _mps_slope(self, g: int, s: float, l_s: float, mps: float | None = None) -> None:
        """The outer loop's latency-vs-MPS slope at sleep ``s`` (latency there ``l_s``), over
        the 5 points of MPS below ``mps`` (default: the current MPS)."""
        if mps is None:
            mps = self.ctl.mps.item(g)
        lo_m = max(self.ctl.mlo, mps - 5.0)
        if lo_m < mps:
            lm = self._colo_latency(g, s, lo_m)
            self.ctl.mps_gain[g] = max((l_s - lm) / (mps - lo_m), 0.01)

    # ---- steps ------------------------------------------------------------------------------
    def _step_gpucolo(self, t: int) -> None:
        idx = sorted(self.active)
        if not idx:
            return
        self.stats["controller_updates"] += len(idx)
        ctl = self.ctl
        if len(idx) > ctl.SMALL:
            self._step_gpucolo_batch(idx, t)
            return
        # a handful of GPUs (the usual case): one at a time, in Python scalars
        trestart, hold, count, every = self.trestart, ctl.hold, ctl.count, ctl.every
        measure, update, after = self._measure, ctl.update_one, self._after_step
        for g in idx:
            rs = t < trestart[g]
            if rs or hold.item(g) > 0:
                l = math.nan     # a held period: the measurement is not used
            else:
                l = measure(g, count.item(g) + 1 >= every)
            s0, new_s, changed, sat, held = update(g, l, rs)
            after(g, t, l, s0, new_s, changed, sat, held)

    def _step_gpucolo_batch(self, idx: list[int], t: int) -> None:
        """The same step for many GPUs, the controller update vectorized."""
        ctl = self.ctl
        restarting = [t < self.trestart[g] for g in idx]
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
        s, m = self.ctl.sleep.item(g), self.ctl.mps.item(g)
        if not self.scheduled:
            return self._colo_latency(g, s, m)
        a, l = self._identify(g, s, m, mps_slope=outer_due)
        return l if a == s else self._colo_latency(g, s, m)

    def _after_step(self, g: int, t: int, l: float, s0: float, new_s: float, changed: bool,
                    sat: int, held: bool) -> None:
        """Act on one GPU's controller update: restart on an MPS change, park when the sleep
        move is below the actuator's resolution, mark the GPU's rates for recomputation."""
        ctl = self.ctl
        if changed:
            self.stats["mps_changes"] += 1
            self._restart_gpu(g, t)
            if not self.scheduled:
                self._identify(g)
            self.dirty.add(g)
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
            self.dirty.add(g)

    def _step_gslice(self, t: int) -> None:
        c = self.cfg.control
        for g in sorted(self.active):
            jobs = self.gjobs[g]
            if any(t < self.jrestart[j] for j in jobs):
                continue   # measured only when none of its jobs is restarting
            r = self._rates(g, t)
            want: dict[int, float] = {}
            lat: dict[int, float] = {}
            for j, rj in zip(jobs, r):
                l = 100.0 / rj if rj > 0 else 1e9
                lat[j] = l
                a = self.share[j]
                if l > self.slo_lat:
                    want[j] = self.d[j] if a <= 0 else min(1.0, a * min(l, 1e3) / self.setpoint)
                elif l < self.setpoint * (1 - c.gslice_slack):
                    want[j] = max(0.01, a * l / self.setpoint)
            self.stats["controller_updates"] += 1
            moved = False
            total = sum(self.share[j] for j in jobs)
            for j in [j for j in want if want[j] < self.share[j] - 1e-3]:
                total -= self.share[j] - want[j]
                self._set_share(j, want[j], t)
                moved = True
            for j in sorted((j for j in want if want[j] > self.share[j]), key=lambda j: -lat[j]):
                new = min(want[j], self.share[j] + max(0.0, 1.0 - total))
                if new > self.share[j] + 1e-3:
                    total += new - self.share[j]
                    self._set_share(j, new, t)
                    moved = True
            if moved:
                self.dirty.add(g)
            else:
                self.active.discard(g)

    def _set_share(self, j: int, a: float, t: int) -> None:
        self.share[j] = a
        r = self.cfg.plant.restart_s
        self.stats["restarts"] += 1
        if r > 0:
            self.jrestart[j] = t + r
            heapq.heappush(self.rheap, (t + r, self.gpu[j]))

    def colo_latency_check(self, g: int) -> tuple[float, float]:
        """(sum-form latency, generic-plant latency) of a co-located GPU, for tests."""
        from harness.cluster.policies import gpucolo_shares, rates

        s, m = float(self.ctl.sleep[g]), float(self.ctl.mps[g])
        p = self.cfg.plant
        u = gpucolo_shares(self.gk[g], self.gd[g], s, m, False, p.max_speedup,
                           p.train_iteration_s)
        r = rates(u, self.gd[g], self.gb[g], self.gs[g], self.speed[g], p.interference)
        worst = max(100.0 / rk for rk, k in zip(r, self.gk[g]) if k == INFERENCE)
        return self._colo_latency(g, s, m), worst

