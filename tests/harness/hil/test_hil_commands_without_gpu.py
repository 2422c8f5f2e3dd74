"""The GPU harness's studies (``mps_study``, ``spatial_study``, ``daemon_run``) on a machine
without a GPU, and their flags.

Without a GPU each used to start anyway: ``mps_study`` ended in a 15-line traceback
("training calibration failed (exit 3)"), ``spatial_study`` and ``daemon_run`` ran every
phase to its failure, wrote ``errors.txt``, empty summaries and figures under ``--out`` and
exited 1. Now each says in one line what is missing and exits 3 before it creates a folder
or starts a process. Bad flags were taken (``--batch 0,0``, ``--burst 70,30``, ``--slo-ms
inf``, ``--outer-every sleep=3``, ``--period inf``) or refused by a message that did not name
the flag (``--burst a,b``: "could not convert string to float").
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.hil import _lazy

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent

# the GPU packages hidden (a None entry in sys.modules makes their import fail), then the
# module run as ``python -m`` runs it
RUN_WITHOUT_GPU = ("import runpy, sys\n"
                   "for m in ('cupy', 'torch', 'torchvision', 'pynvml'):\n"
                   "    sys.modules[m] = None\n"
                   "sys.argv = [{module!r}, *{args!r}]\n"
                   "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(module, args, timeout=60):
    code = RUN_WITHOUT_GPU.format(module=module, args=args)
    return subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=_env())


@pytest.mark.parametrize("module, what", [
    ("harness.hil.mps_study", "the MPS study"),
    ("harness.hil.spatial_study", "the spatial study"),
    ("harness.hil.daemon_run", "the daemon run"),
])
def test_a_study_without_a_gpu_says_so_in_one_line_and_leaves_nothing(module, what, tmp_path):
    out = tmp_path / "out"
    r = _run(module, ["--out", str(out)])
    assert r.returncode == 3, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr  # no traceback, no phase-by-phase failures
    assert lines[0].startswith(f"python -m {module}: {what} needs a CUDA GPU, and ")
    assert "is not installed" in lines[0] and "pip install" in lines[0]
    assert not out.exists()  # nothing written


def test_gpu_missing_names_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert _lazy.gpu_missing("cupy").startswith("cupy is not installed")
    assert _lazy.gpu_missing() is None

    class FakeCupy:
        __version__ = "0"

        class cuda:
            class runtime:
                @staticmethod
                def getDeviceCount():
                    return 0

    monkeypatch.setitem(sys.modules, "cupy", FakeCupy)
    assert _lazy.gpu_missing("cupy").startswith("no CUDA device: cupy is installed")
    with pytest.raises(_lazy.GPUUnavailableError, match=r"^the X needs a CUDA GPU, and no CUDA"):
        _lazy.require_gpu("cupy", what="the X")


def test_the_mps_study_without_the_mps_binary_says_so(monkeypatch, tmp_path, capsys):
    import harness.hil.mps_study as study

    monkeypatch.setattr(study, "require_gpu", lambda *a, **k: None)  # as on a GPU machine
    monkeypatch.setenv("PATH", str(tmp_path))                        # without MPS
    out = tmp_path / "out"
    assert study.main(["--out", str(out)]) == 3
    err = capsys.readouterr().err.strip()
    assert err == ("python -m harness.hil.mps_study: the MPS study needs MPS, and "
                   "nvidia-cuda-mps-control is not installed here (MPS not available)")
    assert not out.exists()


@pytest.mark.parametrize("module, args, message", [
    ("harness.hil.mps_study", ["--levels", "150"], "argument --levels: must be in [1, 100] %"),
    ("harness.hil.mps_study", ["--levels", "0,50"], "argument --levels: must be in [1, 100] %"),
    ("harness.hil.mps_study", ["--period", "nan"], "argument --period: must be in (0, 3600] s"),
    ("harness.hil.mps_study", ["--period", "-4"], "argument --period: must be in (0, 3600] s"),
    ("harness.hil.mps_study", ["--measure", "0"], "argument --measure: must be in [1, 1000]"),
    ("harness.hil.mps_study", ["--batch", "0"], "argument --batch: must be in [1, 4096]"),
    ("harness.hil.mps_study", ["--modes", "warm"], "argument --modes: a comma-separated list"),
    ("harness.hil.mps_study", ["--out", "/proc/x"], "argument --out: '/proc/x'"),
    ("harness.hil.spatial_study", ["--period", "inf"], "argument --period: must be in (0, 3600]"),
    ("harness.hil.spatial_study", ["--measure", "0"], "argument --measure: must be in [1, 1000]"),
    ("harness.hil.spatial_study", ["--batch", "-3"], "argument --batch: must be in [1, 4096]"),
    ("harness.hil.spatial_study", ["--shares", "abc"], "--shares takes numbers in (0, 100]"),
    ("harness.hil.spatial_study", ["--shares", "nan"], "shares must be in (0, 100]"),
    ("harness.hil.daemon_run", ["--batch", "0,0"], "argument --batch: both values must be in "
                                                   "[1, 4096]"),
    ("harness.hil.daemon_run", ["--batch", "-5,10"], "argument --batch: both values must be"),
    ("harness.hil.daemon_run", ["--burst", "70,30"], "argument --burst: expected A < B"),
    ("harness.hil.daemon_run", ["--burst", "a,b"], "argument --burst: expected two numbers"),
    ("harness.hil.daemon_run", ["--burst", "-10,5"], "argument --burst: both values must be"),
    ("harness.hil.daemon_run", ["--slo-ms", "inf"], "argument --slo-ms: must be in (0, 10000]"),
    ("harness.hil.daemon_run", ["--slo-ms", "0"], "argument --slo-ms: must be in (0, 10000]"),
    ("harness.hil.daemon_run", ["--period", "inf", "--duration", "inf"],
     "argument --period: must be in (0, 3600] s"),
    ("harness.hil.daemon_run", ["--duration", "nan"], "argument --duration: must be in"),
    ("harness.hil.daemon_run", ["--outer-every", "sleep=3"],
     "argument --outer-every: expected MODE=N,... with MODE among mps-restart, green-mps"),
    ("harness.hil.daemon_run", ["--outer-every", "green-mps=0"], "argument --outer-every"),
    ("harness.hil.daemon_run", ["--outer-every", "green-mps=x"], "argument --outer-every"),
    ("harness.hil.daemon_run", ["--modes", "foo"], "argument --modes: a comma-separated list"),
    ("harness.hil.daemon_run", ["--preset", "nope"], "argument --preset: preset must be one of"),
    ("harness.hil.daemon_run", ["--model", "/nonexistent.json"],
     "argument --model: '/nonexistent.json' is not a model file the daemon takes"),
])
def test_a_bad_flag_is_refused_in_one_line_naming_it(module, args, message, tmp_path):
    out = tmp_path / "out"
    r = _run(module, ["--out", str(out), *args])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not out.exists()


def test_daemon_run_refuses_an_out_holding_a_run_of_the_same_mode(tmp_path, capsys):
    """The daemon and the burst append to their logs: a second run into the same folder was
    read back as one run with the first (and the burst timed from the first run's start)."""
    from harness.hil.daemon_run import main

    work = tmp_path / "runs" / "sleep"
    work.mkdir(parents=True)
    (work / "daemon.jsonl").write_text("{}\n")
    assert main(["--out", str(tmp_path), "--modes", "sleep,green-mps"]) == 2
    assert "already holds a run of sleep" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "--modes", "green-mps", "--dry-run"]) == 0


