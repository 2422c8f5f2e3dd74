"""The daemon's ``--share-backend cpu`` as real processes: where the training goes when the
daemon stops or dies (back to its own group, workers included), a set-up that fails part-way
(undone), and one daemon per share group (a second is refused, a dead one's group is reused).
Skipped where no cgroup CPU controller is writable (the ``cpu_groups`` fixture)."""

import json
import os
import signal
import subprocess
import uuid

import pytest
from actuators._children import (
    FORKER,
    SLEEPER,
    cgroup_quota,
    cgroup_rel,
    child_pids,
    cpu_cgroup_of,
    daemon_argv,
    fork_worker,
    read_events,
    run_daemon,
    stopped_pids,
    wait_for,
)

from gpucontrol.node.actuators.cpu_share import detect_backend
from gpucontrol.node.records import release_share
from gpucontrol.node.share import CPUQuotaShare

OPEN_LOOP = ("--fixed-sleep", "0", "--share-backend", "cpu", "--sleep-method", "signal",
             "--period-s", "0.2")


def _guardian_of(daemon_pid: int) -> int | None:
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"--daemon-pid" in argv and str(daemon_pid).encode() in argv and any(
                    a.endswith(b"guardian.py") for a in argv):
                return int(name)
    return None


def _group_name() -> str:
    return f"gpucontrol-test-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("stop", ["term", "kill"])
def test_the_training_goes_back_to_its_own_group(children, cpu_groups, tmp_path, stop):
    """A training that runs in a group of its own, capped at 50 % by someone else, is back
    there -- with the worker it forked while capped -- after a SIGTERM (the daemon's shutdown)
    and after a SIGKILL (its guardian, from the state record); it never lands in the root
    group, outside that cap."""
    home = cpu_groups(quota_pct=50)
    train = children.spawn(FORKER, stdin=subprocess.PIPE, text=True)
    (home / "cgroup.procs").write_text(str(train.pid))
    home_quota = cgroup_quota(home)
    d = children.popen(daemon_argv(tmp_path, "a", "--training-pid", str(train.pid), *OPEN_LOOP,
                                   "--fixed-mps", "30", "--share-cgroup", _group_name()),
                       stdout=subprocess.PIPE, text=True)
    ready = [r for r in read_events(d.stdout, "started") if r.get("event") == "cpu_share_ready"]
    group = ready[0]["cgroup"]
    try:
        assert cpu_cgroup_of(train.pid) == cgroup_rel(detect_backend()[1] / os.path.basename(group))
        worker = fork_worker(train)
        state = json.loads((tmp_path / "a.state.json").read_text())
        assert [(o["pid"], o["cgroup"]) for o in state["share"]["origins"]] == \
            [(train.pid, str(home))]
        d.send_signal(signal.SIGTERM if stop == "term" else signal.SIGKILL)
        d.wait(20)
        assert wait_for(lambda: not os.path.exists(group), 5.0)
        assert cpu_cgroup_of(train.pid) == cgroup_rel(home)
        assert cpu_cgroup_of(worker) == cgroup_rel(home)
        assert cgroup_quota(home) == home_quota
        assert stopped_pids([train.pid, worker]) == []
    finally:
        release_share({"path": group, "backend": ready[0]["backend"], "made": True})


