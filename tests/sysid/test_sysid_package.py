"""sysid stands alone (no gpucontrol/harness imports, sysidentpy lazily) and its doctests run."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import sysid

ROOT = Path(__file__).resolve().parents[2]


def test_sysid_imports_neither_gpucontrol_nor_harness():
    code = ("import sys, sysid; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('gpucontrol', 'harness', 'sysidentpy', 'matplotlib')]; print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_no_module_imports_project_packages():
    import ast

    for path in (ROOT / "sysid").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] in ("gpucontrol", "harness") for n in names), path


MODULES = ["sysid"] + [f"sysid.{m.name}" for m in pkgutil.iter_modules(sysid.__path__)]


def test_public_names():
    for name in ("prbs", "white_noise", "IdData", "fit_static", "fit_arx",
                 "fit_piecewise_linear"):
        assert name in sysid.__all__ and hasattr(sysid, name)
    assert set(sysid.__all__) <= set(dir(sysid))


def test_guide_example_runs():
    import re

    import matplotlib

    matplotlib.use("Agg")
    text = (ROOT / "docs" / "sysid.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/sysid.md", "exec"), {"__name__": "guide"})


def test_fit_narx_without_sysidentpy_says_how_to_install(monkeypatch):
    import numpy as np
    import pytest

    from sysid import IdData, fit_narx

    for name in ("sysidentpy", "sysidentpy.basis_function"):
        monkeypatch.setitem(sys.modules, name, None)   # import of it raises ImportError
    u = np.random.default_rng(0).uniform(0, 1, 50)
    with pytest.raises(ImportError) as info:
        fit_narx(IdData(u, 2 * u))
    msg = str(info.value)
    assert "\n" not in msg and "pip install 'gpucontrol[narx]'" in msg
