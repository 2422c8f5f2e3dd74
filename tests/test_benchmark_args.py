"""Every benchmark script refuses a bad number before it measures anything: argparse's
exit status 2 and a message naming the flag and its range (a run of zero seeds or a negative
period used to end in a traceback, or in figures of nothing)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BAD = [
    ("actuation.py", "--cycles", "0"),
    ("agent_ops.py", "--stalls", "-1"),
    ("cluster.py", "--scale", "nan"),
    ("control_quality.py", "--seeds", "0"),
    ("controller_overhead.py", "--n", "0"),
    ("cpu_noise.py", "--quantum", "-1"),
    ("cpu_plant.py", "--identify", "5"),
    ("spatial_cpu.py", "--n", "x"),
    ("sysid.py", "--seeds", "0"),
]


def test_every_benchmark_script_is_covered():
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_")}
    assert scripts == {b[0] for b in BAD}


@pytest.mark.parametrize("script, flag, value", BAD)
def test_a_benchmark_refuses_a_bad_number(script, flag, value):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), flag, value],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"argument {flag}:" in r.stderr and "Traceback" not in r.stderr
