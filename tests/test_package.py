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


def test_python_m_gpucontrol_has_the_version_and_the_daemon():
    """``python -m gpucontrol`` runs: --version, -h, and ``daemon`` hands its arguments to the
    node agent's own command line; anything else is one line, status 2. No harness."""
    import gpucontrol

    def run(*args):
        return subprocess.run([sys.executable, "-m", "gpucontrol", *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=60, check=False)

    r = run("--version")
    assert (r.returncode, r.stdout.strip()) == (0, f"gpucontrol {gpucontrol.__version__}")
    r = run("-h")
    assert r.returncode == 0 and "daemon" in r.stdout and "python -m gpucontrol.daemon" in r.stdout
    r = run("daemon", "--help")
    assert r.returncode == 0 and "--training-pid" in r.stdout and "--slo-ms" in r.stdout
    r = run("daemon", "--period-s", "-1", "--training-pid", "1", "--fixed-sleep", "0")
    assert r.returncode == 2 and "--period-s" in r.stderr and len(r.stderr.splitlines()) == 1
    for args in ((), ("bogus",)):
        r = run(*args)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
        assert "python -m gpucontrol -h" in r.stderr
    code = ("import sys, runpy; sys.argv = ['x', '--version']\n"
            "try:\n    runpy.run_module('gpucontrol', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('harness' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60, check=True)
    assert r.stdout.split()[-1] == "False"