@pytest.mark.slow
def test_daemon_run_stopped_by_sigterm_stops_its_inference(tmp_path):
    """SIGTERM (the campaign's step limit) killed daemon_run at once: the inference, in its
    own session, kept running on the GPU, and the MPS daemon was left to the campaign's
    sweep. Now the run unwinds: the inference and the daemon are stopped, status 143."""
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"gain": -40.0, "offset": 60.0}))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "harness.hil.daemon_run", "--out", str(out), "--modes",
            "sleep", "--duration", "60", "--period", "0.5", "--slo-ms", "25", "--model",
            str(model), "--training-backend", "numpy", "--no-mps", "--training-extra",
            "--matrix-n 128 --copy-mb 0.25", "--inference-cmd",
            f"{sys.executable} {HERE / 'fake_inference.py'}"]
    p = subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    work = out / "runs" / "sleep"
    deadline = time.monotonic() + 60
    while not list(work.glob("inference-*.csv")) and time.monotonic() < deadline:
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.1)
    logs = list(work.glob("inference-*.csv"))
    assert logs, "the inference did not start"
    pid = int(logs[0].stem.split("-")[1])
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "daemon_run: stopped by SIGTERM" in err
    for _ in range(100):  # the inference is gone (not a zombie of ours: its parent was p)
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the inference outlived daemon_run")


