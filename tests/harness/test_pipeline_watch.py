"""The pipeline's watch over the daemon process: the burst counted in the daemon's logged
periods (not from its launch, which a loaded machine delays), and a SIGTERM only on a stall."""

import subprocess
import sys
import textwrap
import time

from harness.experiments import daemon_watch


class _Plant:
    class config:  # the plant's config attribute
        batch, burst_batch = 8, 32

    def __init__(self, progress):
        self.progress = progress
        self.loads = []

    def set_load(self, batch):
        self.progress.poll()
        self.loads.append((batch, self.progress.periods))


def _fake_daemon(log, start_delay_s, periods, period_s, then_hang=False):
    code = textwrap.dedent(f"""
        import json, time
        time.sleep({start_delay_s})
        with open({str(log)!r}, "a", buffering=1) as f:
            f.write(json.dumps({{"event": "started"}}) + "\\n")
            for k in range({periods}):
                time.sleep({period_s})
                f.write(json.dumps({{"period": k + 1, "mean_ms": 1.0}}) + "\\n")
            f.write(json.dumps({{"event": "stopped"}}) + "\\n")
        while {then_hang}:
            time.sleep(1)
    """)
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_late_start_is_waited_for_and_the_burst_counts_periods(tmp_path):
    log = tmp_path / "daemon.jsonl"
    progress = daemon_watch.LogProgress(log)
    plant, said = _Plant(progress), []
    daemon = _fake_daemon(log, start_delay_s=1.0, periods=10, period_s=0.1)
    try:
        # the daemon's own run is 1 s; its launch took 1 s more: still let finish
        daemon_watch.watch_daemon(daemon, progress, period_s=0.1, duration_s=1.0, plant=plant,
                               burst=(4, 6), burst_at=[], say=said.append)
        assert daemon.wait(5) == 0  # it ended by itself, never signalled
    finally:
        daemon.kill()
    assert [b for b, _ in plant.loads] == [32, 8]
    on, off = (k for _, k in plant.loads)
    assert 4 <= on <= 5 and 6 <= off <= 7, plant.loads
    assert said == ["load burst on", "load burst off"]


def test_a_daemon_that_stops_logging_is_given_up_on(tmp_path):
    log = tmp_path / "daemon.jsonl"
    progress = daemon_watch.LogProgress(log)
    daemon = _fake_daemon(log, start_delay_s=0.0, periods=2, period_s=0.05, then_hang=True)
    try:
        said, t = [], time.monotonic()
        daemon_watch.watch_daemon(daemon, progress, period_s=0.05, duration_s=0.1,
                               plant=_Plant(progress), burst=(10, 20), burst_at=[],
                               say=said.append, stall_s=1.0)
        assert 1.0 <= time.monotonic() - t < 30
        assert daemon.poll() is None  # still running: the caller sends the SIGTERM
        assert said and "logged no period" in said[-1], said
        assert progress.periods == 2
    finally:
        daemon.kill()
        daemon.wait(5)
