"""gpucontrol: keep an inference service's latency at its SLO while training shares the GPU.

The control library of the project: latency models, P/PI design, stability under model
variation and the two-tier runtime controller, after the GPUColo design (Chen, Subramaniyan
and Wang, "GPUColo: Co-locating ML Inference and Training on One GPU with Latency
Guarantees", ICDCS 2024). The node agent that runs it on a GPU node is
:mod:`gpucontrol.node`. No GPU package is imported at module level.

>>> from gpucontrol import LinearLatencyModel, design_p, stable_gain_range
>>> model = LinearLatencyModel(gain=-12.0, offset=95.0)
>>> stable_gain_range(design_p(model), model)
(0.0, 2.0)
"""

from gpucontrol.controllers import (
    GainEstimator,
    InnerSleepController,
    OuterMPSOptimizer,
)
from gpucontrol.design import PDesign, PIDesign, design_p, design_pi
from gpucontrol.errors import ConfigurationError
from gpucontrol.knobs import ShareKnob, SleepKnob
from gpucontrol.measurement import Measurement
from gpucontrol.models import LatencyModelFamily, LinearLatencyModel, OperatingPoint
from gpucontrol.outer import ThroughputOuter
from gpucontrol.stability import (
    check_envelope,
    is_stable,
    jury,
    robustness_plot,
    robustness_sweep,
    stable_gain_range,
)
from gpucontrol.two_tier import Actuation, TwoTierController

__version__ = "0.2.0"

__all__ = [
    "Actuation",
    "ConfigurationError",
    "GainEstimator",
    "InnerSleepController",
    "LatencyModelFamily",
    "LinearLatencyModel",
    "Measurement",
    "OperatingPoint",
    "OuterMPSOptimizer",
    "PDesign",
    "PIDesign",
    "ShareKnob",
    "SleepKnob",
    "ThroughputOuter",
    "TwoTierController",
    "check_envelope",
    "design_p",
    "design_pi",
    "is_stable",
    "jury",
    "report_latency",
    "robustness_plot",
    "robustness_sweep",
    "stable_gain_range",
]


def __getattr__(name: str) -> object:
    # ``gpucontrol.report_latency`` is the node agent's client, re-exported for inference code;
    # it is imported on first use so that ``import gpucontrol`` loads only the control core.
    if name == "report_latency":
        from gpucontrol.node.client import report_latency

        return report_latency
    raise AttributeError(f"module 'gpucontrol' has no attribute {name!r}")
