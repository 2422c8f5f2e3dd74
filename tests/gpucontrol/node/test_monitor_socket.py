"""The latency monitor: parsing, per-period statistics, and a fuzzed Unix socket."""

import math
import os
import random
import socket
import stat
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucontrol import LinearLatencyModel, Measurement, SleepKnob, TwoTierController
from gpucontrol.node.client import report_latency
from gpucontrol.node.monitor import MAX_DATAGRAM, LatencyAggregator, LatencyMonitor, parse_datagram


@pytest.mark.parametrize("data, expected", [
    (b"L 12.5\n", ([12.5], [], 0)),
    (b"L 12.5", ([12.5], [], 0)),  # the last newline is optional
    (b"L 1\nL 2\nI 3\n", ([1.0, 2.0], [3.0], 0)),
    (b"", ([], [], 1)),
    (b"\n", ([], [], 1)),
    (b"L 1\n\nL 2\n", ([1.0, 2.0], [], 1)),
    (b"L", ([], [], 1)),
    (b"L nan\nL inf\nL -1\nL 1e8\n", ([], [], 4)),
    (b"X 12\nl 12\n12\n", ([], [], 3)),
    (b"L 1" + b"0" * 40, ([], [], 1)),
    (b"\x00\xff\xfe garbage", ([], [], 1)),
    (b"L 1e3\nL .5\nI 5.\nL 2.5E-1\n", ([1000.0, 0.5, 0.25], [5.0], 0)),
    # strict: one space, a plain number, nothing else
    (b"L  12\nL 1_000\nL 12\r\nL +12\nL 12 \nL 0x10\nL 12\t\nL\t12\n L 12\nL -0\n",
     ([], [], 10)),
])
def test_parse_datagram(data, expected):
    assert parse_datagram(data) == expected


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_parse_never_raises_and_accounts_for_every_line(data):
    lat, it, bad = parse_datagram(data)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    assert len(lat) + len(it) + bad == max(len(lines), 1)
    assert all(math.isfinite(v) and 0 <= v <= 1e7 for v in lat + it)


def test_period_statistics_match_numpy():
    rng = np.random.default_rng(1)
    xs = rng.gamma(4.0, 20.0, size=5000)
    agg = LatencyAggregator()
    for x in xs:
        agg.add(float(x))
    agg.add_iteration(200.0)
    agg.add_malformed(3)
    s = agg.collect()
    assert s.count == 5000 and s.malformed == 3 and s.iter_count == 1
    assert s.to_measurement().iteration_s == pytest.approx(0.2)   # the hook's 200 ms
    assert s.mean_ms == pytest.approx(xs.mean(), rel=1e-12)
    assert s.p99_ms == np.percentile(xs, 99, method="inverted_cdf")
    assert s.max_ms == xs.max()
    assert s.end >= s.start
    empty = agg.collect()
    assert empty.count == 0 and math.isnan(empty.mean_ms) and math.isnan(empty.p99_ms)
    m = empty.to_measurement()
    assert isinstance(m, Measurement) and m.count == 0
    assert math.isnan(m.iteration_s)                      # no iteration reported


def test_reservoir_bounds_memory_but_keeps_mean_exact():
    agg = LatencyAggregator(max_samples=1000)
    rng = random.Random(3)
    xs = [rng.uniform(0, 100) for _ in range(100_000)]
    for x in xs:
        agg.add(x)
    assert len(agg._samples) == 1000
    s = agg.collect()
    assert s.count == 100_000
    assert s.mean_ms == pytest.approx(sum(xs) / len(xs), rel=1e-12)
    assert s.p99_ms == pytest.approx(99.0, abs=1.5)


