"""Docstring examples: pytest runs every module's examples (``--doctest-modules`` in
pyproject.toml); this checks that the modules whose examples document the API still have some."""

import doctest
import importlib

import pytest

#: Modules that must carry runnable examples.
DOCUMENTED = [
    "gpucontrol", "gpucontrol.models", "gpucontrol.design", "gpucontrol.stability",
    "gpucontrol.two_tier", "gpucontrol.errors",
    "gpucontrol.node.client", "gpucontrol.node.monitor", "gpucontrol.node.hooks",
    "gpucontrol.node.actuators.sleep", "gpucontrol.node.actuators.mps",
    "sysid",
    "harness.sim.protocol", "harness.sim.simulated", "harness.sim.calibration",
    "harness.experiments.common", "harness.experiments.plants",
    "harness.hil.smid", "harness.hil.training_emulator", "harness.hil.mps_session",
    "harness.hil.campaign", "harness.hil._tail",
    "harness.cluster", "harness.cluster.traces",
    "cuda_kernels",
]


@pytest.mark.parametrize("module", DOCUMENTED)
def test_module_has_examples(module):
    tests = doctest.DocTestFinder().find(importlib.import_module(module))
    assert sum(len(t.examples) for t in tests) > 0

