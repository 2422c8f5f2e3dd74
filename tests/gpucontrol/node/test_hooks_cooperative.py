"""The cooperative hook: the training loop reads the commanded sleep from a shared file."""

import mmap
import os
import time

import pytest

from gpucontrol.node import hooks
from gpucontrol.node.hooks import (
    SIZE,
    HookReader,
    HookWriter,
    after_iteration,
    clear_hook_file,
    iteration,
    notify_ready,
)
from gpucontrol.node.monitor import LatencyMonitor


@pytest.fixture(autouse=True)
def _fresh_hook_state(monkeypatch):
    monkeypatch.setattr(hooks, "_readers", {})
    monkeypatch.setattr(hooks, "_last_end", {})
    monkeypatch.delenv("GPUCONTROL_SOCKET", raising=False)
    monkeypatch.delenv("GPUCONTROL_READY_FD", raising=False)
    monkeypatch.delenv("GPUCONTROL_READY_PID", raising=False)


@pytest.fixture
def writer(tmp_path):
    w = HookWriter(tmp_path / "gpu0.hook", stale_after_s=5.0, max_sleep_s=2.0)
    yield w
    w.close()


def test_round_trip_and_private_mode(writer):
    assert os.stat(writer.path).st_mode & 0o777 == 0o600
    assert os.path.getsize(writer.path) == SIZE
    r = HookReader(writer.path)
    assert r.sleep_s() == 0.0
    writer.set_sleep(0.125)
    st = r.read()
    assert (st.sleep_s, st.active, st.fresh, st.daemon_pid) == (0.125, True, True, os.getpid())
    seq = st.seq
    writer.beat()
    assert r.read().seq == seq + 1


def test_bounds_are_enforced(writer):
    for bad in (-0.1, 2.5, float("nan")):
        with pytest.raises(ValueError, match="sleep_s"):
            writer.set_sleep(bad)
    with pytest.raises(ValueError):
        HookWriter(writer.path + "2", stale_after_s=0)


def test_stale_heartbeat_means_no_sleep(tmp_path):
    w = HookWriter(tmp_path / "h", stale_after_s=0.1)
    try:
        w.set_sleep(0.5)
        r = HookReader(w.path)
        assert r.sleep_s() == 0.5
        time.sleep(0.2)
        st = r.read()
        assert not st.fresh and st.effective_sleep_s == 0.0
        w.beat()
        assert r.sleep_s() == 0.5
    finally:
        w.close()


def test_missing_malformed_or_unsafe_files_mean_no_sleep(tmp_path, writer):
    assert HookReader(tmp_path / "absent").sleep_s() == 0.0
    junk = tmp_path / "junk"
    junk.write_bytes(b"x" * SIZE)
    assert HookReader(junk).sleep_s() == 0.0
    short = tmp_path / "short"
    short.write_bytes(b"GPUCHOOK")
    assert HookReader(short).sleep_s() == 0.0
    writer.set_sleep(1.0)
    os.chmod(writer.path, 0o666)  # another user could plant a sleep
    assert HookReader(writer.path).sleep_s() == 0.0
    os.chmod(writer.path, 0o600)
    assert HookReader(writer.path).sleep_s() == 1.0


def test_torn_record_is_rejected(writer):
    writer.set_sleep(0.3)
    with open(writer.path, "r+b") as f, mmap.mmap(f.fileno(), SIZE) as m:
        m[24] ^= 0xFF  # flip a byte of sleep_s without fixing the CRC
    assert HookReader(writer.path).read().sleep_s == 0.0


def test_reader_follows_a_restarted_daemon(tmp_path, monkeypatch):
    monkeypatch.setattr(HookReader, "RECHECK_S", 0.0)
    path = tmp_path / "gpu0.hook"
    w1 = HookWriter(path)
    w1.set_sleep(0.2)
    r = HookReader(path)
    assert r.sleep_s() == 0.2
    w1.close(unlink=False)  # the old daemon went away (sleep zeroed in place)
    assert r.sleep_s() == 0.0
    w2 = HookWriter(path)  # a new one replaces the file
    w2.set_sleep(0.4)
    assert r.sleep_s() == 0.4
    w2.close()
    assert not path.exists()


