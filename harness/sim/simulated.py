"""A simulated GPU running one inference service and one training job side by side.

The plant is an event simulation of two processes sharing one GPU, calibrated to the GPUColo paper
(GPUColo, RTX 3090, ResNet-50 inference). It has no linear formula inside; the latency-vs-
sleep curve that the controllers see comes out of the following physics (parameters and
their sources: docs/simulated_plant.md).

* **Inference alone** with an MPS share ``c_i`` takes ``t_x(b) + t_c(b) / eff(c_i, b)`` per
  batch of ``b`` images: a PCIe transfer linear in ``b`` plus compute linear in ``b``
  (InSS, Sec. 4.1), slowed by a smaller SM share with diminishing returns
  ``eff(c) = (1 - exp(-c / c_sat)) / (1 - exp(-1 / c_sat))``; bigger batches need more SMs
  to saturate, ``c_sat = k_sat * sqrt(b)``.
* **Sharing the GPU** (:mod:`harness.sim.physics`, which states the laws): under MPS the two
  run concurrently and contend for SMs — the training holds ``a = c**g / (c**g + w c_i**g)``
  of them (``c``: its MPS cap or green-context partition; never above ``c``), the inference
  computes on ``min(c_i, 1 - a)`` with memory/L2 interference ``(1 + alpha(b) a)`` (the
  multiplicative form of InSS, Sec. 4.1); without MPS the GPU time-slices, the inference
  getting a fraction ``q_i`` of the time whatever the training's partition. Four backends
  (:data:`BACKENDS`): ``mps-restart``, ``sleep`` (time-sliced, the share unused),
  ``green-context`` (time-sliced, partitions confine the training only) and
  ``green-context+mps``.
* **Training** does ``W`` seconds of full-GPU work per iteration (log-normal jitter), so one
  iteration takes ``W / rate``; after each iteration it sleeps ``s`` seconds. Its duty cycle is
  ``t_iter / (t_iter + s)`` — hyperbolic in ``s``, and weaker the slower the iteration (low MPS).
* **Latency** is measured per batch; batches run back to back (closed loop), each taking its
  log-normal work at the current speed. The period mean is therefore the count-weighted
  (harmonic) mix ``1 / (d / l_busy + (1 - d) / l_idle)`` plus noise — and phase aliasing
  between training iterations and the 4 s control period, as on a real GPU.
* **Resizing.** With an MPS cap, a change of the training share restarts the training process
  ``resize_delay_s`` after the command (0; a shadow process pre-started at the new share, as
  the GPU harness does, takes ~2 s on an H100): it holds no SMs and makes no progress for
  ``restart_s`` (default 7 s; the GPUColo paper measured 5–15 s; 0 with the shadow),
  losing its partial iteration; inference keeps running. A green-context partition changes
  without a restart: the training takes the new partition at its next iteration. A change of
  the inference MPS (only GSLICE-extended does this) restarts the inference process: no
  batches complete for ``inference_restart_s``.
* Optional one-period measurement delay; all randomness from one seeded generator.

Noise-free views of the same physics (``expected_latency_ms``, ``local_gain``,
``expected_training_throughput`` ...) let identification and the Oracle be checked against the
truth.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, fields, replace
from typing import Any

import numpy as np

from harness.checks import integer, number, numbers_in
from harness.sim.physics import BACKENDS, ColocationParams, backend_overrides
from harness.sim.presets import (
    CALIBRATION_KIND,
    PRESETS,
    SUGGESTED_SLO_MS,
    base_preset_name,
    preset_overrides,
    suggested_slo_ms,
)
from harness.sim.protocol import PeriodResult, actuation_knobs, free_resize_of

__all__ = ["BACKENDS", "CALIBRATION_KIND", "PRESETS", "SUGGESTED_SLO_MS", "ColocationParams",
           "SimulatedColocation", "backend_overrides", "base_preset_name", "preset_overrides",
           "suggested_slo_ms"]

ArrayLike = Any


class SimulatedColocation:
    """The simulated co-located GPU; implements :class:`harness.sim.protocol.Plant`.

    Parameters
    ----------
    params : ColocationParams, optional
        Default: the Fig 8/9 preset.
    seed : int
        Seed of the random generator (noise, iteration jitter).
    **overrides : Any
        Field overrides of ``params``.

    Examples
    --------
    >>> plant = SimulatedColocation.preset("fig4", seed=0)
    >>> round(float(plant.expected_latency_ms(0.0, 80.0)), 1)   # GPUColo paper, Fig. 4: 15.1 ms
    15.1
    >>> from gpucontrol import Actuation
    >>> r = plant.step(Actuation(sleep_s=0.0, mps_pct=80.0), 4.0)
    >>> r.count > 200 and abs(r.mean_ms - 15.1) < 1.0
    True
    """

    #: Load fields that :meth:`set_load` may change during a run.
    LOAD_FIELDS = ("batch", "train_work_s", "noise_sigma")

    def __init__(self, params: ColocationParams | None = None, *, seed: int = 0,
                 **overrides: Any) -> None:
        p = params if params is not None else ColocationParams()
        if overrides:
            unknown = set(overrides) - {f.name for f in fields(ColocationParams)}
            if unknown:
                raise ValueError(f"unknown plant parameter(s): {', '.join(sorted(unknown))}")
            p = replace(p, **overrides)
        self.params = p
        self.seed = integer("seed", seed, 0)
        ss = np.random.SeedSequence(self.seed)
        s_inf, s_train = ss.spawn(2)
        self._rng_inf = np.random.default_rng(s_inf)
        self._rng_train = np.random.default_rng(s_train)
        self._buf = np.empty(0)
        self._bi = 0
        self.t = 0.0
        # knobs commanded (None until the first actuation: processes start with it); the
        # share in force (_share) follows a command after a delay or at an iteration start
        self.sleep_s: float | None = None
        self.mps_pct: float | None = None
        self._share = 100.0
        self._share_cmd: float | None = None   # a share waiting to take effect
        self._share_wait = math.inf             # seconds until it does (inf: next iteration)
        self.inference_mps_pct: float = p.inference_mps_pct
        # training process state
        self._phase = "active"          # "active" | "sleep" | "restart"
        self._phase_left = 0.0          # active: work (full-GPU s) left; else seconds left
        self._iter_work = p.train_work_s
        # inference process state
        self._inf_restart_left = 0.0
        self._brem = self._eps(1)[0]    # remaining work of the current batch (batch units)
        self._belapsed = 0.0            # seconds the current batch has run
        self._pending: tuple[float, float, int] | None = None
        self._phase_left = self._iter_work = self._new_iteration_work()

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str | os.PathLike[str] = "fig8", *, seed: int = 0,
               backend: str | None = None, **overrides: Any) -> SimulatedColocation:
        """A plant with a named preset (``"fig4"``, ``"fig8"`` or ``"h100"``), or the path of a
        calibration file written by ``gpucontrol calibrate`` (its base preset with the fitted
        constants), and optional overrides; ``backend`` (one of :data:`BACKENDS`) picks the
        spatial-share backend (``mps_enabled`` and ``share_backend``)."""
        if backend is not None:
            overrides = {**backend_overrides(backend), **overrides}
        return cls(replace(ColocationParams(), **preset_overrides(name)), seed=seed,
                   **overrides)

    def describe(self) -> dict[str, Any]:
        """All parameters as a plain dict (for result files)."""
        return {"seed": self.seed, **asdict(self.params)}

    # ---- noise-free views ------------------------------------------------------------------------
    def _args(self, mps_pct, batch, inference_mps_pct):
        """The checked operating point of a noise-free view (defaults: the plant's own)."""
        b = self.params.batch if batch is None else integer("batch", batch, 1, 4096)
        ci = (self.inference_mps_pct if inference_mps_pct is None else
              number("inference_mps_pct", inference_mps_pct, 1.0, 100.0))
        return numbers_in("mps_pct", mps_pct, 1.0, 100.0), b, ci

    def expected_iteration_s(self, mps_pct: ArrayLike, batch: int | None = None,
                             inference_mps_pct: float | None = None) -> np.ndarray:
        """Mean training iteration time (s) while co-located."""
        m, b, ci = self._args(mps_pct, batch, inference_mps_pct)
        return self.params.train_work_s / self.params.train_rate(m, ci, batch=b)

    def expected_duty(self, sleep_s: ArrayLike, mps_pct: ArrayLike, batch: int | None = None,
                      inference_mps_pct: float | None = None) -> np.ndarray:
        t = self.expected_iteration_s(mps_pct, batch, inference_mps_pct)
        return t / (t + numbers_in("sleep_s", sleep_s, 0.0, None))

    def expected_latency_ms(self, sleep_s: ArrayLike, mps_pct: ArrayLike,
                            batch: int | None = None,
                            inference_mps_pct: float | None = None) -> np.ndarray | float:
        """Noise-free mean per-batch latency (ms) at a static operating point.

        ``batch`` and ``inference_mps_pct`` default to the plant's current load and setting.
        Vectorised over ``sleep_s`` and ``mps_pct`` (numpy broadcasting).
        """
        m, b, ci = self._args(mps_pct, batch, inference_mps_pct)
        p = self.params
        d = self.expected_duty(sleep_s, m, b, ci)
        lb = p.busy_latency_ms(b, m, ci)
        li = p.idle_latency_ms(b, ci)
        out = 1.0 / (d / lb + (1.0 - d) / li)
        return float(out) if np.ndim(out) == 0 else out

    def local_gain(self, sleep_s: ArrayLike, mps_pct: ArrayLike, batch: int | None = None,
                   inference_mps_pct: float | None = None) -> np.ndarray | float:
        """d latency / d sleep (ms per s) of the noise-free plant at an operating point (< 0)."""
        m, b, ci = self._args(mps_pct, batch, inference_mps_pct)
        p = self.params
        t = self.expected_iteration_s(m, b, ci)
        s = numbers_in("sleep_s", sleep_s, 0.0, None)
        d = t / (t + s)
        lb = p.busy_latency_ms(b, m, ci)
        li = p.idle_latency_ms(b, ci)
        inv = d / lb + (1.0 - d) / li
        dd_ds = -t / (t + s) ** 2
        out = -(1.0 / inv ** 2) * (1.0 / lb - 1.0 / li) * dd_ds
        return float(out) if np.ndim(out) == 0 else out

    def expected_training_throughput(self, sleep_s: ArrayLike, mps_pct: ArrayLike,
                                     batch: int | None = None,
                                     inference_mps_pct: float | None = None
                                     ) -> np.ndarray | float:
        """Training iterations per second at a static operating point (no restarts)."""
        t = self.expected_iteration_s(mps_pct, batch, inference_mps_pct)
        out = 1.0 / (t + numbers_in("sleep_s", sleep_s, 0.0, None))
        return float(out) if np.ndim(out) == 0 else out

    def expected_inference_throughput(self, sleep_s: ArrayLike, mps_pct: ArrayLike,
                                      batch: int | None = None,
                                      inference_mps_pct: float | None = None
                                      ) -> np.ndarray | float:
        """Images per second at a static operating point."""
        b = self.params.batch if batch is None else batch
        out = 1000.0 * b / np.asarray(
            self.expected_latency_ms(sleep_s, mps_pct, b, inference_mps_pct))
        return float(out) if np.ndim(out) == 0 else out

    def expected_sm_share(self, sleep_s: ArrayLike, mps_pct: ArrayLike,
                          batch: int | None = None, inference_mps_pct: float | None = None
                          ) -> np.ndarray | float:
        """Time-averaged SM fraction held by the training at a static operating point."""
        m, b, ci = self._args(mps_pct, batch, inference_mps_pct)
        out = self.params.train_sm_reading(m, ci) * self.expected_duty(sleep_s, m, b, ci)
        return float(out) if np.ndim(out) == 0 else out

    # ---- Plant protocol --------------------------------------------------------------------------
    def set_load(self, **changes: Any) -> None:
        """Change ``batch`` (or ``train_work_s``, ``noise_sigma``) from now on."""
        bad = set(changes) - set(self.LOAD_FIELDS)
        if bad:
            raise ValueError(f"set_load accepts {', '.join(self.LOAD_FIELDS)}; "
                             f"got {', '.join(sorted(bad))}")
        self.params = replace(self.params, **changes)

    def step(self, actuation: Any, period_s: float) -> PeriodResult:
        """Apply the actuation, simulate ``period_s`` seconds, report the period.

        The actuation is checked (:func:`~harness.sim.protocol.actuation_knobs`): a sleep
        that is not a finite number >= 0 s, or an MPS share outside [1, 100] %, raises
        ``ValueError`` (``TypeError`` for one that is not a number) before anything moves.
        """
        T = number("period_s", period_s, 0.0, None, lo_open=True)
        self._apply(actuation)
        p = self.params
        t_end = self.t + T
        lats: list[np.ndarray] = []
        iters = 0.0
        train_time = 0.0
        sm_time = 0.0
        restarting = self._resizing()
        inf_restarting = self._inf_restart_left > 0
        while self.t < t_end - 1e-12:
            inf_on = self._inf_restart_left <= 0
            train_on = self._phase == "active"
            dt = t_end - self.t
            if not inf_on:
                dt = min(dt, self._inf_restart_left)
            if train_on:
                rate = float(p.train_rate(self._share, self.inference_mps_pct, inf_on))
                dt = min(dt, self._phase_left / rate)
            else:
                rate = 0.0
                dt = min(dt, self._phase_left)
            dt = max(min(dt, self._share_wait), 0.0)
            if inf_on:
                lat_ms = float(p.busy_latency_ms(p.batch, self._share, self.inference_mps_pct)
                               if train_on else p.idle_latency_ms(p.batch, self.inference_mps_pct))
                self._advance_inference(dt, lat_ms / 1000.0, lats)
            else:
                self._inf_restart_left -= dt
            if train_on:
                done = rate * dt
                self._phase_left -= done
                iters += done / self._iter_work
                train_time += dt
                sm_time += dt * float(p.train_sm_reading(self._share, self.inference_mps_pct,
                                                         inf_on))
            else:
                self._phase_left -= dt
            self.t += dt
            self._wait_share(dt)
            if self._phase_left <= 1e-12:
                self._next_phase()
            restarting = restarting or self._resizing()
            inf_restarting = inf_restarting or self._inf_restart_left > 0
        self.t = t_end
        all_lats = np.concatenate(lats) * 1000.0 if lats else np.empty(0)
        n = int(all_lats.size)
        stats = (float(all_lats.mean()) if n else math.nan,
                 float(np.percentile(all_lats, 99)) if n else math.nan, n)
        if p.measurement_delay:
            shown, self._pending = self._pending or (math.nan, math.nan, 0), stats
        else:
            shown = stats
        return PeriodResult(
            mean_ms=shown[0], p99_ms=shown[1], count=shown[2], t_end_s=self.t, period_s=T,
            inference_batches=n, inference_images=n * int(p.batch),
            training_iterations=iters, training_sm_share=sm_time / T,
            # what a node's iteration hook measures: compute time per iteration, sleep and
            # restart excluded (NaN when the period holds no measurable iteration)
            iteration_s=train_time / iters if iters > 0.05 and not restarting else math.nan,
            restarting=restarting, inference_restarting=inf_restarting,
            sleep_s=float(self.sleep_s or 0.0), mps_pct=float(self.mps_pct or 100.0),
            inference_mps_pct=float(self.inference_mps_pct), batch=int(p.batch),
            samples_ms=tuple(all_lats.tolist()) if p.keep_samples else ())

    # ---- internals -------------------------------------------------------------------------------
    def _apply(self, act: Any) -> None:
        s, m, ci = actuation_knobs(act)
        self.sleep_s = s
        free = free_resize_of(act)
        first = self.mps_pct is None      # the processes start with the first actuation
        if first:
            self.mps_pct = self._share = m
        elif m != self.mps_pct:
            self.mps_pct = m
            self._command_share(m, free)
        if ci is not None and self.params.mps_enabled and ci != self.inference_mps_pct:
            self.inference_mps_pct = ci
            if not (free or first):
                self._restart_inference()

    def _command_share(self, m: float, free: bool) -> None:
        """A new training share: at once (a free resize, or an MPS cap without MPS: nothing to
        enforce), at the next iteration (a green-context partition), or by a restart of the
        training ``resize_delay_s`` from now (an MPS cap)."""
        p = self.params
        self._share_cmd, self._share_wait = None, math.inf
        if free or (p.share_backend == "mps" and not p.mps_enabled):
            self._share = m
        elif p.share_backend == "green-context":
            self._share_cmd = m
        elif p.resize_delay_s > 0:
            self._share_cmd, self._share_wait = m, p.resize_delay_s
        else:
            self._share = m
            self._restart_training()

    def _wait_share(self, dt: float) -> None:
        """Count down a delayed MPS resize; at zero the training restarts at the new share."""
        if self._share_cmd is None or math.isinf(self._share_wait):
            return
        self._share_wait -= dt
        if self._share_wait <= 1e-12:
            self._share, self._share_cmd, self._share_wait = self._share_cmd, None, math.inf
            self._restart_training()

    def _resizing(self) -> bool:
        """The training is down for a restart, or an MPS resize is on its way."""
        return self._phase == "restart" or math.isfinite(self._share_wait)

    def _restart_training(self) -> None:
        # the partial iteration is lost; the process is down for restart_s
        self._phase = "restart"
        self._phase_left = self.params.restart_s
        if self._phase_left <= 0:
            self._next_phase()

    def _restart_inference(self) -> None:
        self._inf_restart_left = self.params.inference_restart_s
        self._brem = self._eps(1)[0]    # the batch in flight is lost
        self._belapsed = 0.0

    def _new_iteration_work(self) -> float:
        j = self.params.iteration_jitter
        f = self._rng_train.lognormal(-0.5 * j * j, j) if j > 0 else 1.0
        return self.params.train_work_s * float(f)

    def _next_phase(self) -> None:
        if self._phase == "active" and self.sleep_s and self.sleep_s > 0:
            self._phase, self._phase_left = "sleep", float(self.sleep_s)
            return
        if self._share_cmd is not None and math.isinf(self._share_wait):
            self._share, self._share_cmd = self._share_cmd, None   # the next partition
        self._phase = "active"
        self._iter_work = self._phase_left = self._new_iteration_work()

    def _eps(self, n: int) -> np.ndarray:
        """The next ``n`` per-batch work factors (log-normal, mean 1)."""
        if self._bi + n > self._buf.size:
            sig = self.params.noise_sigma
            fresh = (self._rng_inf.lognormal(-0.5 * sig * sig, sig, size=max(4096, n))
                     if sig > 0 else np.ones(max(4096, n)))
            self._buf = np.concatenate([self._buf[self._bi:], fresh])
            self._bi = 0
        out = self._buf[self._bi:self._bi + n]
        self._bi += n
        return out

    def _advance_inference(self, dt: float, lat_s: float, out: list[np.ndarray]) -> None:
        """Run back-to-back batches for ``dt`` seconds at ``lat_s`` seconds per unit work."""
        if dt <= 0:
            return
        work = dt / lat_s
        if work < self._brem:
            self._brem -= work
            self._belapsed += dt
            return
        first = self._belapsed + self._brem * lat_s
        work -= self._brem
        done = [np.array([first])]
        while True:
            n = int(work) + 8
            eps = self._eps(n)
            cum = np.cumsum(eps)
            k = int(np.searchsorted(cum, work, side="right"))
            if k < n:
                if k:
                    done.append(eps[:k] * lat_s)
                used = cum[k - 1] if k else 0.0
                self._brem = float(eps[k] - (work - used))
                self._belapsed = (work - used) * lat_s
                self._bi -= n - k - 1          # give back the unused draws
                break
            done.append(eps * lat_s)
            work -= float(cum[-1])
        out.append(np.concatenate(done))


def make_simulated_plant(preset: str = "fig8", *, seed: int = 0, backend: str | None = None,
                         **overrides: Any) -> SimulatedColocation:
    """The ``sim`` entry of the plant registry (:mod:`harness.experiments.plants`)."""
    return SimulatedColocation.preset(preset, seed=seed, backend=backend, **overrides)
