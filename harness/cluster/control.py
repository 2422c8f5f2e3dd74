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

from .traces import INFERENCE


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
        c = int(self.ctl.count[g])
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
        n_inf = self.n_inf[g]
        now = n_inf > 0 and self.count[g] - n_inf > 0
        if now:
            if not self.colo[g]:
                self.ctl.reset(g)
                self.colo[g] = True
                self.wait_since[g] = -1
            if self.cfg.control.gain == "fixed":   # "scheduled" identifies before each step
                self._identify(g)
            self._activate(g, t)
        elif self.colo[g]:
            self.colo[g] = False
            if self.ctl.mps[g] < self.ctl.mhi and self.count[g] > n_inf:
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
        if x > self.smax:  # noqa: PLR1730 (hot path: faster than min)
            x = self.smax
        if x <= 0.0:
            return 1e9
        P = (0.0 if restarting else cs * self.BT[g]) + x * self.BI[g]
        gam = self.gamma
        worst = 0.0
        for si, bi in zip(self.isig[g], self.iB[g]):
            w = si * P - bi * x
            if w > worst:  # noqa: PLR1730 (hot path)
                worst = w
        return 100.0 * (1.0 + gam * worst) / (self.speed[g] * x)

    def _colo_rates(self, g: int, t: int) -> list[float]:
        sleep, mps = float(self.ctl.sleep[g]), float(self.ctl.mps[g])
        restarting = t < self.trestart[g]
        it = self.iter_s
        cs = it / (it + sleep) * mps / 100.0
        if restarting:
            cs_u = 0.0
        else:
            cs_u = cs
        x = (1.0 - cs_u * self.DT[g]) / self.DI[g]
        if x > self.smax:
            x = self.smax
        elif x < 0.0:
            x = 0.0
        P = cs_u * self.BT[g] + x * self.BI[g]
        f, gam = self.speed[g], self.gamma
        out = []
        for k, d, b, s in zip(self.gk[g], self.gd[g], self.gb[g], self.gs[g]):
            if k == INFERENCE:
                out.append(f * x / (1.0 + gam * s * (P - b * d * x)))
            else:
                out.append(f * cs_u / (1.0 + gam * s * (P - b * d * cs_u)))
        return out

    def _identify(self, g: int, s: float | None = None, l_s: float | None = None,
                  mps_slope: bool = True) -> None:
        """kp = detune / slope on the noise-free plant at the current MPS: the secant over the
        sleep range (``gain="fixed"``) or a 1 ms forward difference at the sleep ``s``
        (``"scheduled"``; ``l_s`` is the latency at ``s`` when already known)."""
        mps = float(self.ctl.mps[g])
        c = self.cfg.control
        l0 = None
        if c.gain == "fixed":
            a, b = 0.0, c.sleep_max_s
        else:
            s = float(self.ctl.sleep[g]) if s is None else s
            a = max(0.0, min(s, c.sleep_max_s - 1e-3))
            b = a + 1e-3
            if l_s is not None and a == s:
                l0 = l_s
        if l0 is None:
            l0 = self._colo_latency(g, a, mps)
        l1 = self._colo_latency(g, b, mps)
        m = min((l1 - l0) / (b - a), -0.01)
        self.ctl.kp[g] = c.detune / m
        if mps_slope:
            self._mps_slope(g, a, l0)

    def _mps_slope(self, g: int, s: float, l_s: float) -> None:
        """The outer loop's latency-vs-MPS slope at sleep ``s`` (latency there ``l_s``), over
        the 5 points of MPS below the current one."""
        mps = float(self.ctl.mps[g])
        lo_m = max(self.ctl.mlo, mps - 5.0)
        if lo_m < mps:
            lm = self._colo_latency(g, s, lo_m)
            self.ctl.mps_gain[g] = max((l_s - lm) / (mps - lo_m), 0.01)

    # ---- steps ------------------------------------------------------------------------------
    def _step_gpucolo(self, t: int) -> None:
        idx = sorted(self.active)
        if not idx:
            return
        ctl, c = self.ctl, self.cfg.control
        restarting = [t < self.trestart[g] for g in idx]
        lat = []
        sched = c.gain == "scheduled"
        every = ctl.every
        hold = ctl.hold
        for g, rs in zip(idx, restarting):
            if rs or hold[g] > 0:
                lat.append(math.nan)     # a held period: the measurement is not used
                continue
            s, m = float(ctl.sleep[g]), float(ctl.mps[g])
            l = self._colo_latency(g, s, m)
            lat.append(l)
            if sched:
                self._identify(g, s, l, mps_slope=ctl.count[g] + 1 >= every)
        s0, changed, sat, held = ctl.update(idx, lat, restarting)
        self.stats["controller_updates"] += len(idx)
        tol = c.sleep_tolerance_s
        for i, g in enumerate(idx):
            new_s = float(ctl.sleep[g])
            if changed[i]:
                self.stats["mps_changes"] += 1
                self._restart_gpu(g, t)
                if not sched:
                    self._identify(g)
            elif not held[i] and ctl.hold[g] == 0 and abs(new_s - s0[i]) < tol:
                # below the actuator's resolution: the move is not applied
                new_s = float(s0[i])
                ctl.sleep[g] = new_s
                m = float(ctl.mps[g])
                if sched:
                    self._mps_slope(g, float(s0[i]), lat[i])
                will_act = ctl.outer_target_one(ctl.slo - lat[i], int(sat[i]), m,
                                                float(ctl.mps_gain[g])) != m
                self._park(g, t, will_act)
            if new_s != s0[i] or changed[i]:
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
        from .policies import gpucolo_shares, rates

        s, m = float(self.ctl.sleep[g]), float(self.ctl.mps[g])
        p = self.cfg.plant
        u = gpucolo_shares(self.gk[g], self.gd[g], s, m, False, p.max_speedup,
                           p.train_iteration_s)
        r = rates(u, self.gd[g], self.gb[g], self.gs[g], self.speed[g], p.interference)
        worst = max(100.0 / rk for rk, k in zip(r, self.gk[g]) if k == INFERENCE)
        return self._colo_latency(g, s, m), worst