def test_controller_takes_period_stats():
    # started at the bottom of the range (by default it starts at the predicted sleep)
    ctl = TwoTierController(LinearLatencyModel(-12.0, 95.0), slo_ms=90.0,
                            sleep=SleepKnob(initial_s=0.0))
    agg = LatencyAggregator()
    assert ctl.update(agg.collect().to_measurement()).reason.startswith("hold")
    agg.add(95.0)
    act = ctl.update(agg.collect().to_measurement())
    # the default P loop is detuned to 0.5 (stable under an unknown one-period delay):
    # half of the deadbeat step 5/12 s
    assert act.sleep_s == pytest.approx(0.5 * 5 / 12, abs=1e-9)


@pytest.fixture
def monitor(tmp_path):
    m = LatencyMonitor(tmp_path / "m.sock").start()
    try:
        yield m
    finally:
        m.close()


def _settle(mon, want, timeout=3.0):
    deadline = time.monotonic() + timeout
    while mon.total_count + mon.total_malformed < want and time.monotonic() < deadline:
        time.sleep(0.005)


def test_socket_is_private_and_receives_reports(monitor):
    st_ = os.stat(monitor.path)
    assert stat.S_ISSOCK(st_.st_mode) and st_.st_mode & 0o777 == 0o600
    for ms in (10.0, 20.0, 30.0):
        assert report_latency(ms, socket_path=monitor.path)
    _settle(monitor, 3)
    s = monitor.collect()
    assert (s.count, s.mean_ms, s.p99_ms) == (3, 20.0, 30.0)


def test_fuzzing_garbage_huge_partial_and_flood(monitor):
    tx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rng = random.Random(7)
    sent_bad = 0
    for _ in range(300):  # garbage
        tx.sendto(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200))), monitor.path)
        sent_bad += 1
    tx.sendto(b"L 5\n" * (MAX_DATAGRAM // 4 + 10), monitor.path)  # huge: truncated, dropped
    for partial in (b"L", b"L ", b"L 1e", b"I -", b"L 12.5\nL"):  # partial messages
        tx.sendto(partial, monitor.path)
    tx.sendto(b"L 7\n", monitor.path)
    _settle(monitor, 7 + sent_bad)
    time.sleep(0.1)
    s = monitor.collect()
    assert s.count == 2  # "L 12.5" from the last partial and "L 7"
    assert s.malformed >= sent_bad - 10 + 1 + 5  # random bytes may form a valid line rarely

    # flood from several threads with non-blocking clients: never blocks, monitor survives
    def flood():
        c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
        for i in range(20000):
            try:
                c.sendto(b"L %d\n" % (i % 100), monitor.path)
            except BlockingIOError:
                pass
        c.close()

    threads = [threading.Thread(target=flood) for _ in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - t0 < 20
    time.sleep(0.3)
    flooded = monitor.collect()
    assert 0 < flooded.count <= 80000
    assert len(monitor._samples) <= monitor.max_samples
    assert report_latency(42.0, socket_path=monitor.path)  # still alive and accurate
    _settle(monitor, monitor.total_count + 1)
    time.sleep(0.05)
    assert monitor.collect().mean_ms == 42.0


def test_stale_socket_is_replaced_live_one_refused(tmp_path):
    path = tmp_path / "x.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    first = LatencyMonitor(path)
    try:
        with pytest.raises(ValueError, match="in use"):
            LatencyMonitor(path)
    finally:
        first.close()
    assert not path.exists()


def test_refuses_to_replace_a_regular_file(tmp_path):
    f = tmp_path / "notasocket"
    f.write_text("precious")
    with pytest.raises(ValueError, match="not a socket"):
        LatencyMonitor(f)
    assert f.read_text() == "precious"


def test_close_does_not_remove_a_successor(tmp_path):
    path = tmp_path / "y.sock"
    old = LatencyMonitor(path)
    os.unlink(path)
    new = LatencyMonitor(path)
    old.close()
    assert path.exists()
    new.close()
    assert not path.exists()


def test_max_samples_validated():
    with pytest.raises(ValueError, match="max_samples"):
        LatencyAggregator(max_samples=10)
