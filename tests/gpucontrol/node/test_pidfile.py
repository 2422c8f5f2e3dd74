"""The training's PID file (gpucontrol.node.pidfile): what a file may name, checked on real
files and processes (other uids made with setuid in a child, as root)."""

import os
import uuid
from pathlib import Path

import pytest
from actuators._children import SLEEPER

from gpucontrol.errors import ConfigurationError, TargetRefused
from gpucontrol.node.config import DaemonConfig
from gpucontrol.node.pidfile import (
    PidFileNotWritten,
    check_claim,
    check_pattern,
    find_pid_files,
    proc_cgroups,
    read_claim,
    resolve_pid_file,
)

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files for others")


def _file(path, text, *, owner=None, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if owner is not None:
        os.chown(path, owner, owner)
    path.chmod(mode)
    return path


def test_the_file_itself_is_checked(tmp_path):
    me = os.geteuid()
    ok = _file(tmp_path / "ok.pid", "4242\n")
    assert read_claim(str(ok), {me}).pid == 4242
    link = tmp_path / "link.pid"
    link.symlink_to(ok)
    with pytest.raises(TargetRefused, match="symbolic link"):
        read_claim(str(link), {me})
    fifo = tmp_path / "fifo.pid"
    os.mkfifo(fifo)
    with pytest.raises(TargetRefused, match="not a regular file"):  # and never blocks
        read_claim(str(fifo), {me})
    with pytest.raises(TargetRefused, match="writable by group or others"):
        read_claim(str(_file(tmp_path / "w.pid", "4242", mode=0o666)), {me})
    for bad in ("abc", "12 13", "-5", "1", "9" * 70, " \n"):
        with pytest.raises(TargetRefused, match="must hold one PID"):
            read_claim(str(_file(tmp_path / "bad.pid", bad)), {me})
    with pytest.raises(FileNotFoundError):
        read_claim(str(tmp_path / "missing.pid"), {me})


def test_an_empty_file_is_waited_for_not_refused(tmp_path, children):
    """``echo $$ > gpu0.pid`` creates the file, then writes it: an agent polling in between
    reads it empty, which means "not yet", not a bad PID (it refused at once before)."""
    me = os.geteuid()
    f = _file(tmp_path / "gpu0.pid", "")
    with pytest.raises(PidFileNotWritten):
        read_claim(str(f), {me})
    assert resolve_pid_file(str(f), {me}, None) is None        # wait and read again
    proc = children.spawn(SLEEPER)
    f.write_text(f"{proc.pid}\n")
    assert resolve_pid_file(str(f), {me}, None).pid == proc.pid


@root_only
def test_a_file_of_a_uid_not_allowed_is_refused(tmp_path):
    f = _file(tmp_path / "x.pid", "4242", owner=NOBODY)
    with pytest.raises(TargetRefused, match=f"owned by uid {NOBODY}.*--allow-uid"):
        read_claim(str(f), {0})
    assert read_claim(str(f), {0, NOBODY}).owner == NOBODY


@root_only
def test_the_process_must_run_as_the_files_owner(tmp_path, children):
    from actuators._children import wait_for

    other = children.popen(["sleep", "60"], user=NOBODY - 1, group=NOBODY - 1)
    mine = children.popen(["sleep", "60"], user=NOBODY, group=NOBODY)
    root = children.spawn(SLEEPER)
    for p, uid in ((other, NOBODY - 1), (mine, NOBODY)):  # the setuid in the child is done
        status = f"/proc/{p.pid}/status"
        assert wait_for(lambda status=status, uid=uid: f"\t{uid}\t" in Path(status).read_text(),
                        5.0)
    for p, why in ((other, f"runs as uid {NOBODY - 1}"), (root, "runs as root")):
        claim = read_claim(str(_file(tmp_path / f"{p.pid}.pid", str(p.pid), owner=NOBODY)),
                           {NOBODY})
        with pytest.raises(TargetRefused, match=why):
            check_claim(claim, None)
    claim = read_claim(str(_file(tmp_path / "ok.pid", str(mine.pid), owner=NOBODY)), {NOBODY})
    check_claim(claim, None)  # its owner's process
    with pytest.raises(TargetRefused, match="does not match --training-cgroup"):
        check_claim(claim, "*pod-nosuch*")
    root_claim = read_claim(str(_file(tmp_path / "r.pid", str(root.pid), owner=0)), {0})
    check_claim(root_claim, None)  # root's own file may name a root process


def test_pod_directories_and_stale_files(tmp_path, children):
    base = tmp_path / "training"
    base.mkdir()
    pattern = str(base / "{pod}" / "gpu0.pid")
    assert find_pid_files(pattern) == []
    assert resolve_pid_file(pattern, {os.geteuid()}, None) is None  # wait
    live = children.spawn(SLEEPER)
    dead = children.spawn(SLEEPER)
    dead.kill()
    dead.wait()
    pods = [str(uuid.uuid4()) for _ in range(3)]
    _file(base / pods[0] / "gpu0.pid", str(dead.pid))  # a deleted pod's leftover
    _file(base / "not-a-uuid" / "gpu0.pid", str(live.pid))  # never a pod's directory
    (base / pods[2]).symlink_to(base / "not-a-uuid")  # a link is not a pod's directory
    assert resolve_pid_file(pattern, {os.geteuid()}, None) is None
    _file(base / pods[1] / "gpu0.pid", str(live.pid))
    claim = resolve_pid_file(pattern, {os.geteuid()}, None)
    assert (claim.pid, claim.pod) == (live.pid, pods[1])
    other = children.spawn(SLEEPER)
    _file(base / pods[0] / "gpu0.pid", str(other.pid))  # two live trainings for one GPU
    with pytest.raises(TargetRefused, match="2 files name a live process"):
        resolve_pid_file(pattern, {os.geteuid()}, None)
    # the one in its own pod's cgroup wins: neither is here, so both stay and are refused
    with pytest.raises(TargetRefused, match="2 files"):
        resolve_pid_file(pattern, {os.geteuid()}, "*pod{pod}*")


def test_the_placeholder_rules():
    check_pattern("/run/g/training/{pod}/gpu0.pid", "*pod{pod}*")
    for path in ("/run/g/{pod}", "/run/g/x{pod}/a", "/run/{pod}/{pod}/a"):
        with pytest.raises(ConfigurationError, match="one whole directory name"):
            check_pattern(path, None)
    with pytest.raises(ConfigurationError, match=r"--training-cgroup .*names the pod"):
        check_pattern("/run/g/gpu0.pid", "*pod{pod}*")
    with pytest.raises(ConfigurationError, match="--training-cgroup is empty"):
        check_pattern(None, " ")


def test_the_config_takes_one_way_to_name_the_training(tmp_path):
    kw = {"fixed_sleep": 0.1, "socket": str(tmp_path / "s"), "state": str(tmp_path / "st"),
          "hook": str(tmp_path / "h")}
    cfg = DaemonConfig(training_pid_file=str(tmp_path / "{pod}" / "g.pid"),
                       training_cgroup="*pod{pod}*", allowed_uids=[1000, 1000], **kw)
    assert cfg.allowed_uids == (1000,)
    assert cfg.pid_file_owners() == {os.geteuid(), 0, 1000}
    with pytest.raises(ConfigurationError, match="give either --training-pid"):
        DaemonConfig(training_pids=(4242,), training_pid_file="/x.pid", **kw)
    with pytest.raises(ConfigurationError, match="--training-cgroup checks a training"):
        DaemonConfig(training_cmd="true", training_cgroup="*", **kw)


def test_the_cgroup_paths_of_a_process():
    paths = proc_cgroups(os.getpid())
    assert all(p not in ("", "/") for p in paths)
    assert proc_cgroups(4_000_000) == []
