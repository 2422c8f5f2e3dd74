"""SIGTERM to a ``gpucontrol`` command running the CPU plant cleans up as Ctrl-C does: the
services and the training's loader worker are stopped (none left running or stopped), the
cgroups and the temporary folders removed, one line on stderr, exit status 143. A few
seconds each: the signal comes once the services are up and the plant is stepping."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="needs Linux /proc to find the services")


def _children(pid):
    """PIDs whose parent is ``pid``."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _descendants(pid):
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _alive(pid):
    """The process exists and is not a zombie (running, sleeping or stopped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cgroups(pid):
    """The CPU plant's cgroups of the process ``pid`` (v1 cpu hierarchy or v2)."""
    name = f"gpucontrol-cpuplant-{pid}"
    return [p for p in (Path("/sys/fs/cgroup/cpu") / name, Path("/sys/fs/cgroup") / name)
            if p.exists()]


# Runs far longer than the test waits (up to 60 s for the services, then 1.5 s), so the
# SIGTERM always lands mid-run: with 40 periods, a loaded machine's slow start once let the
# identification finish first (exit 0, "no model.json written")
COMMANDS = {
    "identify": ["identify", "--plant", "cpu", "--periods", "400", "--period", "1",
                 "--mps", "100"],
    "demo": ["demo", "--plant", "cpu", "--period", "1", "--duration", "400"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_sigterm_stops_the_services_and_removes_cgroups_and_temp_folders(tmp_path, command):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    env = dict(os.environ, TMPDIR=str(tmp),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *COMMANDS[command],
                             "--out", str(out), "--no-progress"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    services: list[int] = []
    try:
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end and proc.poll() is None:
            services = _children(proc.pid)
            progress = list(tmp.glob("gpucontrol-cpu-*/training.progress")) + list(
                out.glob(".cpu_demo.partial-*/services/training.progress"))  # staged
            if len(services) >= 2 and progress and progress[0].read_text().strip():
                break
            time.sleep(0.1)
        assert proc.poll() is None and len(services) >= 2, proc.communicate()
        time.sleep(1.5)  # the plant is stepping: the duty cycler pauses the training
        services = _descendants(proc.pid)  # the services and the training's loader worker
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in services:
            if _alive(pid):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 143, stderr
    lines = stderr.strip().splitlines()
    # on the same line: where the stopped run's partial output is, or that it wrote nothing;
    # the results folder itself is not made
    assert lines[-1].startswith(f"gpucontrol {command}: terminated by SIGTERM; stopped what it "
                                f"had started; "), stderr
    folder = out / ("identify" if command == "identify" else "cpu_demo")
    if command == "identify":
        assert lines[-1].endswith(f"nothing written to {folder}"), stderr
    else:
        assert f"{folder} not updated: the stopped run's partial output is in " \
               f"{out}/.cpu_demo.partial-" in lines[-1], stderr
    assert not folder.exists()
    assert "Traceback" not in stderr
    assert [pid for pid in services if _alive(pid)] == []
    assert _cgroups(proc.pid) == []
    assert list(tmp.iterdir()) == []  # the plant's and the daemon's temporary folders


def _caught(pid):
    """The signals ``pid`` has a handler for (/proc/PID/status SigCgt)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            mask = int(line.split()[1], 16)
            return {s for s in range(1, 65) if mask >> (s - 1) & 1}
    return set()


def test_the_loader_worker_ends_on_sigterm(tmp_path):
    """The training's loader worker is forked after the training installs its SIGTERM handler
    (which only sets the training's stop flag): it must not keep it, or terminate() leaves it
    running and every stop of the plant waits out the 5 s join (seen: CPUPlant.close took
    5.0 s, each CPU-plant test and demo paid it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    progress = tmp_path / "p"
    proc = subprocess.Popen([sys.executable, "-m", "harness.hil.cpu.training", "--batch", "16",
                             "--sizes", "8,8,2", "--progress-file", str(progress)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        t_end = time.monotonic() + 60
        workers = []
        while time.monotonic() < t_end and not (workers and progress.exists()):
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert len(workers) == 1, proc.stderr
        assert signal.SIGTERM in _caught(proc.pid)      # the training stops on its own terms
        assert signal.SIGTERM not in _caught(workers[0])  # the worker just ends
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not _alive(workers[0])