def test_clear_hook_file(writer, tmp_path):
    writer.set_sleep(0.7)
    assert clear_hook_file(writer.path)
    st = HookReader(writer.path).read()
    assert st.sleep_s == 0.0 and not st.active
    assert not clear_hook_file(tmp_path / "absent")
    other = tmp_path / "other"
    other.write_bytes(b"\0" * SIZE)
    assert not clear_hook_file(other)


def test_after_iteration_sleeps_the_commanded_time(writer):
    writer.set_sleep(0.05)
    t0 = time.monotonic()
    slept = [after_iteration(writer.path) for _ in range(4)]
    elapsed = time.monotonic() - t0
    assert slept == [0.05] * 4
    assert 0.2 <= elapsed < 2.0  # at least the commanded time; a loaded machine adds more
    writer.set_sleep(0.0)
    assert after_iteration(writer.path) == 0.0


def test_context_manager_sleeps_even_when_the_step_raises(writer):
    writer.set_sleep(0.05)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError), iteration(writer.path):
        raise RuntimeError("step failed")
    assert time.monotonic() - t0 >= 0.05
    with iteration(writer.path):
        pass


def test_no_daemon_never_raises_never_sleeps(tmp_path, monkeypatch):
    slept = []
    monkeypatch.setattr(hooks.time, "sleep", slept.append)  # any sleep at all is the bug
    t0 = time.monotonic()
    assert after_iteration(tmp_path / "nothing") == 0.0
    assert slept == []
    assert time.monotonic() - t0 < 1.0  # nor blocks on anything (a budget a loaded CI meets)


def test_ready_notification_once(monkeypatch, writer):
    r, w = os.pipe()
    monkeypatch.setenv("GPUCONTROL_READY_FD", str(w))
    monkeypatch.setenv("GPUCONTROL_READY_PID", str(os.getpid()))
    after_iteration(writer.path)
    assert os.read(r, 1) == b"R"
    assert os.read(r, 1) == b""  # the write end was closed
    assert "GPUCONTROL_READY_FD" not in os.environ
    assert "GPUCONTROL_READY_PID" not in os.environ
    assert notify_ready() is False
    os.close(r)


@pytest.mark.parametrize("case", ["other_pid", "no_pid", "regular_file"])
def test_an_inherited_ready_descriptor_is_left_alone(monkeypatch, tmp_path, case):
    # a worker started by a launcher inherits the variables; the number may be its own file
    path = tmp_path / "checkpoint.txt"
    with open(path, "w") as f:
        monkeypatch.setenv("GPUCONTROL_READY_FD", str(f.fileno()))
        if case == "other_pid":
            monkeypatch.setenv("GPUCONTROL_READY_PID", str(os.getppid()))
        elif case == "regular_file":
            monkeypatch.setenv("GPUCONTROL_READY_PID", str(os.getpid()))
        assert notify_ready() is False
        os.fstat(f.fileno())  # still open
        f.write("data")
    assert path.read_text() == "data"
    assert "GPUCONTROL_READY_FD" not in os.environ
    assert "GPUCONTROL_READY_PID" not in os.environ


def test_a_pipe_named_for_another_process_is_not_signalled(monkeypatch):
    r, w = os.pipe()
    try:
        monkeypatch.setenv("GPUCONTROL_READY_FD", str(w))
        monkeypatch.setenv("GPUCONTROL_READY_PID", str(os.getpid() + 1))
        assert notify_ready() is False
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 1)  # nothing written, and the write end is still open
        os.fstat(w)
    finally:
        os.close(r)
        os.close(w)


def test_iteration_times_reach_the_daemon(monkeypatch, writer, tmp_path):
    from actuators._children import wait_for

    mon = LatencyMonitor(tmp_path / "m.sock").start()
    try:
        monkeypatch.setenv("GPUCONTROL_SOCKET", mon.path)
        ends = []
        for _ in range(4):
            time.sleep(0.02)
            after_iteration(writer.path)
            ends.append(time.monotonic())
        assert wait_for(lambda: mon._it_n >= 3, 10.0)  # the monitor thread has them all
        s = mon.collect()
        assert s.iter_count == 3 and s.count == 0
        # the reported times are the iterations this loop timed itself (a loaded machine
        # stretches both alike), each at least the 20 ms step
        measured_ms = 1e3 * (ends[-1] - ends[0]) / 3
        assert s.iter_mean_ms >= 20.0
        assert s.iter_mean_ms == pytest.approx(measured_ms, rel=0.2, abs=5.0)
    finally:
        mon.close()


