"""``harness.pool.worker_pool``: its workers end with the block, at once, however it ends."""

import os
import signal
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from harness.pool import worker_pool


def _pid_after(seconds):
    time.sleep(seconds)
    return os.getpid()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pids, within=5.0):
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not any(_alive(p) for p in pids)


def test_results_in_order():
    with worker_pool(2) as ex:
        assert list(ex.map(divmod, [7, 9, 1], [2, 4, 1])) == [(3, 1), (2, 1), (1, 0)]


def test_an_interrupted_block_ends_its_workers_at_once():
    """A ProcessPoolExecutor waited on the way out for the runs its workers had started
    (control_quality.py --jobs 2: a SIGTERM took minutes, and a parent killed meanwhile left
    its workers blocked for ever)."""
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), worker_pool(2) as ex:
        started = [ex.submit(_pid_after, 30) for _ in range(2)]
        time.sleep(0.5)
        pids = list(ex._processes)
        raise KeyboardInterrupt
    assert all(f.cancelled() or f.done() for f in started)
    assert time.monotonic() - t0 < 10
    assert _gone(pids)


def test_workers_take_sigterm_s_default_action_not_an_inherited_handler():
    """A worker forked under the parent's SIGTERM handler (terminate_cleanly) caught the
    signal as a failed task and ignored the next ones: it outlived the parent."""
    old = signal.signal(signal.SIGTERM, lambda *a: None)
    try:
        with pytest.raises(BrokenProcessPool), worker_pool(1) as ex:
            pid = ex.submit(os.getpid).result()
            os.kill(pid, signal.SIGTERM)
            assert _gone([pid])
            ex.submit(os.getpid).result()  # the pool knows its worker died
    finally:
        signal.signal(signal.SIGTERM, old)
