"""Configuration and results of one cluster simulation run."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.checks import integer, number
from harness.cluster.placement import PLACEMENTS
from harness.cluster.policies import ControlParams, PlantParams, make_policy
from harness.cluster.traces import DAY, INFERENCE, TRAINING


@dataclass(frozen=True)
class GpuType:
    """A GPU model of the pool.

    Parameters
    ----------
    name : str
        Model name.
    speed : float
        Speed relative to the trace's GPUs, in (0, 100].
    mem_gb : float
        Memory (GB), in (0, 1024].
    weight : int
        Share of the pool: power-ons cycle through the types, each ``weight`` times; an
        integer in [1, 10000].
    """

    name: str
    speed: float = 1.0
    mem_gb: float = 32.0
    weight: int = 1

    def __post_init__(self) -> None:
        number("GpuType speed", self.speed, 0, 100, lo_open=True)
        number("GpuType mem_gb", self.mem_gb, 0, 1024, lo_open=True)
        object.__setattr__(self, "weight", integer("GpuType weight", self.weight, 1, 10000))


DEFAULT_GPUS = (GpuType("default"),)


@dataclass(frozen=True)
class SimConfig:
    """One simulation run.

    slo_mode ``"rate"`` (default): an inference task meets its SLO when it finishes within
    ``length / slo_factor`` (it kept at least 96 % of its trace speed); ``"deadline"``:
    within ``slo_factor * length`` (the literal reading; needs ``max_speedup > 1/0.96`` and
    is infeasible for tasks demanding a whole GPU). See docs/cluster.md.

    Parameters
    ----------
    policy : str
        One of :data:`~harness.cluster.policies.POLICIES`.
    placement : str
        One of :data:`~harness.cluster.placement.PLACEMENTS`.
    plant : PlantParams
        Per-GPU model parameters.
    control : ControlParams
        Controller settings.
    slo_factor : float
        SLO factor, in (0, 2].
    slo_mode : str
        ``"rate"`` or ``"deadline"``.
    gpu_types : tuple of GpuType
        The GPU pool (not empty).
    horizon_s : int, optional
        Simulated seconds, an integer >= 1 (default: to the end of the last arrival's day).
    seed : int
        Seed of the observed features and the KACE profiling, in [0, 2^32 - 1].
    """

    policy: str = "gpucolo"
    placement: str = "first-fit"
    plant: PlantParams = field(default_factory=PlantParams)
    control: ControlParams = field(default_factory=ControlParams)
    slo_factor: float = 0.96
    slo_mode: str = "rate"
    gpu_types: tuple[GpuType, ...] = DEFAULT_GPUS
    horizon_s: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        make_policy(self.policy)
        if self.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {self.placement!r}; choose from "
                             f"{', '.join(PLACEMENTS)}")
        number("slo_factor", self.slo_factor, 0, 2, lo_open=True)
        if self.slo_mode not in ("rate", "deadline"):
            raise ValueError(f"slo_mode must be 'rate' or 'deadline', got {self.slo_mode!r}")
        if not self.gpu_types:
            raise ValueError("gpu_types must not be empty")
        if not all(isinstance(gt, GpuType) for gt in self.gpu_types):
            raise ValueError(f"gpu_types must be GpuType instances, got {self.gpu_types!r}")
        if self.horizon_s is not None:
            object.__setattr__(self, "horizon_s", integer("horizon_s", self.horizon_s, 1))
        object.__setattr__(self, "seed", integer("seed", self.seed, 0, 2**32 - 1))

    @property
    def slo_latency(self) -> float:
        """SLO on the normalized latency (100 = the latency in the trace)."""
        return 100.0 / self.slo_factor if self.slo_mode == "rate" else 100.0 * self.slo_factor


@dataclass
class SimResult:
    """Result of one run.

    Parameters
    ----------
    policy, placement, trace : str
        What ran on what.
    days : int
        Simulated days.
    daily_gpus : numpy.ndarray
        Mean powered-on GPUs per day (provisioned for Separate).
    daily_used : numpy.ndarray
        Mean GPUs hosting a job per day.
    finish : numpy.ndarray
        Completion tick per task, -1 when unfinished at the horizon.
    violated : numpy.ndarray
        Per inference task: 1 violated, 0 met, -1 censored (-1 for training tasks too).
    kind, arrival, work : numpy.ndarray
        The trace's task kinds, arrivals and lengths.
    wall_s : float
        Wall time of the run (s).
    ticks : int
        Ticks the engine visited.
    controller_updates, mps_changes, restarts : int
        Controller steps, MPS changes and process restarts.
    peak_gpus : int
        Most GPUs provisioned at once.
    kace_r2 : float
        R^2 of the KACE predictor (nan for other placements).
    """

    policy: str
    placement: str
    trace: str
    days: int
    daily_gpus: np.ndarray          # mean powered-on GPUs per day (provisioned for Separate)
    daily_used: np.ndarray          # mean GPUs hosting a job per day
    finish: np.ndarray              # completion tick per task, -1 when unfinished at horizon
    violated: np.ndarray            # per inference task: 1 violated, 0 met, -1 censored
    kind: np.ndarray
    arrival: np.ndarray
    work: np.ndarray
    wall_s: float = 0.0
    ticks: int = 0
    controller_updates: int = 0
    mps_changes: int = 0
    restarts: int = 0
    peak_gpus: int = 0
    kace_r2: float = float("nan")

    @property
    def mean_gpus(self) -> float:
        return float(np.mean(self.daily_gpus)) if len(self.daily_gpus) else 0.0

    @property
    def violation_rate(self) -> float:
        """Fraction of the inference tasks that missed their SLO, over those that finished or
        passed their deadline; nan when there is none (a run without inference tasks has no
        violation rate, not a rate of 0)."""
        v = self.violated[self.violated >= 0]
        return float(np.mean(v)) if len(v) else float("nan")

    def daily_violation(self) -> np.ndarray:
        inf = np.nonzero(self.kind == INFERENCE)[0]
        day = (self.arrival[inf] // DAY).astype(int)
        v = self.violated[inf]
        out = np.full(self.days, np.nan)
        for d in range(self.days):
            m = (day == d) & (v >= 0)
            if m.any():
                out[d] = float(np.mean(v[m]))
        return out

    def training_slowdown(self) -> float:
        m = (self.kind == TRAINING) & (self.finish >= 0)
        if not m.any():
            return float("nan")
        return float(np.mean((self.finish[m] - self.arrival[m]) / self.work[m]))
