"""Co-location policies and the per-GPU plant they run on.

The policies are those of the GPUColo paper (Chen et al., ICDCS 2024), Sec. III and VI.

The plant (docs/cluster.md, "GPU model"): each policy gives every job on a GPU a share ``a``
of the GPU. A job uses ``u = min(a, max_speedup * d)`` of it (``d`` its demanded utilization)
and progresses, per second, ``rate = f * (u / d) / (1 + gamma * sigma * (P - beta * u))``
seconds of its trace length, where ``f`` is the GPU's speed, ``P = sum(beta_k u_k)`` is the
memory/L2 pressure of everything on the GPU and ``sigma`` the job's sensitivity to it
(the InSS paper's interference terms, reduced to one). A restarting job (MPS change) uses nothing
and makes no progress. The "latency" of an inference job is ``100 / rate``: 100 is its
latency in the trace.

Policies and the share each gives (``n`` jobs on the GPU):

===============  ================================================================
No Co-location   one job per GPU, ``a = 1``
Separate (5:1)   inference and training GPUs apart, even split ``a = 1/n``; the GPUs
                 provisioned are ``6 max(used_train, ceil(used_inf / 5))``
Simple           mixed, even split ``a = 1/n``
Conservative     mixed, weights 4 (inference) : 1 (training) — 40 % / 10 % for 2 + 2
GSLICE           inference-only GPUs with adaptive per-job shares every 25 s (each
                 change restarts the job); training GPUs one job each
GPUColo          mixed; training ``a = d * mps/100 * T/(T + sleep)``; inference
                 shares the rest in proportion to demand; the two-tier controller
                 sets sleep (every 4 s) and MPS (every 100 s) on co-located GPUs
===============  ================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.checks import integer, number
from harness.cluster.vcontrol import CORE_DEFAULTS

POLICIES = ("nocolo", "separate", "simple", "conservative", "gslice", "gpucolo")
LABELS = {"nocolo": "No Co-location", "separate": "Separate (5:1)", "simple": "Simple",
          "conservative": "Conservative", "gslice": "GSLICE", "gpucolo": "GPUColo"}


@dataclass(frozen=True)
class PlantParams:
    """Per-GPU model parameters (all documented in docs/cluster.md).

    Parameters
    ----------
    max_speedup : float
        A job given more than its demand runs at most this much faster than in the trace
        (inference latency falls with more SMs up to a knee, the Mudi paper, Sec. 4.1);
        in [1, 10].
    interference : float
        gamma, strength of the pressure term; in [0, 10].
    train_iteration_s : float
        Training iteration time T (s); duty cycle with sleep s is T/(T+s); in (0, 3600].
    restart_s : int
        Seconds a process makes no progress after an MPS change (the GPUColo paper: 5-15 s);
        in [0, 600].
    """

    max_speedup: float = 1.2
    interference: float = 0.5
    train_iteration_s: float = 1.0
    restart_s: int = 7

    def __post_init__(self) -> None:
        number("max_speedup", self.max_speedup, 1, 10)
        number("interference", self.interference, 0, 10)
        number("train_iteration_s", self.train_iteration_s, 0, 3600, lo_open=True)
        object.__setattr__(self, "restart_s", integer("restart_s", self.restart_s, 0, 600))


@dataclass(frozen=True)
class ControlParams:
    """Controller settings. GPUColo: inner P every ``inner_period_s`` on the worst inference
    latency of the GPU, outer ``paper`` strategy every ``outer_every`` inner periods; gain
    identified (secant of latency over the sleep range) at every change of the GPU's jobs.
    ``gain="scheduled"`` re-identifies the local slope at the current sleep before every inner
    step (gain scheduling by operating point); ``"fixed"`` keeps the secant of the last
    identification (the paper's fixed P gain), which oscillates on GPUs whose latency curve
    has a kink (inference reaching its speed cap).
    GSLICE: every ``gslice_period_s`` each inference job's share is rescaled by
    latency/target when it violates its SLO or sits more than ``gslice_slack`` below target.

    The defaults of ``inner_period_s``, ``outer_every``, ``threshold`` and ``sleep_max_s`` are
    ``gpucontrol.TwoTierController``'s (:data:`harness.cluster.vcontrol.CORE_DEFAULTS`).

    Parameters
    ----------
    inner_period_s : int
        GPUColo inner period (s), in [1, 3600].
    outer_every : int
        Outer period in inner periods, in [1, 10000]; must exceed the inner settling time.
    threshold : float
        Relative error below which the outer loop does not act, in [0, 1).
    detune : float
        Inner P gain as a fraction of deadbeat (``gpucontrol.design_p``), in (0, 2).
    gain : str
        ``"scheduled"`` or ``"fixed"``.
    setpoint_margin : float
        Set point below the SLO latency, as a fraction; in [0, 0.5).
    sleep_max_s : float
        Upper sleep bound (s), in (0, 3600].
    sleep_tolerance_s : float
        Actuator resolution: smaller sleep moves are not applied (s), in [0, sleep_max_s).
    gslice_period_s : int
        GSLICE period (s), in [1, 86400].
    gslice_slack : float
        GSLICE shrinks a share when the latency is this fraction below target, in [0, 1).
    """

    inner_period_s: int = int(CORE_DEFAULTS["inner_period_s"])
    outer_every: int = CORE_DEFAULTS["outer_every"]
    threshold: float = CORE_DEFAULTS["mps_threshold"]
    detune: float = 0.9
    gain: str = "scheduled"
    setpoint_margin: float = 0.02
    sleep_max_s: float = CORE_DEFAULTS["sleep_bounds_s"][1]
    sleep_tolerance_s: float = 1e-3
    gslice_period_s: int = 25
    gslice_slack: float = 0.10

    def __post_init__(self) -> None:
        for name, hi in (("inner_period_s", 3600), ("outer_every", 10000)):
            object.__setattr__(self, name, integer(name, getattr(self, name), 1, hi))
        number("threshold", self.threshold, 0, 1, hi_open=True)
        number("detune", self.detune, 0, 2, lo_open=True, hi_open=True)
        if self.gain not in ("scheduled", "fixed"):
            raise ValueError(f"gain must be 'scheduled' or 'fixed', got {self.gain!r}")
        number("setpoint_margin", self.setpoint_margin, 0, 0.5, hi_open=True)
        number("sleep_max_s", self.sleep_max_s, 0, 3600, lo_open=True)
        number("sleep_tolerance_s", self.sleep_tolerance_s, 0, self.sleep_max_s,
               hi_open=True)
        object.__setattr__(self, "gslice_period_s",
                           integer("gslice_period_s", self.gslice_period_s, 1, 86400))
        number("gslice_slack", self.gslice_slack, 0, 1, hi_open=True)


@dataclass(frozen=True)
class Policy:
    name: str
    mixed: bool          # inference and training may share a GPU
    exclusive: bool      # one job per GPU
    controller: str      # "", "gpucolo" or "gslice"
    weights: tuple[float, float] = (1.0, 1.0)   # fixed share weights (inference, training)
    provision_ratio: float = 0.0                 # Separate: inference GPUs per training GPU
    exclusive_training: bool = False             # GSLICE: training jobs one per GPU

    @property
    def label(self) -> str:
        return LABELS[self.name]


def make_policy(name: str) -> Policy:
    """The policy called ``name``.

    Parameters
    ----------
    name : str
        One of :data:`POLICIES`.

    Returns
    -------
    Policy
        Its packing rules and controller.

    Raises
    ------
    ValueError
        For an unknown name.

    Examples
    --------
    >>> make_policy("gslice").controller
    'gslice'
    """
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    return {
        "nocolo": Policy("nocolo", False, True, ""),
        "separate": Policy("separate", False, False, "", provision_ratio=5.0),
        "simple": Policy("simple", True, False, ""),
        "conservative": Policy("conservative", True, False, "", weights=(4.0, 1.0)),
        "gslice": Policy("gslice", False, False, "gslice", exclusive_training=True),
        "gpucolo": Policy("gpucolo", True, False, "gpucolo"),
    }[name]


def rates(u: list[float], d: list[float], beta: list[float], sigma: list[float], f: float,
          gamma: float) -> list[float]:
    """Progress rate of each job from its used share (the plant equation above)."""
    p = 0.0
    for uk, bk in zip(u, beta):
        p += bk * uk
    return [f * (uk / dk) / (1.0 + gamma * sk * (p - bk * uk))
            for uk, dk, bk, sk in zip(u, d, beta, sigma)]


def fixed_shares(kinds: list[int], d: list[float], weights: tuple[float, float],
                 smax: float, exclusive: bool) -> list[float]:
    """Used shares under a fixed allocation (No Co-location, Separate, Simple, Conservative)."""
    if exclusive:
        return [min(1.0, smax * dk) for dk in d]
    w = [weights[k] for k in kinds]
    tot = sum(w)
    return [min(wk / tot, smax * dk) for wk, dk in zip(w, d)]


def proportional_shares(d: list[float], smax: float) -> list[float]:
    """Whole GPU split in proportion to demand (GPUColo GPUs without co-location)."""
    tot = sum(d)
    x = min(smax, 1.0 / tot) if tot > 0 else 0.0
    return [dk * x for dk in d]


def gpucolo_shares(kinds: list[int], d: list[float], sleep: float, mps: float,
                   restarting: bool, smax: float, iteration_s: float) -> list[float]:
    """Used shares on a co-located GPUColo GPU for a training sleep and MPS percentage."""
    duty = iteration_s / (iteration_s + sleep)
    cap = mps / 100.0
    used_t, d_inf = 0.0, 0.0
    u = [0.0] * len(d)
    for i, (k, dk) in enumerate(zip(kinds, d)):
        if k == 1:
            if not restarting:
                u[i] = dk * cap * duty
                used_t += u[i]
        else:
            d_inf += dk
    if d_inf > 0:
        x = min(smax, max(0.0, 1.0 - used_t) / d_inf)
        for i, k in enumerate(kinds):
            if k == 0:
                u[i] = d[i] * x
    return u
