"""harness.sim: the plant protocol and the simulated plant.

- :mod:`harness.sim.protocol`: the :class:`Plant` protocol, :class:`PlantActuation`,
  :class:`Scenario` and :func:`run_loop` (tidy :class:`Records`, one row per period).
- :mod:`harness.sim.simulated`: :class:`SimulatedColocation`, the calibrated simulated plant.
- :mod:`harness.sim.calibration`: fitting the simulated plant's constants to facts.
- :mod:`harness.sim.baselines`: the paper's baselines and the Oracle.
- :mod:`harness.sim.zoo`: plants with other physics (hyperbolic duty law, batch-mixture p99,
  reporting delay, a shared-bandwidth queue, glitches), synthetic load and the per-period
  oracle.
"""

from harness.sim.protocol import (
    LoadEvent,
    PeriodResult,
    Plant,
    PlantActuation,
    Records,
    Scenario,
    run_loop,
)
from harness.sim.simulated import SimulatedColocation

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
