"""The examples in the GPU harness's docstrings run (none needs a GPU)."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["harness.gpu.smid", "harness.gpu.training_emulator",
                                    "harness.gpu.mps", "harness.gpu._files", "harness.gpu.campaign",
                                    "harness.gpu._tail"])
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
