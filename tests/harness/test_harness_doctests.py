"""The docstring examples of the plant, simulator, baselines and calibration run."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["harness.sim.protocol", "harness.sim.simulated", "harness.sim.calibration",
                                    "harness.experiments.common"])
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
