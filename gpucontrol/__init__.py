"""gpucontrol: keep an inference service's latency at its SLO while training shares the GPU.

The control library of the project: latency models, P/PI design, stability under model
variation and the two-tier runtime controller (seed 000). It imports no GPU package at module
level; GPU pieces are imported lazily where used.
"""

from .models import LatencyModelFamily, LinearLatencyModel, OperatingPoint
from .design import PDesign, PIDesign, design_p, design_pi
from .stability import (check_envelope, is_stable, jury, robustness_plot, robustness_sweep,
                        stable_gain_range)

__version__ = "0.1.0"

__all__ = [
    "LinearLatencyModel", "LatencyModelFamily", "OperatingPoint",
    "PDesign", "PIDesign", "design_p", "design_pi",
    "jury", "is_stable", "stable_gain_range", "robustness_sweep", "robustness_plot",
    "check_envelope",
]
from .controllers import GainEstimator, InnerSleepController, Measurement, OuterMPSOptimizer
from .two_tier import Actuation, TwoTierController
from .report import report_latency

__all__ += ["Measurement", "GainEstimator", "InnerSleepController", "OuterMPSOptimizer",
            "Actuation", "TwoTierController", "report_latency"]
