"""harness: closes the loop for experiments.

- :mod:`harness.sim`: the plant protocol, the simulated plant, its calibration, the baselines.
- :mod:`harness.experiments`: the paper's experiments on any plant from the registry.
- :mod:`harness.hil`: hardware in the loop on a GPU (GPU packages imported lazily).
- :mod:`harness.cluster`: the trace-driven cluster simulator.
- :mod:`harness.cli`: the ``gpucontrol`` command.

``import harness`` needs only the base install.
"""

from harness.sim import (
    LoadEvent,
    PeriodResult,
    Plant,
    PlantActuation,
    Records,
    Scenario,
    SimulatedColocation,
    run_loop,
)

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
