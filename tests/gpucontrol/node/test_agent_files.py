"""The runtime directory is checked up to the root and files are handled relative to a
checked directory descriptor (issue B11); the daemon refuses a runtime directory below a
directory another user controls."""

import os
import stat
import subprocess
import time

import pytest
from actuators._children import SLEEPER, daemon_argv

from gpucontrol.node._runtime import (
    ensure_private_dir,
    open_private_dir,
    read_private_file,
    write_private_atomic,
)

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@root_only
def test_an_ancestor_owned_by_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(ValueError, match=r"theirs \(an ancestor.*uid 65534"):
        ensure_private_dir(theirs / "run" / "gpucontrol")
    assert not (theirs / "run").exists()
    with pytest.raises(ValueError, match="uid 65534"):
        write_private_atomic(theirs / "x.json", b"{}")
    assert os.listdir(theirs) == []


def test_an_ancestor_writable_by_others_is_refused_unless_sticky(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ValueError, match="shared is writable by group or others"):
        ensure_private_dir(shared / "run")
    shared.chmod(0o1777)  # like /tmp: others cannot rename or remove our entries
    assert ensure_private_dir(shared / "run").is_dir()
    assert (shared / "run").stat().st_mode & 0o777 == 0o700


def test_links_on_the_way_and_as_the_last_component(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "alias").symlink_to(real)  # our own link to our own directory: followed
    write_private_atomic(tmp_path / "alias" / "f.json", b"{}")
    assert (real / "f.json").read_bytes() == b"{}"
    assert read_private_file(real / "f.json") == b"{}"
    os.close(open_private_dir(tmp_path / "alias"))
    with pytest.raises(ValueError, match="not a link"):  # the runtime dir itself: never a link
        ensure_private_dir(tmp_path / "alias")
    (real / "l.json").symlink_to(real / "f.json")
    with pytest.raises(ValueError, match="symbolic link"):
        read_private_file(real / "l.json")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        ensure_private_dir(tmp_path / "file" / "run")


@root_only
def test_a_link_planted_by_another_user_is_not_followed(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    link = tmp_path / "planted"
    link.symlink_to(tmp_path / "real")
    os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    with pytest.raises(ValueError, match="link owned by uid 65534"):
        write_private_atomic(link / "f.json", b"{}")


@root_only
def test_daemon_refuses_a_runtime_dir_below_another_users_directory(children, tmp_path):
    t = children.spawn(SLEEPER)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    run = theirs / "run"
    argv = daemon_argv(run, "g", "--training-pid", str(t.pid), "--fixed-sleep", "0",
                       "--duration-s", "0.5")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2, r.stderr
    assert "uid 65534" in r.stderr and "ancestor" in r.stderr
    assert not run.exists()


REPORTER = r"""
import os, socket, sys
os.setgid(65534)
os.setgroups([65534])
os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(b"L 42\n", sys.argv[1])
with open(sys.argv[2], "rb") as f:
    assert f.read(8) == b"GPUCHOOK"
print("ok")
"""


@root_only
def test_socket_group_lets_a_non_root_group_report_and_read_the_hook(children, tmp_path):
    """A root daemon with --socket-group nogroup: a process running as nobody:nogroup
    reports a latency the daemon counts and reads the hook file; others get nothing."""
    import grp
    import json
    import shutil
    import sys
    import tempfile

    from actuators._children import read_events

    try:
        gid = grp.getgrnam("nogroup").gr_gid
    except KeyError:
        pytest.skip("no 'nogroup' group here")
    base = tempfile.mkdtemp(prefix="gpucontrol-group-", dir="/tmp")  # traversable by all
    os.chmod(base, 0o755)
    try:
        run = os.path.join(base, "run")
        t = children.spawn(SLEEPER)
        d = children.popen(daemon_argv(run, "g", "--training-pid", str(t.pid),
                                       "--fixed-sleep", "0", "--period-s", "0.2",
                                       "--socket-group", "nogroup"),
                           stdout=subprocess.PIPE, text=True)
        started = read_events(d.stdout, "started")[-1]
        sock, hook = started["socket"], started["hook"]
        assert (os.stat(sock).st_gid, os.stat(sock).st_mode & 0o777) == (gid, 0o660)
        assert (os.stat(hook).st_gid, os.stat(hook).st_mode & 0o777) == (gid, 0o640)
        assert os.stat(run).st_mode & 0o777 == 0o710 and os.stat(run).st_gid == gid
        assert os.stat(started["state"]).st_mode & 0o777 == 0o600  # the state stays private
        r = subprocess.run([sys.executable, "-I", "-c", REPORTER, sock, hook],
                           capture_output=True, text=True, timeout=30, check=False)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
        deadline, counted = time.monotonic() + 10, 0
        while not counted and time.monotonic() < deadline:
            rec = json.loads(d.stdout.readline())
            counted = rec.get("count", 0)
        assert counted == 1
        d.terminate()
        assert d.wait(10) == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_socket_group_must_exist(tmp_path, capsys):
    from gpucontrol.node.cli import main

    assert main(daemon_argv(tmp_path, "x", "--training-cmd", "true", "--fixed-sleep", "0",
                            "--socket-group", "no-such-group-xyz")[3:]) == 2
    assert "--socket-group" in capsys.readouterr().err


def test_log_refuses_a_fifo_without_blocking(tmp_path):
    from gpucontrol.node.logsink import open_log

    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"cannot open|not a regular file"):
        open_log(fifo)
    assert time.monotonic() - t0 < 5.0  # a blocking open never returns; a loaded CI is slow


