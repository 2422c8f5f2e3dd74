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
    ("foresight.py", "--horizons", "0,25"),
    ("load_step.py", "--plants", "ours,nowhere"),
    ("cpu_noise.py", "--quantum", "-1"),
    ("cpu_plant.py", "--identify", "5"),
    ("outliers.py", "--every", "1"),
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


@pytest.mark.parametrize("script, flag, value, text", [
    ("sysid.py", "--out", "/proc/x/y.md", "'/proc' is not writable"),
    ("sysid.py", "--out", "{tmp}", "is a folder; give a file"),
    ("sysid.py", "--out", "", "an empty path; give a file"),
    ("control_quality.py", "--plot", "/proc/x.png", "'/proc' is not writable"),
    ("cpu_plant.py", "--out", "/proc/x", "'/proc' is not writable"),
    ("cpu_plant.py", "--out", "{tmp}/f/sub", "is not a folder"),
])
def test_a_benchmark_refuses_a_bad_out_before_it_measures(script, flag, value, text, tmp_path):
    """The sysid benchmark computed everything, then died with a traceback on the write; the
    CPU-plant benchmark died with one after its resize phase: now argparse refuses the
    place (exit 2, the flag named) and nothing runs (no output)."""
    (tmp_path / "f").write_text("")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--seeds" if
                        script != "cpu_plant.py" else "--runs", "1", flag,
                        value.format(tmp=tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"argument {flag}:" in r.stderr and text in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
