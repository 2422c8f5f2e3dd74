"""The cgroup CPU-share actuator: quota arithmetic everywhere; on a host whose cgroup CPU
controller we may write (v2 cpu.max or v1 cpu.cfs_quota_us), a real capped process."""

import errno
import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from _children import (
    FORKER,
    SLEEPER,
    cgroup_quota,
    cgroup_rel,
    child_pids,
    cpu_cgroup_of,
    cpu_controller_writable,
    fork_worker,
    wait_for,
)

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


# ------------------------------------------------------------------ where processes go back
def _spawn_forker(children):
    return children.spawn(FORKER, stdin=subprocess.PIPE, text=True)


def test_close_returns_each_process_to_the_group_it_came_from(children, cpu_groups):
    """A training in a group of its own (capped at 50 % by someone else) goes back there when
    the share is closed -- not to the share group's parent, where it would escape that cap --
    and so does a worker it forked while capped."""
    home = cpu_groups(quota_pct=50)
    p = _spawn_forker(children)
    (home / "cgroup.procs").write_text(str(p.pid))
    home_quota = cgroup_quota(home)
    share = CpuShare([p.pid], name=f"gpucontrol-test-{uuid.uuid4().hex[:8]}", share_pct=10.0)
    try:
        assert cpu_cgroup_of(p.pid) == cgroup_rel(share.path)
        rec = share.record()
        assert [(o["pid"], o["cgroup"]) for o in rec["origins"]] == [(p.pid, str(home))]
        worker = fork_worker(p)  # forked inside the share group: not in the record
        assert cpu_cgroup_of(worker) == cgroup_rel(share.path)
    finally:
        share.close()
    assert not share.path.exists()
    assert cpu_cgroup_of(p.pid) == cgroup_rel(home)
    assert cpu_cgroup_of(worker) == cgroup_rel(home)  # its parent's group
    assert cgroup_quota(home) == home_quota  # that cap untouched


def test_crash_clean_up_returns_processes_home_or_to_the_parent(children, cpu_groups):
    """The guardian's path (the state record, no close()): each process back in its own group;
    one whose group was removed meanwhile goes to the share group's parent."""
    from gpucontrol.node.records import cleanup_owned

    homes = [cpu_groups(quota_pct=50), cpu_groups()]
    procs = [_spawn_forker(children) for _ in homes]
    for h, p in zip(homes, procs):
        (h / "cgroup.procs").write_text(str(p.pid))
    share = CpuShare([p.pid for p in procs], name=f"gpucontrol-test-{uuid.uuid4().hex[:8]}",
                     share_pct=10.0)
    try:
        worker = fork_worker(procs[0])
        homes[1].rmdir()  # empty now: its process sits in the share group
        out = cleanup_owned({"share": json.loads(json.dumps(share.record()))})  # no close()
        assert out["share_released"] == 1
    finally:
        if share.path.exists():
            share.close()
    assert not share.path.exists()
    assert cpu_cgroup_of(procs[0].pid) == cgroup_rel(homes[0])
    assert cpu_cgroup_of(worker) == cgroup_rel(homes[0])
    assert cpu_cgroup_of(procs[1].pid) == cgroup_rel(share.path.parent)


@pytest.mark.parametrize("fail_at", [1, 2])
def test_a_failed_state_write_undoes_the_set_up(children, cpu_groups, fail_at):
    """The record cannot be written (1: once the group exists; 2: the write-ahead of the
    processes' groups): the error comes out, the group made is gone, the training never left
    its own group."""
    home = cpu_groups(quota_pct=50)
    p = children.spawn(SLEEPER)
    (home / "cgroup.procs").write_text(str(p.pid))
    calls = []

    def record(rec):
        calls.append(rec)
        if len(calls) == fail_at:
            raise OSError(28, "No space left on device")

    name = f"gpucontrol-test-{uuid.uuid4().hex[:8]}"
    with pytest.raises(OSError, match="No space"):
        CpuShare([p.pid], name=name, share_pct=10.0, on_record=record)
    assert calls[0]["made"] and calls[0]["origins"] == []
    assert not (detect_backend()[1] / name).exists()
    assert cpu_cgroup_of(p.pid) == cgroup_rel(home)


def test_a_refused_process_undoes_the_set_up(children, cpu_groups):
    """A SCHED_FIFO worker the v1 cpu controller refuses (a group without a real-time budget):
    the training's main process, moved just before, goes back to its own group, the group is
    removed and the error names the process and why."""
    backend, base = detect_backend()
    if backend != "cfs_quota_us" or not (base / "cpu.rt_runtime_us").exists():
        pytest.skip("needs the v1 cpu controller with real-time group scheduling")
    home = cpu_groups()
    p = children.spawn(RT_CHILD)
    rt = wait_for(lambda: [c for c in child_pids(p.pid) if _fifo(c)], 5.0)
    if not rt:
        pytest.skip("cannot make a SCHED_FIFO process here")
    (home / "cgroup.procs").write_text(str(p.pid))  # the worker stays in the root group
    rt_home = cpu_cgroup_of(rt[0])
    name = f"gpucontrol-test-{uuid.uuid4().hex[:8]}"
    with pytest.raises(OSError, match=rf"cannot move pid {rt[0]} .*real-time") as exc:
        CpuShare([p.pid], name=name, share_pct=10.0)
    assert exc.value.errno == errno.EINVAL
    assert not (base / name).exists()
    assert cpu_cgroup_of(p.pid) == cgroup_rel(home)
    assert cpu_cgroup_of(rt[0]) == rt_home


RT_CHILD = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))\n"
            "while True: time.sleep(1)")


def _fifo(pid: int) -> bool:
    try:
        return os.sched_getscheduler(pid) == os.SCHED_FIFO
    except OSError:
        return False


def test_crash_clean_up_leaves_a_group_another_daemon_has_claimed(children, tmp_path):
    """A dead daemon's record names its lock file: while another process holds that lock (a
    daemon that took the group over), the clean-up leaves the group -- its cap and members --
    alone."""
    from gpucontrol.node.locks import FileLock
    from gpucontrol.node.records import release_share

    if not cpu_controller_writable():
        pytest.skip("no writable cgroup CPU controller here")
    p = children.spawn(SLEEPER)
    share = CpuShare([p.pid], name=f"gpucontrol-test-{uuid.uuid4().hex[:8]}", share_pct=10.0)
    lock = FileLock(tmp_path / "share.lock").acquire()
    try:
        rec = {**share.record(), "lock": lock.path}
        assert release_share(rec) is False
        assert share.read_quota_us() is not None and p.pid in share.members()
        lock.release()
        assert release_share(rec) is True
        assert not share.path.exists()
    finally:
        lock.release()
        if share.path.exists():
            share.close()