def test_log_sink_drops_and_counts_instead_of_blocking():
    """A pipe nobody reads: writes never block, the overflow is counted, close gives up
    after its timeout."""
    from gpucontrol.node.logsink import LogSink

    r, w = os.pipe()
    try:
        sink = LogSink(w, max_lines=8)
        line = "x" * 20000 + "\n"
        results = []
        in_writes = 0.0  # the time spent in write_line itself, not in this loop's sleeps
        for _ in range(200):  # 4 MB into a 64 kB pipe
            t0 = time.monotonic()
            results.append(sink.write_line(line))
            in_writes += time.monotonic() - t0
            time.sleep(0.001)
        # one blocked write would never return (nobody reads): 200 queue puts take
        # microseconds each; the budget is what a loaded 2-core machine meets
        assert in_writes < 2.0
        assert sink.dropped > 0 and results.count(False) == sink.dropped
        t0 = time.monotonic()
        assert sink.close(timeout=0.3) is False  # the writer is stuck in write()
        assert time.monotonic() - t0 < 5.0  # gave up after its timeout, never joined it
        assert sink.write_line("late\n") is False
    finally:
        os.close(r)  # the blocked writer gets EPIPE and ends
        os.close(w)


def test_monitor_binds_through_the_checked_directory(tmp_path):
    """The latency socket is bound relative to the held directory descriptor: 0600, where
    asked, usable by a client; a non-socket there is never replaced."""
    from gpucontrol.node.client import report_latency
    from gpucontrol.node.monitor import LatencyMonitor

    path = tmp_path / "run" / "g.sock"
    with LatencyMonitor(path) as m:
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert os.lstat(path).st_mode & 0o777 == 0o600
        assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700
        report_latency(12.0, socket_path=str(path))
        deadline = time.monotonic() + 5
        while m.total_count == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert m.collect().count == 1
    (tmp_path / "run" / "f.sock").write_text("")
    with pytest.raises(ValueError, match="not a socket"):
        LatencyMonitor(tmp_path / "run" / "f.sock")


def test_a_failed_rename_leaves_no_temporary_file(tmp_path):
    from gpucontrol.node.metrics import DaemonMetrics

    target = tmp_path / "gpu.prom"
    target.mkdir()  # the rename onto it fails (a directory), every time
    (target / "keep").write_text("x")
    with pytest.raises(OSError):
        write_private_atomic(target, b"{}")
    m = DaemonMetrics(textfile=str(target))
    try:
        for _ in range(3):
            m.write_textfile()  # logged, not raised
    finally:
        m.textfile = None
        m.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.prom"]


def test_the_state_file_is_synced_around_its_rename(tmp_path, monkeypatch):
    """The file's data reaches the disk before the rename and the rename after it: a power
    cut leaves the old or the new state file, never an empty one (which a restarted daemon
    would refuse as "not a state file"). The metrics text file, rewritten every period from
    the control loop, is not synced."""
    from gpucontrol.node.guardian import read_state, write_state
    from gpucontrol.node.metrics import DaemonMetrics

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
        events.append(("fsync", kind, st.st_ino, st.st_size if kind == "file" else None))
        real_fsync(fd)

    def replace(src, dst, **kw):
        events.append(("replace", dst))
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "gpu0.state.json"
    write_state(path, [{"pid": 4242, "start": 7}])
    st = os.stat(path)
    assert events == [("fsync", "file", st.st_ino, st.st_size), ("replace", path.name),
                      ("fsync", "dir", os.stat(tmp_path).st_ino, None)]
    assert read_state(path)["targets"] == [{"pid": 4242, "start": 7}]
    events.clear()
    m = DaemonMetrics(textfile=str(tmp_path / "gpu0.prom"))
    try:
        m.write_textfile()
    finally:
        m.close()
    assert [e[0] for e in events] == ["replace"]


def test_the_per_period_record_is_written_without_fsync(tmp_path, monkeypatch):
    """The controller's record, rewritten every period under the duty cycler's lock, changes
    no target: it is not fsynced (milliseconds on a disk-backed runtime directory, every
    period, would hold up a pause or a resume). The write-ahead of the targets is; so is the
    record that puts back a state file removed under the running daemon."""
    import threading
    from types import SimpleNamespace

    from gpucontrol.node.daemon_safety import DaemonSafety
    from gpucontrol.node.guardian import read_state
    from gpucontrol.two_tier import Actuation

    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    host = DaemonSafety()
    host.cfg = SimpleNamespace(state=str(tmp_path / "gpu0.state.json"), hook=None,
                               socket="", gpu=0, slo_ms=80.0, period_s=4.0)
    host.cycler, host._state_lock, host._records = None, threading.Lock(), {}
    host.emit = host.say = lambda *a, **k: None
    monkeypatch.setattr("gpucontrol.node.daemon_safety.controller_record",
                        lambda cfg, s, m: {"sleep_s": s, "mps_pct": m})
    host.write_state([{"pid": 4242, "start": 7}])          # a write-ahead
    assert len(synced) == 2                                  # the file, then the directory
    synced.clear()
    act = Actuation(sleep_s=0.25, mps_pct=60.0)
    host._persist(act)
    assert synced == []
    assert read_state(host.cfg.state)["controller"] == {"sleep_s": 0.25, "mps_pct": 60.0}
    os.unlink(host.cfg.state)                                # removed under the daemon
    host._persist(act)
    assert len(synced) == 2
