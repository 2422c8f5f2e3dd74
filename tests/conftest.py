"""Suite-wide test settings, and the loader of a benchmark script as a module."""

import importlib.util
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests check values, not speed: on a loaded 2-core CI machine one example can take
# longer than hypothesis's default 200 ms deadline, which would fail a correct test.
settings.register_profile("gpucontrol", deadline=None)
settings.load_profile("gpucontrol")


@pytest.fixture
def benchmark_module():
    """``load(name)``: the script ``benchmarks/<name>.py`` loaded as a module (the benchmarks
    folder is not a package)."""
    root = Path(__file__).resolve().parents[1]

    def load(name: str):
        spec = importlib.util.spec_from_file_location(
            f"{name}_under_test", root / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load
