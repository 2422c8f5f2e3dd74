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


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 1e12, "12", None, object()])
def test_rejects_bad_values_without_raising(receiver, bad):
    path, s = receiver
    assert report_latency(bad, socket_path=path) is (bad == "12")  # a numeric str is ok
    if bad == "12":
        assert s.recv(100) == b"L 12.0\n"


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
