"""harness: closes the loop for experiments — plants (simulated and real GPU), baselines,
the paper's experiments, the cluster simulator and the ``gpucontrol`` command.

GPU pieces (``harness.gpu``) import their GPU packages lazily; ``import harness`` needs only
the base install.
"""

from .plant import LoadEvent, PeriodResult, Plant, PlantActuation, Records, Scenario, run_loop
from .simulated import SimulatedColocation

__all__ = [
                    "LoadEvent",
                    "PeriodResult",
                    "Plant",
                    "PlantActuation",
                    "Records",
                    "Scenario",
                    "SimulatedColocation",
                    "run_loop",
]
