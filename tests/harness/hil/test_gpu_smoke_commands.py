"""The GPU harness's smoke commands (docs/gpu.md) on a machine without the GPU packages: one
line and exit status 3, as ``gpucontrol --plant gpu`` (they printed a 30-line traceback, and
smid a runpy RuntimeWarning first); their ``--json`` output is valid JSON (NaN was printed as
``NaN``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# the GPU packages hidden (a None entry in sys.modules makes their import fail), then the
# module run as ``python -m`` runs it
RUN_WITHOUT_GPU = ("import runpy, sys\n"
                   "for m in ('cupy', 'torch', 'torchvision', 'pynvml'):\n"
                   "    sys.modules[m] = None\n"
                   "sys.argv = [{module!r}, *{args!r}]\n"
                   "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")


def _run(code, timeout=60):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.parametrize("module, args, package", [
    ("harness.hil.smid", ["--samples", "5"], "cupy"),
    ("harness.hil.training_emulator", ["--iterations", "20", "--json"], "cupy"),
    ("harness.hil.inference", ["--batches", "20", "--json"], "torch"),
])
def test_a_smoke_command_without_the_gpu_packages_is_one_line_exit_3(module, args, package):
    r = _run(RUN_WITHOUT_GPU.format(module=module, args=args))
    assert r.returncode == 3, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr  # no traceback, no RuntimeWarning
    assert lines[0].startswith(f"python -m {module}: {package} is not importable")
    assert r.stdout == ""


def test_smid_is_not_imported_before_it_runs_as_main():
    """``import harness.hil`` used to import harness.hil.smid, so ``python -m
    harness.hil.smid`` ran a second copy of it (runpy's RuntimeWarning)."""
    r = _run("import sys, harness.hil\n"
             "print('harness.hil.smid' in sys.modules, harness.hil.SMSample.__module__)")
    assert r.stdout.split() == ["False", "harness.hil.smid"], r.stderr


def test_smid_refuses_a_sample_count_below_one():
    """``--samples 0`` was silently run as 1 sample."""
    r = _run(RUN_WITHOUT_GPU.format(module="harness.hil.smid", args=["--samples", "0"]))
    assert r.returncode == 2
    assert "argument --samples: must be a whole number >= 1, got '0'" in r.stderr


def _strict(text):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_training_emulator_json_has_null_not_nan(tmp_path):
    """Without %smid samples the SM fields are NaN: --json wrote ``NaN``, which JSON readers
    refuse; now ``null`` (the numpy backend, no GPU needed)."""
    r = subprocess.run([sys.executable, "-m", "harness.hil.training_emulator", "--backend",
                        "numpy", "--target-iter-s", "0.02", "--iterations", "2", "--json",
                        "--log", str(tmp_path / "log.csv")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    rows = [_strict(line) for line in r.stdout.splitlines()]
    assert len(rows) == 2 and all(row["sm_fraction"] is None for row in rows)
    summary = _strict(r.stderr.strip().splitlines()[-1])["summary"]
    assert summary["iterations"] == 2 and summary["mean_sm_fraction"] is None
