"""The cgroup CPU-share actuator: quota arithmetic everywhere; on a host whose cgroup CPU
controller we may write (v2 cpu.max or v1 cpu.cfs_quota_us), a real capped process."""

import os
import subprocess
import sys
import time
import uuid

import pytest
from _children import cpu_controller_writable

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.actuators.cpu_share import CpuShare, detect_backend, quota_for


def test_quota_arithmetic_and_bounds():
    assert quota_for(50.0, ncpus=2) == (100_000, 100_000)
    assert quota_for(12.5, ncpus=4, period_us=200_000) == (100_000, 200_000)
    assert quota_for(0.01, ncpus=1)[0] == 1000  # the kernel's minimum quota
    with pytest.raises(ConfigurationError, match="share_pct"):
        quota_for(150.0)
    with pytest.raises(ConfigurationError, match="period_us"):
        quota_for(50.0, period_us=10)


def test_no_controller_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigurationError, match="no writable cgroup CPU controller"):
        detect_backend(tmp_path)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not cpu_controller_writable(), reason="no writable cgroup CPU controller here")
def test_caps_a_spinning_process_without_restart():
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    share = None
    try:
        share = CpuShare([p.pid], name=f"gpucontrol-test-{uuid.uuid4().hex[:8]}", ncpus=1)
        assert share.backend in ("cpu.max", "cfs_quota_us")
        assert p.pid in share.members()
        assert share.granularity_pct == pytest.approx(100.0 / 100_000)
        dt = share.set_share_pct(10.0)
        assert 0 < dt < 1.0  # one write and its read-back (microseconds; benchmarked)
        assert share.read_quota_us() == 10_000
        c0, t0 = _cpu_s(p.pid), time.monotonic()
        time.sleep(1.0)
        used = (_cpu_s(p.pid) - c0) / (time.monotonic() - t0)
        assert used < 0.2  # capped at 10 % of one CPU (tick accounting slack)
        assert share.throttled_s() > 0
        share.set_share_pct(100.0)
        assert share.read_quota_us() is None
        assert p.poll() is None  # same process, no restart
    finally:
        if share is not None:
            share.close()
            assert not share.path.exists()
        p.kill()
        p.wait()


@pytest.mark.skipif(not cpu_controller_writable(), reason="no writable cgroup CPU controller here")
def test_crash_clean_up_lifts_the_cap_from_the_state_record():
    """The daemon records the group it capped; after a crash the guardian (or
    --resume-only, or the next daemon) lifts the cap, moves the training back to the parent
    group and removes the group the daemon made."""
    from gpucontrol.node.records import cleanup_owned

    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    share = None
    try:
        share = CpuShare([p.pid], name=f"gpucontrol-test-{uuid.uuid4().hex[:8]}", ncpus=1,
                         share_pct=10.0)
        assert share.read_quota_us() == 10_000
        out = cleanup_owned({"share": share.record()})  # no close(): the daemon died
        assert out["share_released"] == 1
        assert not share.path.exists()  # made by the daemon: removed once empty
        # no longer capped: back in the parent group (a CPU-rate check here would measure the
        # machine's other load, not the cap)
        parent_procs = share._procs_file(share.path.parent).read_text().split()
        assert str(p.pid) in parent_procs
    finally:
        if share is not None and share.path.exists():
            share.close()
        p.kill()
        p.wait()
