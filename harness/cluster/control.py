"""Per-GPU controllers inside the cluster engine: GPUColo's two-tier loop and GSLICE.

Controllers are explicit objects: each policy's controller holds the engine's
:class:`~harness.cluster.state.ClusterState` and is called by the engine at the points listed in
:class:`SlotController` (no controller: :class:`SlotController` itself; GPUColo:
:class:`GpuColoController`; GSLICE: :class:`GsliceController`; :func:`make_controller` picks).

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

from gpucontrol.design import PDesign, design_p
from gpucontrol.models import LinearLatencyModel
from gpucontrol.stability import stable_gain_range
from harness.cluster.config import SimConfig
from harness.cluster.policies import (
    ControlParams,
    fixed_shares,
    rates,
)
from harness.cluster.state import EPS_WORK, ClusterState, advance_jobs
from harness.cluster.traces import INFERENCE

__all__ = ["EPS_WORK", "GsliceController", "SlotController", "inner_design"]


def inner_design(c: ControlParams) -> tuple[PDesign, tuple[float, float], float]:
    """The inner loop's P design and the core's checks on it, for the cluster's controllers.

    The design is :func:`gpucontrol.design_p` on a unit nominal gain: the engine re-scales its
    ``kp`` by each GPU's identified slope ``m`` (``kp = detune / m``, the gain scheduling of
    ``TwoTierController``). The loops must be decoupled as ``TwoTierController`` requires:
    the inner loop settles within one outer period.

    Parameters
    ----------
    c : ControlParams
        The controller settings (``detune``, ``inner_period_s``, ``outer_every``).

    Returns
    -------
    design : PDesign
        The P design at nominal gain -1.
    gain_range : tuple of float
        :func:`gpucontrol.stability.stable_gain_range`: the real/nominal slope ratios that
        keep the inner loop stable.
    settling : float
        Inner settling time in periods (:meth:`gpucontrol.design.Design.settling_periods`).

    Raises
    ------
    ValueError
        When the inner loop does not settle within one outer period.

    Examples
    --------
    >>> d, rng, n = inner_design(ControlParams(detune=0.9))
    >>> d.kp * d.model.gain, rng[1] > 2.0, n < 25
    (0.9, True, True)
    """
    design = design_p(LinearLatencyModel(-1.0, 100.0), c.detune, float(c.inner_period_s))
    settling = design.settling_periods()
    if not settling < c.outer_every:
        raise ValueError(
            f"outer_every must exceed the inner loop's settling time ({settling:g} periods at "
            f"detune={c.detune:g}), got {c.outer_every!r}")
    return design, stable_gain_range(design), settling


class SlotController:
    """Fixed shares, no controller (No Co-location, Separate, Simple, Conservative); the base
    of the policies' controllers. The engine calls, on its :class:`ClusterState`:
    :meth:`slot_added` after a new slot, :meth:`job_added` after a job joins a GPU,
    :meth:`jobs_changed` after a GPU's jobs change, :meth:`slot_freed` when a GPU empties,
    :meth:`restart_ended` at a restart's end, :meth:`advance` / :meth:`rates` to recompute
    rates, :meth:`step` every ``period`` ticks while ``state.active`` is not empty.

    Parameters
    ----------
    state : ClusterState
        The engine's state (shared, changed in place).
    """

    #: control period in ticks (0: never stepped)
    period = 0

    def __init__(self, state: ClusterState) -> None:
        self.s = state
        cfg: SimConfig = state.cfg
        self.slo_lat = cfg.slo_latency
        self.setpoint = self.slo_lat * (1.0 - cfg.control.setpoint_margin)

    # ---- engine hooks -----------------------------------------------------------------------
    def slot_added(self, n_slots: int) -> None:
        """The engine now has ``n_slots`` slots.

        Parameters
        ----------
        n_slots : int
            Number of slots.
        """

    def job_added(self, j: int, g: int) -> None:
        """Job ``j`` joined slot ``g``.

        Parameters
        ----------
        j : int
            The job.
        g : int
            Its GPU slot.
        """

    def jobs_changed(self, g: int, t: int) -> None:
        """Slot ``g``'s jobs changed at tick ``t`` (it is still on).

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.
        """

    def slot_freed(self, g: int) -> None:
        """Slot ``g`` lost its last job: stop its controller.

        Parameters
        ----------
        g : int
            The GPU slot.
        """
        self.forget(g)

    def restart_ended(self, g: int, t: int) -> None:
        """A restart on slot ``g`` (still on) ended at tick ``t``.

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.
        """

    def step(self, t: int) -> None:
        """One control period at tick ``t`` for the GPUs in ``state.active``.

        Parameters
        ----------
        t : int
            The tick.
        """

    # ---- activation -------------------------------------------------------------------------
    def activate(self, g: int, t: int) -> None:
        """Resume stepping a GPU's controller.

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
        s.wait_since[g] = -1
        s.wtoken[g] += 1
        s.active.add(g)

    def forget(self, g: int) -> None:
        """Stop stepping slot ``g`` and cancel its pending wake-up.

        Parameters
        ----------
        g : int
            The GPU slot.
        """
        s = self.s
        s.active.discard(g)
        s.wait_since[g] = -1
        s.wtoken[g] += 1

    # ---- rates ------------------------------------------------------------------------------
    def shares(self, g: int, t: int) -> list[float]:
        """Used share of each job on slot ``g`` at tick ``t``.

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
        s, pol = self.s, self.s.policy
        return fixed_shares(s.gk[g], s.gd[g], pol.weights, s.smax,
                            pol.exclusive or pol.exclusive_training)

    def rates(self, g: int, t: int) -> list[float]:
        """Progress rate of each job on slot ``g`` at tick ``t``.

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
        return rates(self.shares(g, t), s.gd[g], s.gb[g], s.gs[g], s.speed[g], s.gamma)

    def advance(self, g: int, t: int) -> int:
        """New rates for slot ``g``'s jobs from tick ``t`` (:func:`advance_jobs`).

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
        return advance_jobs(self.s, self.s.gjobs[g], self.rates(g, t), t)


class GsliceController(SlotController):
    """GSLICE's per-job share controller on inference GPUs (see the module docstring).

    Parameters
    ----------
    state : ClusterState
        The engine's state (shared, changed in place).
    """

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        self.params = state.cfg.control
        self.period = self.params.gslice_period_s

    def job_added(self, j: int, g: int) -> None:
        """An inference job gets what its GPU has left of its demand.

        Parameters
        ----------
        j : int
            The job.
        g : int
            Its GPU slot.
        """
        s = self.s
        if s.kindj[j] == INFERENCE:
            used = sum(s.share[i] for i in s.gjobs[g] if i != j)
            s.share[j] = min(s.d[j], max(0.0, 1.0 - used))

    def jobs_changed(self, g: int, t: int) -> None:
        """Step a GPU that hosts inference jobs again.

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.
        """
        if self.s.n_inf[g] > 0:
            self.activate(g, t)

    def restart_ended(self, g: int, t: int) -> None:
        """Measure the GPU again.

        Parameters
        ----------
        g : int
            The GPU slot.
        t : int
            The tick.
        """
        self.activate(g, t)

    def shares(self, g: int, t: int) -> list[float]:
        """Inference GPUs: each job's share (0 while it restarts); others: fixed shares.

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
        if s.pool[g] != INFERENCE:
            return super().shares(g, t)
        jrestart, share, smax, d = s.jrestart, s.share, s.smax, s.d
        return [0.0 if t < jrestart[j] else min(share[j], smax * d[j]) for j in s.gjobs[g]]

    def step(self, t: int) -> None:
        """Rescale the shares of the active GPUs' inference jobs.

        Parameters
        ----------
        t : int
            The tick.
        """
        s = self.s
        for g in sorted(s.active):
            jobs = s.gjobs[g]
            if any(t < s.jrestart[j] for j in jobs):
                continue   # measured only when none of its jobs is restarting
            want, lat = self._wanted(jobs, self.rates(g, t))
            s.stats["controller_updates"] += 1
            if self._apply(jobs, want, lat, t):
                s.dirty.add(g)
            else:
                s.active.discard(g)

    def _wanted(self, jobs: list[int], r: list[float]
                ) -> tuple[dict[int, float], dict[int, float]]:
        """The share each job above its SLO or well below target asks for, and latencies."""
        s, slack = self.s, self.params.gslice_slack
        want: dict[int, float] = {}
        lat: dict[int, float] = {}
        for j, rj in zip(jobs, r):
            l = 100.0 / rj if rj > 0 else 1e9
            lat[j] = l
            a = s.share[j]
            if l > self.slo_lat:
                want[j] = s.d[j] if a <= 0 else min(1.0, a * min(l, 1e3) / self.setpoint)
            elif l < self.setpoint * (1 - slack):
                want[j] = max(0.01, a * l / self.setpoint)
        return want, lat

    def _apply(self, jobs: list[int], want: dict[int, float], lat: dict[int, float],
               t: int) -> bool:
        """Decreases first, then increases most-violating first within the free share."""
        share = self.s.share
        moved = False
        total = sum(share[j] for j in jobs)
        for j in [j for j in want if want[j] < share[j] - 1e-3]:
            total -= share[j] - want[j]
            self._set_share(j, want[j], t)
            moved = True
        for j in sorted((j for j in want if want[j] > share[j]), key=lambda j: -lat[j]):
            new = min(want[j], share[j] + max(0.0, 1.0 - total))
            if new > share[j] + 1e-3:
                total += new - share[j]
                self._set_share(j, new, t)
                moved = True
        return moved

    def _set_share(self, j: int, a: float, t: int) -> None:
        s = self.s
        s.share[j] = a
        r = s.cfg.plant.restart_s
        s.stats["restarts"] += 1
        if r > 0:
            s.jrestart[j] = t + r
            heapq.heappush(s.rheap, (t + r, s.gpu[j]))

