"""gpucontrol: keep an inference service's latency at its SLO while training shares the GPU.

The control library of the project: latency models, P/PI design, stability under model
variation and the two-tier runtime controller (seed 000). It imports no GPU package at module
level; GPU pieces are imported lazily where used.
"""

from .design import PDesign, PIDesign, design_p, design_pi
from .models import LatencyModelFamily, LinearLatencyModel, OperatingPoint
from .stability import (
                        check_envelope,
                        is_stable,
                        jury,
                        robustness_plot,
                        robustness_sweep,
                        stable_gain_range,
)

__version__ = "0.1.0"

__all__ = [
                        "LatencyModelFamily",
                        "LinearLatencyModel",
                        "OperatingPoint",
                        "PDesign",
                        "PIDesign",
                        "check_envelope",
                        "design_p",
                        "design_pi",
                        "is_stable",
                        "jury",
                        "robustness_plot",
                        "robustness_sweep",
                        "stable_gain_range",
]
from .controllers import GainEstimator, InnerSleepController, Measurement, OuterMPSOptimizer
from .report import report_latency
from .two_tier import Actuation, TwoTierController

__all__ += [
                        "Actuation",
                        "GainEstimator",
                        "InnerSleepController",
                        "Measurement",
                        "OuterMPSOptimizer",
                        "TwoTierController",
                        "report_latency",
]
