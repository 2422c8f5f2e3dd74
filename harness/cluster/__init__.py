"""Trace-driven cluster simulator: traces, the event-driven engine with 1 s semantics, the
co-location policies and interference-aware placement of the GPUColo paper (Chen et
al., ICDCS 2024), Sec. VI and VIII.

>>> from harness.cluster import synthetic, simulate
>>> r = simulate(synthetic(days=1, target_gpus=10, seed=1), "gpucolo")
>>> r.mean_gpus > 0
True
"""

from harness.cluster.engine import GpuType, SimConfig, SimResult, Simulation, simulate
from harness.cluster.placement import PLACEMENTS, KacePredictor
from harness.cluster.policies import POLICIES, ControlParams, PlantParams, make_policy
from harness.cluster.synthetic import SyntheticConfig, inference_burst, synthetic, with_ratio
from harness.cluster.traces import LoadReport, Trace, load_openb, load_pai
from harness.cluster.vcontrol import VectorTwoTier

__all__ = [
                     "PLACEMENTS",
                     "POLICIES",
                     "ControlParams",
                     "GpuType",
                     "KacePredictor",
                     "LoadReport",
                     "PlantParams",
                     "SimConfig",
                     "SimResult",
                     "Simulation",
                     "SyntheticConfig",
                     "Trace",
                     "VectorTwoTier",
                     "inference_burst",
                     "load_openb",
                     "load_pai",
                     "make_policy",
                     "simulate",
                     "synthetic",
                     "with_ratio",
]
