"""The owner and target locks (flock): exclusive, released with the holder, stale files pruned."""

import os
import subprocess
import sys

import pytest

from gpucontrol.node.locks import FileLock, LockHeld, TargetLocks, target_lock_name


def test_lock_is_exclusive_and_names_its_holder(tmp_path):
    a = FileLock(tmp_path / "x.lock").acquire()
    with pytest.raises(LockHeld) as exc:
        FileLock(tmp_path / "x.lock").acquire()  # another open file description
    assert exc.value.holder == os.getpid()
    assert os.stat(tmp_path / "x.lock").st_mode & 0o777 == 0o600
    a.release()
    assert not (tmp_path / "x.lock").exists()
    FileLock(tmp_path / "x.lock").acquire().release()


def test_a_dead_holder_leaves_a_stale_file_that_is_reused_and_pruned(tmp_path):
    name = target_lock_name(4242, 17)
    code = ("import os, sys; from gpucontrol.node.locks import FileLock; "
            "FileLock(sys.argv[1]).acquire(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], check=True, timeout=30)
    assert (tmp_path / name).exists()  # stale: its holder is gone
    locks = TargetLocks(tmp_path)
    assert locks.prune_stale() == 1 and not (tmp_path / name).exists()
    locks.claim(name, "training pid 4242")
    other = TargetLocks(tmp_path)
    with pytest.raises(LockHeld, match="already controlled by another daemon"):
        other.claim(name, "training pid 4242")
    assert other.prune_stale() == 0  # a held lock is not stale
    locks.release_all()
    other.claim(name, "training pid 4242")
    other.release_all()


def test_a_link_is_never_followed(tmp_path):
    (tmp_path / "target").write_text("keep")
    os.symlink(tmp_path / "target", tmp_path / "l.lock")
    with pytest.raises(OSError):
        FileLock(tmp_path / "l.lock").acquire()
    assert (tmp_path / "target").read_text() == "keep"
