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
* **Contention under MPS.** While the training process computes, it holds an SM share
  ``a = c_t**g / (c_t**g + w c_i**g)`` (``c_t``: its MPS cap; a relative-share model: the
  inference's continuous kernel stream wins contested SMs, ``w > 1``), never above its cap.
  The inference then computes on ``min(c_i, 1 - a)`` of the SMs and suffers memory/L2
  interference ``(1 + alpha(b) a)`` (the multiplicative form of InSS, Sec. 4.1), with
  ``alpha(b) = k_int / sqrt(b)``: the fixed per-kernel waiting weighs less on long batches.
* **Time slicing** (``mps_enabled=False``, the Fig 4 "Sleep" run): while training runs the
  inference gets a fraction ``q_i`` of the GPU time.
* **Training** does ``W`` seconds of full-GPU work per iteration (log-normal jitter), so one
  iteration takes ``W / a``; after each iteration it sleeps ``s`` seconds. Its duty cycle is
  ``t_iter / (t_iter + s)`` — hyperbolic in ``s``, and weaker the slower the iteration (low MPS).
* **Latency** is measured per batch; batches run back to back (closed loop), each taking its
  log-normal work at the current speed. The period mean is therefore the count-weighted
  (harmonic) mix ``1 / (d / l_busy + (1 - d) / l_idle)`` plus noise — and phase aliasing
  between training iterations and the 4 s control period, as on a real GPU.
* **Resizing.** A change of the training MPS restarts the training process (``restart_s``,
  default 7 s; the GPUColo paper measured 5–15 s): it holds no SMs and makes no progress meanwhile,
  losing its partial iteration; inference keeps running. A change of the inference MPS (only
  GSLICE-extended does this) restarts the inference process: no batches complete for
  ``inference_restart_s``.
* Optional one-period measurement delay; all randomness from one seeded generator.

Noise-free views of the same physics (``expected_latency_ms``, ``local_gain``,
``expected_training_throughput`` ...) let identification and the Oracle be checked against the
truth.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.sim.checks import integer, number, numbers_in
from harness.sim.protocol import PeriodResult, actuation_knobs, free_resize_of

__all__ = ["CALIBRATION_KIND", "PRESETS", "ColocationParams", "SimulatedColocation",
           "base_preset_name", "preset_overrides"]

ArrayLike = Any


@dataclass(frozen=True)
class ColocationParams:
    """Every parameter of :class:`SimulatedColocation` (values and sources:
    docs/simulated_plant.md). Defaults are the Fig 8/9 preset (ResNet-50 batch 105 with a
    Wide ResNet-101 training job on an RTX 3090)."""

    # inference workload -------------------------------------------------------------------
    batch: int = 105
    inference_mps_pct: float = 100.0
    transfer_ms_fixed: float = 0.3
    transfer_ms_per_image: float = 0.05
    compute_ms_fixed: float = 1.6
    compute_ms_per_image: float = 0.62
    noise_sigma: float = 0.02
    # GPU sharing (fitted to the GPUColo paper, Fig. 4) ----------------------------------------
    mps_enabled: bool = True
    saturation_per_sqrt_image: float = 0.0905
    interference_sqrt_image: float = 11.5
    inference_weight: float = 1.62
    contention_exponent: float = 2.88
    timeslice_inference_share: float = 0.64
    timeslice_train_occupancy: float = 0.645
    # training workload ----------------------------------------------------------------------
    train_work_s: float = 0.2
    iteration_jitter: float = 0.05
    # overheads and measurement ------------------------------------------------------------------
    restart_s: float = 7.0
    inference_restart_s: float = 7.0
    measurement_delay: int = 0
    keep_samples: bool = False

    def __post_init__(self) -> None:
        def num(name: str, lo: float, hi: float, *, lo_open: bool = False) -> None:
            v = getattr(self, name)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            ok = ok and (v > lo if lo_open else v >= lo) and v <= hi
            if not ok:
                rng = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
                raise ValueError(f"{name} must be a number in {rng}, got {v!r}")

        if not (isinstance(self.batch, (int, np.integer)) and 1 <= self.batch <= 4096):
            raise ValueError(f"batch must be an integer in [1, 4096], got {self.batch!r}")
        num("inference_mps_pct", 1.0, 100.0)
        for n in ("transfer_ms_fixed", "transfer_ms_per_image", "compute_ms_fixed"):
            num(n, 0.0, 1e4)
        num("compute_ms_per_image", 0.0, 1e4, lo_open=True)
        num("noise_sigma", 0.0, 1.0)
        num("saturation_per_sqrt_image", 0.0, 10.0, lo_open=True)
        num("interference_sqrt_image", 0.0, 1e3)
        num("inference_weight", 0.0, 1e3, lo_open=True)
        num("contention_exponent", 0.1, 10.0)
        num("timeslice_inference_share", 0.0, 1.0, lo_open=True)
        num("timeslice_train_occupancy", 0.0, 1.0)
        num("train_work_s", 0.0, 1e3, lo_open=True)
        num("iteration_jitter", 0.0, 1.0)
        num("restart_s", 0.0, 600.0)
        num("inference_restart_s", 0.0, 600.0)
        if self.measurement_delay not in (0, 1):
            raise ValueError(f"measurement_delay must be 0 or 1 periods, got "
                             f"{self.measurement_delay!r}")
        if self.timeslice_inference_share >= 1.0:
            raise ValueError("timeslice_inference_share must be < 1 (training needs some time)")

    # ---- the physics, vectorised ---------------------------------------------------------------
    def saturation(self, batch: ArrayLike) -> np.ndarray:
        """SM fraction scale at which the inference's speed saturates, ``k_sat sqrt(b)``."""
        return self.saturation_per_sqrt_image * np.sqrt(np.asarray(batch, dtype=float))

    def efficiency(self, share: ArrayLike, batch: ArrayLike) -> np.ndarray:
        """Inference speed with an SM share, relative to the whole GPU (1 at share 1)."""
        cs = self.saturation(batch)
        c = np.clip(np.asarray(share, dtype=float), 1e-6, 1.0)
        return (1.0 - np.exp(-c / cs)) / (1.0 - np.exp(-1.0 / cs))

    def interference(self, batch: ArrayLike) -> np.ndarray:
        """Memory/L2 interference coefficient ``alpha(b) = k_int / sqrt(b)``."""
        return self.interference_sqrt_image / np.sqrt(np.asarray(batch, dtype=float))

    def transfer_ms(self, batch: ArrayLike) -> np.ndarray:
        return self.transfer_ms_fixed + self.transfer_ms_per_image * np.asarray(batch, float)

    def compute_ms(self, batch: ArrayLike) -> np.ndarray:
        return self.compute_ms_fixed + self.compute_ms_per_image * np.asarray(batch, float)

    def train_share(self, mps_pct: ArrayLike, inference_mps_pct: ArrayLike,
                    inference_running: bool = True) -> np.ndarray:
        """SM share the training holds while it computes (MPS mode)."""
        ct = np.clip(np.asarray(mps_pct, dtype=float) / 100.0, 0.01, 1.0)
        if not inference_running:
            return ct
        ci = np.clip(np.asarray(inference_mps_pct, dtype=float) / 100.0, 0.01, 1.0)
        g = self.contention_exponent
        a = ct ** g / (ct ** g + self.inference_weight * ci ** g)
        return np.minimum(a, ct)

    def idle_latency_ms(self, batch: ArrayLike, inference_mps_pct: ArrayLike) -> np.ndarray:
        """Per-batch latency while the training is not computing."""
        ci = np.asarray(inference_mps_pct, dtype=float) / 100.0 if self.mps_enabled else 1.0
        return self.transfer_ms(batch) + self.compute_ms(batch) / self.efficiency(ci, batch)

    def busy_latency_ms(self, batch: ArrayLike, mps_pct: ArrayLike,
                        inference_mps_pct: ArrayLike) -> np.ndarray:
        """Per-batch latency while the training computes."""
        if not self.mps_enabled:
            return self.idle_latency_ms(batch, 100.0) / self.timeslice_inference_share
        ci = np.clip(np.asarray(inference_mps_pct, dtype=float) / 100.0, 0.01, 1.0)
        a = self.train_share(mps_pct, inference_mps_pct)
        share = np.minimum(ci, 1.0 - a)
        return self.transfer_ms(batch) + (self.compute_ms(batch) / self.efficiency(share, batch)
                                          * (1.0 + self.interference(batch) * a))

    def train_rate(self, mps_pct: ArrayLike, inference_mps_pct: ArrayLike,
                   inference_running: bool = True) -> np.ndarray:
        """Full-GPU work seconds the training does per second while computing."""
        if not self.mps_enabled:
            r = 1.0 - self.timeslice_inference_share if inference_running else 1.0
            return np.broadcast_to(np.asarray(r, float), np.shape(mps_pct)).astype(float)
        return self.train_share(mps_pct, inference_mps_pct, inference_running)

    def train_sm_reading(self, mps_pct: ArrayLike, inference_mps_pct: ArrayLike,
                         inference_running: bool = True) -> np.ndarray:
        """SM fraction the training occupies while computing (what a %smid sampler reads)."""
        if not self.mps_enabled:
            return np.broadcast_to(np.asarray(self.timeslice_train_occupancy, float),
                                   np.shape(mps_pct)).astype(float)
        return self.train_share(mps_pct, inference_mps_pct, inference_running)


#: Named presets: overrides of :class:`ColocationParams`.
PRESETS: dict[str, dict[str, Any]] = {
    # GPUColo paper, Fig. 4: ResNet-50 inference (small batch) with the CUDA matmul training
    # emulator
    # (iteration ~0.2 s), both at MPS 80 %.
    "fig4": {"batch": 5, "inference_mps_pct": 80.0, "train_work_s": 0.085, "noise_sigma": 0.03},
    # GPUColo paper, Figs. 8/9: ResNet-50 batch 105 (115 in the burst), inference MPS 100 %, Wide
    # ResNet-101 training (iteration 0.5-0.8 s when co-located at MPS 80-100 %).
    "fig8": {"batch": 105, "inference_mps_pct": 100.0, "train_work_s": 0.2, "noise_sigma": 0.02},
}


#: The ``kind`` field of a calibration file written by ``gpucontrol calibrate``.
CALIBRATION_KIND = "gpucontrol.plant-calibration"


def _preset_error(preset: Any, why: str = "") -> ValueError:
    return ValueError(f"preset must be one of {sorted(PRESETS)} or the path of a "
                      f"calibration.json written by 'gpucontrol calibrate', got {preset!r}"
                      + (f" ({why})" if why else ""))


def _read_calibration(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"preset {str(path)!r}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != CALIBRATION_KIND:
        raise ValueError(f"preset {str(path)!r}: not a calibration written by 'gpucontrol "
                         f"calibrate' (its field 'kind' must be {CALIBRATION_KIND!r})")
    base = data.get("base_preset")
    if base not in PRESETS:
        raise ValueError(f"preset {str(path)!r}: field 'base_preset' must be one of "
                         f"{sorted(PRESETS)}, got {base!r}")
    over = data.get("overrides")
    if not isinstance(over, dict):
        raise ValueError(
            f"preset {str(path)!r}: field 'overrides' must be an object of "
            f"ColocationParams fields, got {over!r}")
    known = {f.name for f in fields(ColocationParams)}
    bad = sorted(set(over) - known)
    if bad:
        raise ValueError(f"preset {str(path)!r}: field 'overrides' names unknown plant "
                         f"parameter(s) {', '.join(bad)}")
    return data


def preset_overrides(preset: str | os.PathLike[str]) -> dict[str, Any]:
    """The :class:`ColocationParams` overrides of a named preset (``"fig4"``, ``"fig8"``) or
    of a calibration file written by ``gpucontrol calibrate`` (its base preset's overrides,
    then its fitted ones). Raises ValueError naming what is wrong."""
    if isinstance(preset, str) and preset in PRESETS:
        return dict(PRESETS[preset])
    if not isinstance(preset, (str, os.PathLike)) or not str(preset):
        raise _preset_error(preset)
    path = Path(preset)
    if not path.is_file():
        raise _preset_error(preset, "no such file" if path.suffix or os.sep in str(preset)
                            else "")
    data = _read_calibration(path)
    return {**PRESETS[data["base_preset"]], **data["overrides"]}


def base_preset_name(preset: str | os.PathLike[str]) -> str:
    """The named preset behind ``preset``: itself, or a calibration file's base preset."""
    if isinstance(preset, str) and preset in PRESETS:
        return preset
    preset_overrides(preset)  # validates
    return str(_read_calibration(Path(preset))["base_preset"])


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
        # knobs in force (None until the first actuation: processes start with it)
        self.sleep_s: float | None = None
        self.mps_pct: float | None = None
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
               **overrides: Any) -> SimulatedColocation:
        """A plant with a named preset (``"fig4"`` or ``"fig8"``), or the path of a calibration
        file written by ``gpucontrol calibrate`` (its base preset with the fitted constants),
        and optional overrides."""
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
        m, _, ci = self._args(mps_pct, batch, inference_mps_pct)
        return self.params.train_work_s / self.params.train_rate(m, ci)

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
        restarting = self._phase == "restart"
        inf_restarting = self._inf_restart_left > 0
        while self.t < t_end - 1e-12:
            inf_on = self._inf_restart_left <= 0
            train_on = self._phase == "active"
            dt = t_end - self.t
            if not inf_on:
                dt = min(dt, self._inf_restart_left)
            if train_on:
                rate = float(p.train_rate(self.mps_pct, self.inference_mps_pct, inf_on))
                dt = min(dt, self._phase_left / rate)
            else:
                rate = 0.0
                dt = min(dt, self._phase_left)
            dt = max(dt, 0.0)
            if inf_on:
                lat_ms = float(p.busy_latency_ms(p.batch, self.mps_pct, self.inference_mps_pct)
                               if train_on else p.idle_latency_ms(p.batch, self.inference_mps_pct))
                self._advance_inference(dt, lat_ms / 1000.0, lats)
            else:
                self._inf_restart_left -= dt
            if train_on:
                done = rate * dt
                self._phase_left -= done
                iters += done / self._iter_work
                train_time += dt
                sm_time += dt * float(p.train_sm_reading(self.mps_pct, self.inference_mps_pct,
                                                         inf_on))
            else:
                self._phase_left -= dt
            self.t += dt
            if self._phase_left <= 1e-12:
                self._next_phase()
            restarting = restarting or self._phase == "restart"
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
            self.mps_pct = m
        elif m != self.mps_pct:
            self.mps_pct = m
            if self.params.mps_enabled and not free:
                self._restart_training()
        if ci is not None and self.params.mps_enabled and ci != self.inference_mps_pct:
            self.inference_mps_pct = ci
            if not (free or first):
                self._restart_inference()

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


def make_simulated_plant(preset: str = "fig8", *, seed: int = 0,
                         **overrides: Any) -> SimulatedColocation:
    """The ``sim`` entry of the plant registry (:mod:`harness.experiments.plants`)."""
    return SimulatedColocation.preset(preset, seed=seed, **overrides)
