"""report_latency: non-blocking, never raises, drops what it cannot send."""

import math
import os
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucontrol.node.client import ReportClient, client, report_iteration, report_latency


@pytest.fixture
def receiver(tmp_path):
    path = str(tmp_path / "r.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(2)
    yield path, s
    s.close()


def test_no_daemon_drops_quietly(tmp_path):
    path = tmp_path / "absent.sock"
    c = client(path)
    before = c.dropped
    assert report_latency(12.0, socket_path=path) is False
    assert c.dropped == before + 1


def test_sends_one_line_per_sample(receiver):
    path, s = receiver
    assert report_latency(12.25, socket_path=path)
    assert s.recv(100) == b"L 12.25\n"
    assert report_iteration(200, socket_path=path)
    assert s.recv(100) == b"I 200.0\n"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 1e12, "12", b"12", bytearray(b"1"),
                                 True, False, None, object()])
def test_rejects_bad_values_without_raising(receiver, bad):
    path, s = receiver
    c = client(path)
    before = c.dropped, c.sent
    assert report_latency(bad, socket_path=path) is False  # not a number: not sent
    assert (c.dropped, c.sent) == (before[0] + 1, before[1])
    s.settimeout(0.05)
    with pytest.raises(TimeoutError):
        s.recv(100)


def test_numbers_of_other_types_are_sent_and_minus_zero_as_zero(receiver):
    import fractions

    import numpy as np

    path, s = receiver
    assert report_latency(np.float32(2.5), socket_path=path)
    assert s.recv(100) == b"L 2.5\n"
    assert report_latency(fractions.Fraction(1, 2), socket_path=path)
    assert s.recv(100) == b"L 0.5\n"
    assert report_latency(-0.0, socket_path=path)
    assert s.recv(100) == b"L 0.0\n"
    assert report_latency(np.bool_(True), socket_path=path) is False


def test_a_fork_while_another_thread_holds_the_clients_locks_does_not_hang(receiver):
    import signal

    from gpucontrol.node import client as client_mod

    path, s = receiver
    c = client(path)
    assert report_latency(1.0, socket_path=path)
    assert s.recv(100) == b"L 1.0\n"
    with c._lock, client_mod._clients_lock:  # as another thread would, mid-call
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            ok = report_latency(2.0, socket_path=path) and \
                report_latency(3.0, socket_path=path + ".other") is False
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("report_latency hung in the forked child")
        time.sleep(0.02)
    assert os.waitstatus_to_exitcode(status) == 0
    assert s.recv(100) == b"L 2.0\n"


@settings(max_examples=200)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                 st.text(max_size=5), st.none(), st.binary(max_size=5)))
def test_never_raises(value):
    assert report_latency(value, socket_path="/nonexistent/dir/x.sock") in (True, False)


def test_never_blocks_when_the_daemon_does_not_read(receiver):
    path, _s = receiver  # bound, never read: the kernel queue fills up
    c = ReportClient(path)
    t0 = time.perf_counter()
    results = [c.send("L", 1.0) for _ in range(20000)]
    elapsed = time.perf_counter() - t0
    assert elapsed < 5.0
    assert any(results) and not all(results)  # the queue filled: the rest was dropped
    assert c.sent + c.dropped == 20000


def test_forked_child_gets_its_own_socket(receiver):
    path, s = receiver
    assert report_latency(1.0, socket_path=path)
    assert s.recv(100) == b"L 1.0\n"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os._exit(0 if report_latency(2.0, socket_path=path) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert s.recv(100) == b"L 2.0\n"


def test_environment_names_the_default_socket(receiver, monkeypatch):
    path, s = receiver
    monkeypatch.setenv("GPUCONTROL_SOCKET", path)
    assert report_latency(3.5)
    assert s.recv(100) == b"L 3.5\n"