def test_daemon_run_refuses_a_calibration_whose_values_make_no_plant(tmp_path):
    """A calibration file with a value out of range was taken by --preset; each mode then
    failed after its start-up (MPS daemon, inference) when its model was built."""
    doc = json.loads((ROOT / "docs/results/h100_calibration/calibration.json").read_text())
    doc["overrides"]["train_work_s"] = float("nan")
    bad = tmp_path / "calibration.json"
    bad.write_text(json.dumps(doc))
    r = _run("harness.hil.daemon_run", ["--dry-run", "--preset", str(bad)])
    assert r.returncode == 2, r.stderr
    assert f"argument --preset: preset {str(bad)!r}: train_work_s must be" in r.stderr
    good = ROOT / "docs/results/h100_calibration/calibration.json"
    assert _run("harness.hil.daemon_run", ["--dry-run", "--preset", str(good)]).returncode == 0


RUN = ROOT / "docs/results/h200/after_fixes/daemon_slo22_sleep/runs/sleep"


@pytest.mark.parametrize("cut", ["half", "garbage", "no-ts"])
def test_compare_refuses_a_cut_or_corrupt_daemon_log(tmp_path, capsys, cut):
    """``--from`` on a run whose daemon.jsonl was cut mid-line (a killed writer, a partial
    copy) ended in a JSONDecodeError traceback; a period record without its time, in a
    KeyError. Now one line names the file and the line, and nothing is written."""
    import shutil

    from harness.hil.daemon_run import main

    run = tmp_path / "sleep"
    shutil.copytree(RUN, run)
    log = run / "daemon.jsonl"
    text = log.read_text()
    if cut == "half":
        log.write_text(text[:len(text) // 2])
    elif cut == "garbage":
        log.write_text(text + "{not json\n")
    else:
        log.write_text(text + '{"period": 99, "mean_ms": 20.0}\n')
    out = tmp_path / "out"
    assert main(["--from", f"sleep={run}", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(log) in err[0] and "corrupt log" in err[0], err
    assert not out.exists()
    shutil.copy(RUN / "daemon.jsonl", log)  # the intact log reads
    assert main(["--from", f"sleep={run}", "--out", str(out), "--slo-ms", "22"]) == 0


def test_the_burst_figure_labels_every_line_and_keeps_its_legend_off_the_data(tmp_path,
                                                                              monkeypatch):
    """The 1.05 x SLO line (the threshold of the summary's "periods over") had no label, and
    the legend sat inside the latency panel, over the later periods' latency."""
    pytest.importorskip("matplotlib")
    import harness.hil.daemon_run as dr

    figs = []
    monkeypatch.setattr(dr, "save_figure", lambda fig, path, **kw: figs.append(fig))
    rows = dr.read_periods("sleep", RUN, 4.0)
    dr._plot(rows, 22.0, tmp_path / "x.png")
    fig = figs[0]
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["sleep", "SLO", "1.05 x SLO (over)"]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert not legend.get_window_extent(r).overlaps(ax.get_window_extent(r))
    assert legend.get_window_extent(r).x1 <= fig.bbox.x1  # inside the figure


@pytest.mark.parametrize("module, period_s, measured", [
    ("harness.hil.mps_study", 4.0, "periods measured per level"),
    ("harness.hil.spatial_study", 2.0, "steady periods measured per share"),
])
def test_the_studies_share_period_measure_and_batch_with_their_own_defaults(module, period_s,
                                                                             measured):
    """--period, --measure and --batch come from one helper (harness.args.add_study_options):
    each study keeps its defaults, and its help shows the same lines as before."""
    import argparse
    import importlib

    from harness.args import add_study_options

    ap = importlib.import_module(module)._parser()
    args = ap.parse_args([])
    assert (args.period, args.measure, args.batch) == (period_s, 3, 105)
    alone = argparse.ArgumentParser(prog="x", formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_options(alone, period_s=period_s, measured=measured)
    lines = [ln for ln in alone.format_help().splitlines() if ln.startswith("  --")]
    assert len(lines) == 3 and f"{measured}, in [1, 1000]" in "\n".join(lines)
    helps = {" ".join(ln.split()[2:]) for ln in ap.format_help().splitlines()
             if ln.startswith(("  --period", "  --measure", "  --batch"))}
    assert helps == {" ".join(ln.split()[2:]) for ln in lines}
