"""Process identity and the security rules of the actuators (real processes)."""

import os
import signal
import time

import pytest
from _children import SLEEPER, state, wait_state

from gpucontrol.node.actuators import ProcessHandle, SignalDutyCycler, TargetRefused, check_target
from gpucontrol.node.actuators.procs import ancestors, descendants, read_stat
from gpucontrol.node.guardian import resume_targets


@pytest.mark.parametrize("pid", [0, 1, -5])
def test_refuses_init_and_invalid(pid):
    with pytest.raises(TargetRefused):
        check_target(pid)


def test_refuses_itself_and_ancestors():
    with pytest.raises(TargetRefused, match="ourselves"):
        check_target(os.getpid())
    for pid in ancestors(os.getpid())[:-1]:  # the last one is init
        with pytest.raises(TargetRefused, match="ancestor"):
            check_target(pid)


def test_refuses_kernel_threads_and_missing():
    with pytest.raises(TargetRefused):
        check_target(2)  # kthreadd
    with pytest.raises(TargetRefused, match="no such process"):
        check_target(4_000_000)
    with pytest.raises(TargetRefused):
        check_target(True)  # a bool is not a pid


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user")
def test_other_users_need_root_and_their_uid_given(children):
    p = children.popen(["sleep", "60"], user=65534, group=65534)
    assert wait_state(p.pid, {"S", "R"})
    time.sleep(0.05)  # let the uid change settle
    with pytest.raises(TargetRefused, match="only root"):
        check_target(p.pid)
    with pytest.raises(TargetRefused):
        SignalDutyCycler([p.pid])
    with pytest.raises(TargetRefused, match="runs as uid 65534"):  # another uid given
        check_target(p.pid, uids={0, 65533})
    assert check_target(p.pid, uids={65534}).pid == p.pid
    me = children.spawn(SLEEPER)  # a root process, when the set names only another uid
    with pytest.raises(TargetRefused, match="runs as uid 0"):
        check_target(me.pid, uids={65534})


def test_handle_signals_only_its_process(children):
    p = children.spawn(SLEEPER)
    h = ProcessHandle.open(p.pid)
    try:
        assert h.signal(signal.SIGSTOP)
        assert wait_state(p.pid, {"T"})
        assert h.state() == "T"
        assert h.signal(signal.SIGCONT)
        assert wait_state(p.pid, {"S", "R"})
        p.kill()
        p.wait()
        assert not h.alive()
        assert not h.signal(signal.SIGSTOP)  # gone: False, no exception
        assert h.state() is None
    finally:
        h.close()
    assert not h.signal(signal.SIGCONT)  # closed handle


def _recycle(pid, children, tries=50):
    """Make the kernel hand ``pid`` to a new child (via ns_last_pid); None if impossible."""
    for _ in range(tries):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(pid - 1))
        except OSError:
            return None
        q = children.spawn(SLEEPER)
        if q.pid == pid:
            return q
        q.kill()
        q.wait()
    return None


def test_recycled_pid_is_never_signaled(children):
    victim = children.spawn(SLEEPER)
    pid = victim.pid
    h = ProcessHandle.open(pid)
    start = h.start_ticks
    cyc = SignalDutyCycler([pid], run_quantum_s=0.01, sleep_s=0.05, refresh_s=0.05)
    try:
        victim.kill()
        victim.wait()
        new = _recycle(pid, children)
        if new is None:
            pytest.skip("cannot force PID reuse here (ns_last_pid not writable)")
        assert not h.signal(signal.SIGSTOP)
        # the start time (10 ms ticks) may coincide; with pidfs the inode tells them apart
        if read_stat(pid).start_ticks != start or h.ino is not None:
            with pytest.raises(ProcessLookupError):
                ProcessHandle.open(pid, expected_start=start, expected_ino=h.ino)
            assert resume_targets([h.identity()])["skipped"] == 1
        cyc.start()
        cyc.pause_now()  # the cycler's handle is dead: the new process is untouched
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            assert state(new.pid) != "T"
            time.sleep(0.005)
    finally:
        cyc.close()
        h.close()


def test_descendants_found_breadth_first(children):
    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(c.pid, flush=True)\n"
            "time.sleep(60)\n")
    import subprocess

    p = children.spawn(code, stdout=subprocess.PIPE, text=True)
    grandchild = int(p.stdout.readline())
    assert descendants([p.pid]) == [grandchild]
    assert descendants([grandchild]) == []
