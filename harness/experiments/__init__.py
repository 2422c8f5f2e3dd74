"""The paper's experiments on a plant (simulated by default): knobs (Fig 4), burst (Fig 8),
SLO sweep (Fig 9) and the demo. Each is a function returning an
:class:`~harness.experiments.common.ExperimentResult` and a ``gpucontrol`` subcommand
(:mod:`harness.experiments.commands`)."""

from .burst import burst, burst_scenario
from .common import (
                     CONTROLLER_NAMES,
                     ExperimentResult,
                     PlantUnavailable,
                     build_controllers,
                     identify_family,
                     make_plant,
)
from .demo import demo
from .knobs import knobs
from .slo_sweep import slo_sweep

__all__ = [
                     "CONTROLLER_NAMES",
                     "ExperimentResult",
                     "PlantUnavailable",
                     "build_controllers",
                     "burst",
                     "burst_scenario",
                     "demo",
                     "identify_family",
                     "knobs",
                     "make_plant",
                     "slo_sweep",
]
