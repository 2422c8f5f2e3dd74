"""The examples in the GPU harness's docstrings run (none needs a GPU)."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["harness.hil.smid", "harness.hil.training_emulator",
                                    "harness.hil.mps_session", "harness.hil._files", "harness.hil.campaign",
                                    "harness.hil._tail"])
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
