"""Fault paths of the signal duty cycler with real processes: write-ahead of a new target set
(B1), a failing write-ahead holds instead of stopping for good (B7), a PID recycled between
the /proc scan and pidfd_open is never adopted (B8), refusals are keyed by identity and
forgotten (B19)."""

import os
import time

from _children import BUSY, SLEEPER, state, stopped_pids

from gpucontrol.node.actuators import sleep as sleep_mod
from gpucontrol.node.actuators.sleep import SignalDutyCycler


def _wait(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.005)
    return bool(pred())


def test_set_targets_writes_the_new_roots_ahead(children):
    """B1: replacing the roots always reports the new set, even when the scan finds no new
    descendant, before the cycler can pause it."""
    a, b = children.spawn(SLEEPER), children.spawn(SLEEPER)
    seen = []
    cyc = SignalDutyCycler([a.pid], on_targets_changed=seen.append)
    try:
        seen.clear()
        cyc.set_targets([b.pid])
        assert [t["pid"] for t in seen[-1]] == [b.pid]
    finally:
        cyc.close()


def test_a_failing_write_ahead_holds_and_recovers(children):
    """B7: while the state file cannot be written (ENOSPC here) nothing is paused, the
    cycler reports it held with commanded 0, and it resumes cycling once a write succeeds."""
    t = children.spawn(BUSY)
    fail = {"on": True}
    writes = []

    def write(ids):
        if fail["on"]:
            raise OSError(28, "No space left on device")
        writes.append(ids)

    cyc = SignalDutyCycler([t.pid], run_quantum_s=0.01, sleep_s=0.05, refresh_s=0.1,
                           on_targets_changed=write)
    try:
        assert cyc.held and "No space left" in cyc.error
        cyc.stats()  # a fresh window, all of it held
        cyc.start()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            assert not stopped_pids([t.pid])
            time.sleep(0.002)
        st = cyc.stats()
        assert st.commanded_fraction == 0.0 and st.achieved_fraction == 0.0
        fail["on"] = False
        assert _wait(lambda: not cyc.held, 2.0) and cyc.error is None
        assert writes and writes[-1][0]["pid"] == t.pid
        assert _wait(lambda: state(t.pid) == "T", 2.0)  # cycling again
    finally:
        cyc.close()
    assert not stopped_pids([t.pid])


def test_a_recycled_descendant_pid_is_not_adopted(children, monkeypatch):
    """B8: the scan saw PID X as a child of the training, but by the time the pidfd is open X
    is an unrelated process (here: a process that never was its child). The parent check
    after opening refuses it; real children are still adopted."""
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "time.sleep(60)\n")
    root = children.spawn(code)
    stranger = children.spawn(SLEEPER)
    assert _wait(lambda: len(sleep_mod.descendant_edges([root.pid])) == 1)
    real = sleep_mod.descendant_edges([root.pid])
    monkeypatch.setattr(sleep_mod, "descendant_edges",
                        lambda pids: [*real, (stranger.pid, root.pid)])
    cyc = SignalDutyCycler([root.pid], run_quantum_s=0.01, sleep_s=0.02)
    try:
        assert stranger.pid not in cyc.pids()
        assert real[0][0] in cyc.pids()
        cyc.start()
        time.sleep(0.3)
        assert state(stranger.pid) not in ("T", "t")
    finally:
        cyc.close()


def test_refusals_are_keyed_by_identity_and_forgotten(children):
    """B19: a refused descendant (another user's process) is remembered as (pid, start) and
    forgotten once it is gone, so a new process that gets its PID is judged afresh."""
    if os.geteuid() != 0:
        import pytest

        pytest.skip("needs root to start a child under another uid")
    code = ("import os, subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setuid(65534); "
            "time.sleep(60)']).wait()\n"
            "time.sleep(60)\n")
    root = children.spawn(code)
    assert _wait(lambda: len(sleep_mod.descendant_edges([root.pid])) == 1)
    child = sleep_mod.descendant_edges([root.pid])[0][0]
    assert _wait(lambda: os.stat(f"/proc/{child}").st_uid == 65534)
    cyc = SignalDutyCycler([root.pid])
    try:
        assert child not in cyc.pids()
        assert [k[0] for k in cyc._refused] == [child]
        os.kill(child, 9)
        assert _wait(lambda: state(child) is None, 5.0)  # reaped by its parent
        cyc._refresh()
        assert cyc._refused == {}
    finally:
        cyc.close()
