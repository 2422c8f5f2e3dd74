"""Package-level checks: imports stay light, doctests run, the README quickstart runs."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_loads_no_gpu_packages():
    code = ("import sys, gpucontrol, sysid; "
            "bad = [m for m in ('cupy', 'torch', 'pynvml', 'harness') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_readme_quickstart_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "README has no python quickstart"
    import matplotlib

    matplotlib.use("Agg")
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
