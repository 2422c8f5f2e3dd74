"""The physics of the simulated co-location plant: :class:`ColocationParams`, every constant
and the noise-free laws (vectorised) that :class:`harness.sim.simulated.SimulatedColocation`
integrates event by event. Values and sources: docs/simulated_plant.md.

Two axes describe how the training's *spatial share* reaches the GPU (the four backends the
hardware study measured, :data:`BACKENDS`):

* ``mps_enabled``: both processes are MPS clients and their kernels run *concurrently*, or
  they are not and the GPU *time-slices* between them (alternating exclusive access);
* ``share_backend``: the share is an MPS active-thread cap (``"mps"``: a change restarts the
  training) or a green-context SM partition (``"green-context"``: the training takes the new
  partition at its next iteration, no restart).

**Time slicing** (``mps_enabled=False``). The scheduler alternates exclusive access: while
both are runnable the inference holds the GPU a fraction ``q_i`` of the time, the training
``1 - q_i - o`` (``o``: the time lost to context switches) and each runs at its own speed in
its slices. The inference's latency is ``l_idle / q_i`` *whatever the training's partition*:
a partition confines the training's kernels inside its own slices, but the inference cannot
use the idle SMs then (no concurrency without MPS) — the H100's 40.4 ms at every share. The
training then progresses at ``(1 - q_i - o) * speed(c)``; an MPS cap is not enforced without
MPS (``speed(1)``).

**Concurrent sharing under MPS.** The training's kernels may use a fraction ``c`` of the SMs
(the MPS cap ``m/100``, or the partition's SM count over the device's); the inference may use
``c_i``. On the SMs both may use, they contend: the training holds
``a = c**g / (c**g + w c_i**g)`` (never above ``c``) — a relative-share law, steep in ``c``
for ``g > 1``: when the inference's weight ``w`` is small (a long-block matmul stream wins
the SMs it may use) the training holds nearly its whole cap, and only as ``c -> 1`` does
the inference lose its last SMs: latency ``t_x + t_c / eff(1 - a) * (1 + alpha a)`` with the
saturating SM efficiency ``eff``; the H100's corner (181 ms at 100 %, 21.4 ms at 25 %). The
training's per-SM speed suffers the inference's activity ``rho = l_idle / l_busy`` in turn,
``1 / (1 + beta rho)`` (memory/L2 co-residency; ``beta = 0`` on the RTX 3090 presets). A
green-context partition *pins* the training's blocks to a fixed SM set, so the two meet on
fewer SMs than under an MPS cap, where the training's blocks spread over every SM: both
interference terms are scaled by ``kappa`` (``partition_interference``).

**Training speed on n SMs.** A kernel of ``B`` thread blocks runs in ``ceil(B / n)`` waves,
so its speed relative to the whole device (``N`` SMs) is
``speed(c) = ceil(B / N) / ceil(B / (c N))`` — wave quantization; ``B = 0`` (the presets of
the GPUColo paper) means speed proportional to ``c``. Partitions come in steps of the
device's SM granularity (8 SMs on an H100: 75 % -> 96 of 132 SMs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["BACKENDS", "SHARE_BACKENDS", "ColocationParams", "backend_name",
           "backend_overrides"]

ArrayLike = Any

#: How the training's share is enforced (``ColocationParams.share_backend``).
SHARE_BACKENDS = ("mps", "green-context")

#: The spatial-share backends of the hardware study, as plant settings.
BACKENDS: dict[str, dict[str, Any]] = {
    "mps-restart": {"mps_enabled": True, "share_backend": "mps"},
    "sleep": {"mps_enabled": False, "share_backend": "mps"},
    "green-context": {"mps_enabled": False, "share_backend": "green-context"},
    "green-context+mps": {"mps_enabled": True, "share_backend": "green-context"},
}


def backend_overrides(name: str) -> dict[str, Any]:
    """The :class:`ColocationParams` settings of a backend of :data:`BACKENDS`."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    return dict(BACKENDS[name])


def backend_name(mps_enabled: bool, share_backend: str) -> str:
    """The :data:`BACKENDS` name of a pair of settings."""
    for name, b in BACKENDS.items():
        if b["mps_enabled"] == bool(mps_enabled) and b["share_backend"] == share_backend:
            return name
    raise ValueError(f"share_backend must be one of {SHARE_BACKENDS}, got {share_backend!r}")


def _num(p: Any, name: str, lo: float, hi: float, *, lo_open: bool = False) -> None:
    v = getattr(p, name)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ok = ok and (v > lo if lo_open else v >= lo) and v <= hi
    if not ok:
        rng = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise ValueError(f"{name} must be a number in {rng}, got {v!r}")