def test_a_second_daemon_is_refused_and_a_dead_ones_group_reused(children, cpu_groups,
                                                                  tmp_path):
    """Two daemons given one --share-cgroup: the second exits 2 with one line naming the flag
    and touches nothing (the first's cap stays, its own training stays in its group). Once the
    first is gone with its guardian (SIGKILL), the group it left is free: a new daemon uses
    it, and --resume-only on the dead one's state file returns its training and removes it."""
    name = _group_name()
    base = detect_backend()[1]
    group = base / name
    home = cpu_groups()
    t0, t1 = children.spawn(SLEEPER), children.spawn(SLEEPER)
    (home / "cgroup.procs").write_text(str(t1.pid))
    home0 = cpu_cgroup_of(t0.pid)
    d0 = children.popen(daemon_argv(tmp_path, "a", "--training-pid", str(t0.pid), *OPEN_LOOP,
                                    "--fixed-mps", "30", "--share-cgroup", name),
                        stdout=subprocess.PIPE, text=True)
    try:
        read_events(d0.stdout, "started")
        quota = cgroup_quota(group)
        second = daemon_argv(tmp_path, "b", "--training-pid", str(t1.pid), *OPEN_LOOP,
                             "--fixed-mps", "70", "--share-cgroup", name)
        out = subprocess.run(second, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, check=False)
        assert out.returncode == 2, out.stderr
        errors = [line for line in out.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and "--share-cgroup" in errors[0] \
            and "already used by another daemon" in errors[0], out.stderr
        assert cgroup_quota(group) == quota
        assert cpu_cgroup_of(t0.pid) == cgroup_rel(group)
        assert cpu_cgroup_of(t1.pid) == cgroup_rel(home)

        guardian = _guardian_of(d0.pid)
        assert guardian is not None
        os.kill(guardian, signal.SIGKILL)
        d0.kill()
        d0.wait(10)
        assert wait_for(lambda: not os.path.exists(f"/proc/{guardian}"), 5.0)
        assert group.exists() and cpu_cgroup_of(t0.pid) == cgroup_rel(group)  # left capped

        out = subprocess.run([*second, "--duration-s", "0.5"], capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL, check=False)
        assert out.returncode == 0, out.stderr
        assert any(json.loads(x).get("event") == "cpu_share_ready"
                   for x in out.stdout.splitlines())
        assert cpu_cgroup_of(t1.pid) == cgroup_rel(home)

        out = run_daemon(daemon_argv(tmp_path, "a", "--resume-only"), capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        assert json.loads(out.stdout)["share_released"] == 1, out
        assert not group.exists()
        assert cpu_cgroup_of(t0.pid) == home0
    finally:
        release_share({"path": str(group), "backend": detect_backend()[0], "made": True})


RT_CHILD = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))\n"
            "while True: time.sleep(1)")


def test_a_refused_worker_leaves_the_training_as_it_was(children, cpu_groups, tmp_path):
    """A SCHED_FIFO worker the v1 cpu controller will not move: the daemon exits 1 with one
    line naming the process and saying it undid the set-up; the training is back in its own
    group, the share group is gone and so is the state file."""
    backend, base = detect_backend()
    if backend != "cfs_quota_us" or not (base / "cpu.rt_runtime_us").exists():
        pytest.skip("needs the v1 cpu controller with real-time group scheduling")
    home = cpu_groups(quota_pct=50)
    train = children.spawn(RT_CHILD)

    def fifo_child():
        for c in child_pids(train.pid):
            try:
                if os.sched_getscheduler(c) == os.SCHED_FIFO:
                    return c
            except OSError:
                pass
        return None

    rt = wait_for(fifo_child, 5.0)
    if not rt:
        pytest.skip("cannot make a SCHED_FIFO process here")
    (home / "cgroup.procs").write_text(str(train.pid))
    name = _group_name()
    out = run_daemon(daemon_argv(tmp_path, "a", "--training-pid", str(train.pid),
                                 *OPEN_LOOP, "--fixed-mps", "20", "--share-cgroup", name),
                     capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                     check=False)
    assert out.returncode == 1, out.stderr
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and f"cannot move pid {rt}" in errors[0] \
        and "undone" in errors[0], out.stderr
    assert not (base / name).exists()
    assert cpu_cgroup_of(train.pid) == cgroup_rel(home)
    assert not (tmp_path / "a.state.json").exists()


def test_a_failed_state_write_withdraws_the_share(children, cpu_groups):
    """The daemon's state write fails while the share is set up: the error says the set-up
    was undone, no backend is left, the record is withdrawn and the training never left its
    own group."""
    home = cpu_groups(quota_pct=50)
    train = children.spawn(SLEEPER)
    (home / "cgroup.procs").write_text(str(train.pid))
    calls = []

    def record(**recs):
        calls.append(recs)
        if recs["share"] and recs["share"]["origins"]:  # the write-ahead before the move
            raise OSError(28, "No space left on device")

    name = _group_name()
    wiring = CPUQuotaShare([])
    with pytest.raises(OSError, match=r"--share-backend cpu: .*No space.*undone"):
        wiring.cap([train.pid], cgroup=name, initial_pct=30.0, record=record)
    assert wiring.backend is None
    assert calls[-1] == {"share": None}
    assert not (detect_backend()[1] / name).exists()
    assert cpu_cgroup_of(train.pid) == cgroup_rel(home)
