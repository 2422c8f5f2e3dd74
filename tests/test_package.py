"""Package-level checks: imports stay light, doctests run, the README quickstart runs."""

import doctest
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_loads_no_gpu_packages():
    code = ("import sys, gpucontrol, sysid; "
            "bad = [m for m in ('cupy', 'torch', 'pynvml', 'harness') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("module", ["gpucontrol.models", "gpucontrol.design",
                                    "gpucontrol.stability", "gpucontrol.two_tier"])
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_readme_quickstart_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "README has no python quickstart"
    import matplotlib

    matplotlib.use("Agg")
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