def _int(p: Any, name: str, lo: int, hi: int) -> None:
    v = getattr(p, name)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")


@dataclass(frozen=True)
class ColocationParams:
    """Every parameter of :class:`~harness.sim.simulated.SimulatedColocation` (values and
    sources: docs/simulated_plant.md). Defaults are the Fig 8/9 preset (ResNet-50 batch 105
    with a Wide ResNet-101 training job on an RTX 3090)."""

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
    # spatial-share backend and the device (defaults: the GPUColo paper's plant) -------------
    share_backend: str = "mps"
    green_shares_pct: tuple[float, ...] = (25.0, 50.0, 75.0, 100.0)
    sm_count: int = 0
    sm_granularity: int = 8
    train_blocks: int = 0
    train_interference: float = 0.0
    partition_interference: float = 1.0
    timeslice_switch_loss: float = 0.0
    # training workload ----------------------------------------------------------------------
    train_work_s: float = 0.2
    iteration_jitter: float = 0.05
    # overheads and measurement ------------------------------------------------------------------
    restart_s: float = 7.0
    resize_delay_s: float = 0.0
    inference_restart_s: float = 7.0
    measurement_delay: int = 0
    keep_samples: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.batch, bool) or not (isinstance(self.batch, (int, np.integer))
                                                and 1 <= self.batch <= 4096):
            raise ValueError(f"batch must be an integer in [1, 4096], got {self.batch!r}")
        _num(self, "inference_mps_pct", 1.0, 100.0)
        for n in ("transfer_ms_fixed", "transfer_ms_per_image", "compute_ms_fixed"):
            _num(self, n, 0.0, 1e4)
        _num(self, "compute_ms_per_image", 0.0, 1e4, lo_open=True)
        _num(self, "noise_sigma", 0.0, 1.0)
        _num(self, "saturation_per_sqrt_image", 0.0, 10.0, lo_open=True)
        _num(self, "interference_sqrt_image", 0.0, 1e3)
        _num(self, "inference_weight", 0.0, 1e3, lo_open=True)
        _num(self, "contention_exponent", 0.1, 10.0)
        _num(self, "timeslice_inference_share", 0.0, 1.0, lo_open=True)
        _num(self, "timeslice_train_occupancy", 0.0, 1.0)
        _num(self, "timeslice_switch_loss", 0.0, 0.9)
        _num(self, "train_interference", 0.0, 100.0)
        _num(self, "partition_interference", 0.0, 10.0)
        _num(self, "train_work_s", 0.0, 1e3, lo_open=True)
        _num(self, "iteration_jitter", 0.0, 1.0)
        for n in ("restart_s", "resize_delay_s", "inference_restart_s"):
            _num(self, n, 0.0, 600.0)
        _int(self, "sm_count", 0, 100000)
        _int(self, "sm_granularity", 1, 1024)
        _int(self, "train_blocks", 0, 10**7)
        self._check_structure()

    def _check_structure(self) -> None:
        for n in ("mps_enabled", "keep_samples"):
            v = getattr(self, n)
            if not isinstance(v, (bool, np.bool_)):   # "no" would read as true
                raise ValueError(f"{n} must be True or False, got {v!r}")
        d = self.measurement_delay
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d not in (0, 1):
            raise ValueError(f"measurement_delay must be 0 or 1 periods, got "
                             f"{self.measurement_delay!r}")
        if self.timeslice_inference_share + self.timeslice_switch_loss >= 1.0:
            raise ValueError("timeslice_inference_share + timeslice_switch_loss must be < 1 "
                             "(the training needs some time)")
        if self.share_backend not in SHARE_BACKENDS:
            raise ValueError(f"share_backend must be one of {', '.join(SHARE_BACKENDS)}, got "
                             f"{self.share_backend!r}")
        if self.train_blocks and not self.sm_count:
            raise ValueError("train_blocks > 0 (wave quantization) needs sm_count > 0")
        shares = self.green_shares_pct
        try:    # text is not a list of shares ("25" would read as 2 % and 5 %)
            vals = () if isinstance(shares, (str, bytes)) else tuple(float(v) for v in shares)
        except (TypeError, ValueError):
            vals = ()
        if not vals or any(not (math.isfinite(v) and 0 < v <= 100) for v in vals) or \
                list(vals) != sorted(set(vals)):
            raise ValueError(f"green_shares_pct must be increasing shares in (0, 100] %, got "
                             f"{shares!r}")
        object.__setattr__(self, "green_shares_pct", vals)  # a JSON list reads as a tuple

    @property
    def backend(self) -> str:
        """The :data:`BACKENDS` name of these settings."""
        return backend_name(self.mps_enabled, self.share_backend)

    # ---- the inference alone --------------------------------------------------------------------
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

    # ---- the training's share -------------------------------------------------------------------
    def partition_pct(self, mps_pct: ArrayLike) -> np.ndarray:
        """The green-context partition a commanded share runs on: the largest of
        ``green_shares_pct`` not above it (the smallest below them all)."""
        levels = np.asarray(self.green_shares_pct, float)
        m = np.asarray(mps_pct, dtype=float)
        i = np.clip(np.searchsorted(levels, m + 1e-9, side="right") - 1, 0, len(levels) - 1)
        return levels[i]

    def sm_fraction(self, mps_pct: ArrayLike) -> np.ndarray:
        """Fraction ``c`` of the SMs the training may use: the MPS cap ``m / 100``, or its
        partition's SM count (granularity steps, at least one step) over the device's."""
        if self.share_backend == "mps":
            return np.clip(np.asarray(mps_pct, dtype=float) / 100.0, 0.01, 1.0)
        c = self.partition_pct(mps_pct) / 100.0
        if not self.sm_count:
            return c
        n, g = float(self.sm_count), float(self.sm_granularity)
        sms = np.maximum(np.floor(c * n / g) * g, g)
        return np.where(c >= 1.0, 1.0, np.minimum(sms, n) / n)

    def speed(self, c: ArrayLike) -> np.ndarray:
        """Training speed on an SM fraction ``c`` relative to the whole device: wave
        quantization ``ceil(B/N) / ceil(B/n)`` of a ``B``-block kernel, or ``c`` (B = 0)."""
        c = np.asarray(c, dtype=float)
        if not self.train_blocks:
            return c
        n = np.maximum(np.round(c * self.sm_count), 1.0)
        b = float(self.train_blocks)
        return np.ceil(b / self.sm_count) / np.ceil(b / n)

    def train_share(self, mps_pct: ArrayLike, inference_mps_pct: ArrayLike,
                    inference_running: bool = True) -> np.ndarray:
        """SM fraction ``a`` the training holds while it computes under MPS."""
        ct = self.sm_fraction(mps_pct)
        if not inference_running:
            return ct
        ci = np.clip(np.asarray(inference_mps_pct, dtype=float) / 100.0, 0.01, 1.0)
        g = self.contention_exponent
        a = ct ** g / (ct ** g + self.inference_weight * ci ** g)
        return np.minimum(a, ct)

    def _kappa(self) -> float:
        return self.partition_interference if self.share_backend == "green-context" else 1.0

    # ---- latency and progress -------------------------------------------------------------------
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
        alpha = self._kappa() * self.interference(batch)
        return self.transfer_ms(batch) + (self.compute_ms(batch) / self.efficiency(share, batch)
                                          * (1.0 + alpha * a))

    def train_rate(self, mps_pct: ArrayLike, inference_mps_pct: ArrayLike,
                   inference_running: bool = True, batch: ArrayLike | None = None
                   ) -> np.ndarray:
        """Full-GPU work seconds the training does per second while computing."""
        b = self.batch if batch is None else batch
        if not self.mps_enabled:
            c = self.sm_fraction(mps_pct) if self.share_backend == "green-context" else \
                np.ones(np.shape(mps_pct))
            q = 1.0 - self.timeslice_inference_share - self.timeslice_switch_loss
            return self.speed(c) * (q if inference_running else 1.0)
        c = self.sm_fraction(mps_pct)
        a = self.train_share(mps_pct, inference_mps_pct, inference_running)
        held = a if not self.train_blocks else a / c * self.speed(c)
        beta = self._kappa() * self.train_interference
        if not (inference_running and beta):
            return held
        rho = (self.idle_latency_ms(b, inference_mps_pct)
               / self.busy_latency_ms(b, mps_pct, inference_mps_pct))
        return held / (1.0 + beta * rho)

    def train_sm_reading(self, mps_pct: ArrayLike, inference_mps_pct: ArrayLike,
                         inference_running: bool = True) -> np.ndarray:
        """SM fraction the training occupies while computing (what a %smid sampler reads)."""
        if not self.mps_enabled:
            c = self.sm_fraction(mps_pct) if self.share_backend == "green-context" else \
                np.ones(np.shape(mps_pct))
            return self.timeslice_train_occupancy * np.asarray(c, float)
        return self.train_share(mps_pct, inference_mps_pct, inference_running)