def _after(delay_s, fn):
    import threading

    t = threading.Timer(delay_s, fn)
    t.start()
    return t


#: A commanded sleep long enough that one cut short is unmistakable on a loaded machine:
#: the tests below end it after a few tenths of a second and allow up to CUT_S for that.
LONG_S, CUT_S = 8.0, 4.0


@pytest.fixture
def long_writer(tmp_path):
    w = HookWriter(tmp_path / "gpu0.hook", stale_after_s=30.0, max_sleep_s=LONG_S)
    yield w
    w.close()


def test_a_sleep_in_progress_ends_when_the_daemon_stops(long_writer):
    long_writer.set_sleep(LONG_S)
    t = _after(0.3, long_writer.close)  # the daemon stops: sleep 0, inactive
    try:
        t0 = time.monotonic()
        slept = after_iteration(long_writer.path)
        elapsed = time.monotonic() - t0
    finally:
        t.join()
    assert 0.3 <= elapsed < CUT_S  # within a slice of the stop, not the 8 s commanded
    assert slept < CUT_S


def test_a_sleep_in_progress_ends_when_the_daemon_is_cleared_or_commands_less(long_writer):
    long_writer.set_sleep(LONG_S)
    t = _after(0.3, lambda: clear_hook_file(long_writer.path))  # the guardian, daemon dead
    try:
        t0 = time.monotonic()
        after_iteration(long_writer.path)
        assert time.monotonic() - t0 < CUT_S
    finally:
        t.join()
    long_writer.set_sleep(LONG_S)
    t = _after(0.2, lambda: long_writer.set_sleep(0.5))
    try:
        t0 = time.monotonic()
        assert after_iteration(long_writer.path) == 0.5
        assert 0.5 <= time.monotonic() - t0 < CUT_S
    finally:
        t.join()


def test_a_sleep_in_progress_ends_when_the_heartbeat_goes_stale(tmp_path):
    w = HookWriter(tmp_path / "gpu0.hook", stale_after_s=0.4, max_sleep_s=LONG_S)
    try:
        w.set_sleep(LONG_S)  # and never beats again: a hung or killed daemon, no guardian
        t0 = time.monotonic()
        after_iteration(w.path)
        assert 0.35 <= time.monotonic() - t0 < CUT_S
    finally:
        w.close()


TRUNCATED_READER = r"""
import sys
from gpucontrol.node.hooks import HookReader, after_iteration
HookReader.RECHECK_S = 60.0  # the open file is read on; no re-stat rescues it
path = sys.argv[1]
while True:
    print(after_iteration(path), flush=True)
"""


def test_a_truncated_hook_file_means_no_sleep_not_a_crash(children, writer):
    import select
    import subprocess

    writer.set_sleep(0.02)
    p = children.spawn(TRUNCATED_READER, writer.path, stdout=subprocess.PIPE, text=True)

    def next_lines(n):
        got = []
        deadline = time.monotonic() + 10
        while len(got) < n and time.monotonic() < deadline:
            if select.select([p.stdout], [], [], 0.5)[0]:
                line = p.stdout.readline()
                if not line:
                    break
                got.append(float(line))
        return got

    assert next_lines(2) == [0.02, 0.02]
    os.truncate(writer.path, 0)  # while the training has it open
    try:
        time.sleep(0.3)
        assert p.poll() is None, f"the training died: {p.returncode}"
    finally:
        os.truncate(writer.path, SIZE)  # zeros: not a hook record either (and our writer,
        # which maps it, may write again)
    time.sleep(0.1)
    assert p.poll() is None
    assert next_lines(200)[-5:] == [0.0] * 5


def test_a_changed_mode_or_owner_is_noticed_on_the_open_file(monkeypatch, writer):
    monkeypatch.setattr(HookReader, "RECHECK_S", 0.0)
    writer.set_sleep(0.3)
    r = HookReader(writer.path)
    assert r.sleep_s() == 0.3
    os.chmod(writer.path, 0o622)  # now writable by others
    assert r.sleep_s() == 0.0
    os.chmod(writer.path, 0o600)
    assert r.sleep_s() == 0.3
    if os.geteuid() == 0:
        os.chown(writer.path, 54321, -1)  # now owned by another user
        assert r.sleep_s() == 0.0
        os.chown(writer.path, 0, -1)
        assert r.sleep_s() == 0.3
