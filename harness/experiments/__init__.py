"""The paper's experiments on a plant (simulated by default): knobs (Fig 4), burst (Fig 8),
SLO sweep (Fig 9) and the demo. Each is a function returning an
:class:`~harness.experiments.common.ExperimentResult` and a ``gpucontrol`` subcommand
(:mod:`harness.cli.experiments`)."""

from harness.experiments.burst import burst, burst_scenario
from harness.experiments.common import (
                     CONTROLLER_NAMES,
                     ExperimentResult,
                     PlantUnavailable,
                     build_controllers,
                     identify_family,
                     make_plant,
)
from harness.experiments.demo import demo
from harness.experiments.knobs import knobs
from harness.experiments.slo_sweep import slo_sweep

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
