"""The SM-share command in the hook file (flags bits 8-15): round trip, compatibility with
readers and writers that predate it, clearing by the guardian, staleness."""

import mmap
import os
import struct
import time
import zlib

import pytest

from gpucontrol.node import hooks
from gpucontrol.node.hooks import HookReader, HookWriter, clear_hook_file


def test_share_round_trip_beside_the_sleep(tmp_path):
    w = HookWriter(tmp_path / "h")
    r = HookReader(w.path)
    assert r.share_pct() is None and r.read().share_pct is None
    w.set_sleep(0.3)
    w.set_share(40)
    st = r.read()
    assert (st.share_pct, st.effective_share_pct, st.effective_sleep_s) == (40, 40, 0.3)
    w.set_sleep(0.0)
    assert r.share_pct() == 40  # independent of the sleep
    w.set_share(None)
    assert r.share_pct() is None and r.read().active
    for bad in (101, -1, 50.5, True, "50"):
        with pytest.raises(ValueError, match="share_pct"):
            w.set_share(bad)
    w.close()


def test_a_reader_that_predates_the_share_still_reads_sleep_and_active(tmp_path):
    w = HookWriter(tmp_path / "h")
    w.set_sleep(0.25)
    w.set_share(60)
    with open(w.path, "rb") as f:
        raw = f.read()
    ver, flags, _seq, sleep_s, *_ = struct.unpack("<IIQddddI", raw[8:60])
    assert ver == 1 and os.path.getsize(w.path) == 64  # size and version unchanged
    assert bool(flags & 1) and sleep_s == 0.25  # what the old reader looks at
    assert zlib.crc32(raw[8:60]) == struct.unpack("<I", raw[60:64])[0]
    w.close()


def test_a_file_from_an_old_writer_reads_as_no_share(tmp_path):
    p = tmp_path / "h"
    body = struct.pack("<IIQddddI", 1, 1, 5, 0.1, time.time(), 10.0, 60.0, os.getpid())
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)
    os.write(fd, hooks.MAGIC + body + struct.pack("<I", zlib.crc32(body)))
    os.close(fd)
    st = HookReader(p).read()
    assert st.effective_sleep_s == 0.1 and st.share_pct is None


def test_guardian_clear_and_staleness_withdraw_the_share(tmp_path):
    w = HookWriter(tmp_path / "h", stale_after_s=0.05)
    w.set_share(30)
    r = HookReader(w.path)
    assert r.share_pct() == 30
    time.sleep(0.1)
    st = r.read()
    assert st.share_pct == 30 and st.effective_share_pct is None  # stale: full device
    w.beat()
    assert clear_hook_file(w.path)
    assert r.read().share_pct is None and r.share_pct() is None
    w._map.close()


def test_out_of_range_bits_are_ignored(tmp_path):
    w = HookWriter(tmp_path / "h")
    w._share = 200  # as a corrupt or future writer might
    w.beat()
    assert HookReader(w.path).read().share_pct is None
    with open(w.path, "r+b") as f, mmap.mmap(f.fileno(), 64) as m:
        assert m[:8] == hooks.MAGIC
    w._share = 0
    w.close()
