"""Skip ``@pytest.mark.gpu`` tests in this folder when CuPy or a CUDA device is missing.

Uses ``pytest_runtest_setup``, which pytest calls only for items under this conftest's
folder, so the rule stays local to the GPU harness tests. The device check runs once, lazily
(only when a ``gpu`` test is about to run), so collecting the suite never imports cupy.
"""

from __future__ import annotations

import functools
import sys
import textwrap

import pytest

from harness.hil.mps_session import LOG_ENV, PCT_ENV, PIPE_ENV


@functools.lru_cache(maxsize=1)
def gpu_skip_reason() -> str | None:
    """None when CuPy is importable and sees at least one CUDA device, else why not."""
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not installed ({exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no usable CUDA device ({type(exc).__name__}: {exc})"
    if n < 1:
        return "no CUDA device"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None:
        reason = gpu_skip_reason()
        if reason is not None:
            pytest.skip(f"GPU test skipped: {reason}")


# ---- a fake nvidia-cuda-mps-control for the CPU tests ------------------------------------------
FAKE = textwrap.dedent("""\
    #!{python}
    import os, sys
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    log = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
    control = os.path.join(pipe, "control")
    def record(line):
        with open(os.environ["FAKE_MPS_RECORD"], "a") as f:
            f.write(line + "\\n")
    if sys.argv[1:] == ["-d"]:
        record(f"start {{pipe}} {{log}}")
        if os.environ.get("FAKE_MPS_NO_PIPE") != "1":
            open(control, "w").close()
        if os.environ.get("FAKE_MPS_START_SLEEP"):  # `-d` that does not return in time
            import time
            time.sleep(float(os.environ["FAKE_MPS_START_SLEEP"]))
        sys.exit(int(os.environ.get("FAKE_MPS_START_RC", "0")))
    cmd = sys.stdin.read().strip()
    record(f"cmd {{cmd}}")
    if not os.path.exists(control):
        print("cannot connect to the control daemon", file=sys.stderr)
        sys.exit(1)
    if cmd == "get_server_list":
        print(os.environ.get("FAKE_MPS_SERVERS", ""))
    elif cmd == "quit":
        if os.environ.get("FAKE_MPS_QUIT_RC"):  # a daemon that does not take its quit
            print("quit refused", file=sys.stderr)
            sys.exit(int(os.environ["FAKE_MPS_QUIT_RC"]))
        os.remove(control)
    """)


@pytest.fixture
def fake_mps(tmp_path, monkeypatch):
    """``(binary, record_file)``: a fake MPS control binary that records what it was asked."""
    exe = tmp_path / "nvidia-cuda-mps-control"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(0o755)
    record = tmp_path / "record.txt"
    record.touch()
    monkeypatch.setenv("FAKE_MPS_RECORD", str(record))
    for k in ("FAKE_MPS_NO_PIPE", "FAKE_MPS_START_RC", "FAKE_MPS_START_SLEEP", "FAKE_MPS_QUIT_RC",
              PIPE_ENV, LOG_ENV, PCT_ENV):
        monkeypatch.delenv(k, raising=False)
    return str(exe), record
