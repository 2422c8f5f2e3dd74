"""The MPS lifecycle against a fake ``nvidia-cuda-mps-control``: private directories, ``quit``
always sent, sleep-only fallback with a clear message."""

import io
import os
from pathlib import Path

import pytest

from harness.hil.mps_session import (
    LOG_ENV,
    PCT_ENV,
    PIPE_ENV,
    client_env,
    mps_session,
    validate_pct,
)


def lines(record: Path) -> list[str]:
    return record.read_text().splitlines()


def test_session_uses_private_dirs_and_quits(fake_mps):
    exe, record = fake_mps
    with mps_session(binary=exe, stream=None) as mps:
        assert mps is not None
        pipe, log = Path(mps.pipe_dir), Path(mps.log_dir)
        assert pipe.parent == log.parent and pipe.parent.name.startswith("gpucontrol-mps-")
        assert (pipe / "control").exists()
        assert oct(pipe.parent.stat().st_mode & 0o777) == "0o700"
        assert mps.server_list() == []
    start = lines(record)[0].split()
    assert start == ["start", str(pipe), str(log)]
    assert lines(record)[-1] == "cmd quit"
    assert not pipe.parent.exists()  # private directory removed


def test_quit_is_sent_when_the_experiment_fails(fake_mps):
    exe, record = fake_mps
    with pytest.raises(RuntimeError, match="boom"), mps_session(binary=exe, stream=None) as mps:
        root = Path(mps.pipe_dir).parent
        raise RuntimeError("boom")
    assert lines(record)[-1] == "cmd quit"
    assert not root.exists()


def test_missing_binary_falls_back_to_sleep_only_with_a_message(tmp_path):
    out = io.StringIO()
    with mps_session(binary=str(tmp_path / "nvidia-cuda-mps-control"), stream=out) as mps:
        assert mps is None
    msg = out.getvalue()
    assert "MPS unavailable" in msg and "sleep-only" in msg


def test_disabled_session_yields_none_silently(fake_mps):
    exe, record = fake_mps
    out = io.StringIO()
    with mps_session(False, binary=exe, stream=out) as mps:
        assert mps is None
    assert out.getvalue() == "" and lines(record) == []


def test_failed_start_falls_back_and_cleans_up(fake_mps, monkeypatch):
    exe, record = fake_mps
    monkeypatch.setenv("FAKE_MPS_START_RC", "1")
    out = io.StringIO()
    with mps_session(binary=exe, stream=out) as mps:
        assert mps is None
    assert "did not start" in out.getvalue()
    pipe_dir = lines(record)[0].split()[1]
    assert not Path(pipe_dir).parent.exists()


def test_daemon_that_never_answers_is_still_told_to_quit(fake_mps, monkeypatch):
    exe, record = fake_mps
    monkeypatch.setenv("FAKE_MPS_NO_PIPE", "1")
    out = io.StringIO()
    # each command of the fake is a Python start-up: 0.5 s per command was too short on a
    # loaded machine for "quit" to be recorded before its timeout killed it
    with mps_session(binary=exe, stream=out, timeout_s=2.0) as mps:
        assert mps is None
    assert "cmd quit" in lines(record)  # attempted even though start-up failed half-way
    assert "did not start" in out.getvalue()
    assert "warning" in out.getvalue()  # the failed quit is reported with the manual command


def test_client_env_joins_the_private_daemon(fake_mps):
    exe, _ = fake_mps
    with mps_session(binary=exe, stream=None) as mps:
        env = client_env(mps, 30, base={"PATH": "/bin", PCT_ENV: "99"})
        assert env == {"PATH": "/bin", PIPE_ENV: mps.pipe_dir, LOG_ENV: mps.log_dir,
                       PCT_ENV: "30"}
        assert PCT_ENV not in client_env(mps, None, base={PCT_ENV: "99"})


def test_client_env_without_mps_strips_mps_variables():
    base = {PIPE_ENV: "/tmp/nvidia-mps", LOG_ENV: "/x", PCT_ENV: "20", "HOME": "/root"}
    assert client_env(None, 50, base=base) == {"HOME": "/root"}


@pytest.mark.parametrize("pct", [0, 0.5, 100.5, -3])
def test_validate_pct_rejects(pct):
    with pytest.raises(ValueError, match="mps_pct"):
        validate_pct(pct)


@pytest.mark.parametrize("pct", [1, 30, 100])
def test_validate_pct_accepts(pct):
    assert validate_pct(pct) == float(pct)


def test_nothing_touches_gpu_settings():
    """The harness never calls nvidia-smi (compute mode, clocks, power limits, MIG, reset)."""
    root = Path(__file__).resolve().parents[3] / "harness" / "gpu"
    text = "\n".join(p.read_text() for p in root.glob("*.py"))
    for forbidden in ("nvidia-smi", "nvmlDeviceSetComputeMode", "nvmlDeviceSetApplicationsClocks",
                      "nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetMigMode",
                      "nvmlDeviceResetGpuLockedClocks", "--gpu-reset"):
        assert forbidden not in text, forbidden
    assert os.path.isdir(root)


def test_a_refused_quit_keeps_the_pipe_the_warning_names(fake_mps, monkeypatch, tmp_path):
    """A ``quit`` that failed removed the private directories all the same: the daemon, if
    still up, could no longer be told to quit (the warning's command named a deleted pipe
    directory, and the campaign's sweep found nothing)."""
    exe, record = fake_mps
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's daemons only
    monkeypatch.setenv("FAKE_MPS_QUIT_RC", "1")
    out = io.StringIO()
    with mps_session(binary=exe, stream=out, timeout_s=5.0) as mps:
        pipe = Path(mps.pipe_dir)
    assert lines(record)[-1] == "cmd quit"
    assert f"{PIPE_ENV}={pipe}" in out.getvalue()
    assert (pipe / "control").exists()  # still there: the command in the warning works
    monkeypatch.delenv("FAKE_MPS_QUIT_RC")
    from harness.hil.campaign import quit_leftover_mps

    assert pipe.parent.parent == tmp_path
    assert quit_leftover_mps(str(tmp_path), binary=exe) == [str(pipe)]
    assert not (pipe / "control").exists()


def test_a_start_that_times_out_is_still_told_to_quit(fake_mps, monkeypatch):
    """``-d`` past its timeout left ``started`` false, so no ``quit`` was sent and the private
    directories of a daemon that may be up were removed."""
    exe, record = fake_mps
    monkeypatch.setenv("FAKE_MPS_START_SLEEP", "5")
    out = io.StringIO()
    with mps_session(binary=exe, stream=out, timeout_s=1.5) as mps:
        assert mps is None
    assert "did not return within" in out.getvalue()
    assert "cmd quit" in lines(record)
    pipe = Path(lines(record)[0].split()[1])
    assert not pipe.parent.exists()  # quit taken: the directories go
