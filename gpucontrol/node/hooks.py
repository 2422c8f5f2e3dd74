"""The cooperative sleep hook: an instrumented training loop sleeps on its own, no signals.

The GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-B: "if the byte code of the training
workload is available, a sleep function can be inserted". The daemon writes the commanded
sleep into a small shared file (64 bytes, mode 0600; the daemon maps it, the reader reads it
with ``pread``); the training loop calls
:func:`after_iteration` once per iteration (or wraps the step in ``with iteration():``),
which reads the file and sleeps that long::

    from gpucontrol.hooks import after_iteration
    for batch in loader:
        train_step(batch)
        after_iteration()          # sleeps the commanded interval (0 when no daemon)

Safety: the reader never raises and sleeps 0 when the file is missing, malformed, not ours,
or *stale* -- its heartbeat older than the ``stale_after_s`` the daemon wrote (the daemon beats
every period; its guardian also clears the sleep within milliseconds if the daemon dies).
The sleep is capped by ``max_sleep_s`` from the file and by :data:`HARD_MAX_SLEEP_S`.

File layout (little endian)::

    0  magic  b"GPUCHOOK"        8
    8  version u32 (1)           12 flags u32 (bit 0: active; bits 8-15: SM share %)
    16 seq u64                   24 sleep_s f64
    32 heartbeat f64 (time.time) 40 stale_after_s f64
    48 max_sleep_s f64           56 daemon pid u32
    60 crc32 of bytes 8..59 u32

The commanded SM share (1-100 %, 0: none) for a training that switches its own SM partition
(green contexts, :mod:`gpucontrol.node.actuators.spatial`) rides in bits 8-15 of ``flags``:
readers that predate it ignore those bits, the size and version stay, and the guardian's
clearing (flags 0) withdraws the share command together with the sleep.

A record is written with one 56-byte copy and read with one copy; the CRC rejects a torn read
(the reader retries), so no lock is shared between the processes.

The first :func:`after_iteration` call also tells a launcher that the process is ready
(:func:`notify_ready`; used by the MPS actuator's shadow restart), and, when
``$GPUCONTROL_SOCKET`` is set, each call reports the iteration time to the daemon.

This module imports nothing from the package at module level: the guardian loads it by path.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import stat
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

ENV_HOOK_FILE = "GPUCONTROL_HOOK_FILE"
ENV_READY_FD = "GPUCONTROL_READY_FD"
ENV_READY_PID = "GPUCONTROL_READY_PID"
MAGIC = b"GPUCHOOK"
VERSION = 1
SIZE = 64
HARD_MAX_SLEEP_S = 60.0
_BODY = struct.Struct("<IIQddddI")  # version, flags, seq, sleep, heartbeat, stale, max, pid
_CRC = struct.Struct("<I")
_SHARE_SHIFT = 8  # flags bits 8-15: the commanded SM share, % (0: no command)
assert 8 + _BODY.size + _CRC.size == SIZE

__all__ = [
    "ENV_HOOK_FILE",
    "ENV_READY_FD",
    "ENV_READY_PID",
    "HookReader",
    "HookState",
    "HookWriter",
    "after_iteration",
    "clear_hook_file",
    "iteration",
    "notify_ready",
]


def _pack(flags: int, seq: int, sleep_s: float, heartbeat: float, stale_after_s: float,
          max_sleep_s: float, pid: int) -> bytes:
    body = _BODY.pack(VERSION, flags, seq, sleep_s, heartbeat, stale_after_s, max_sleep_s, pid)
    return body + _CRC.pack(zlib.crc32(body))


@dataclass(frozen=True)
class HookState:
    """One consistent read of the hook file."""

    sleep_s: float
    active: bool
    fresh: bool
    seq: int
    daemon_pid: int
    share_pct: int | None = None

    @property
    def effective_sleep_s(self) -> float:
        return self.sleep_s if (self.active and self.fresh) else 0.0

    @property
    def effective_share_pct(self) -> int | None:
        """The commanded SM share (%) to use now; None (run on the full device) unless the
        daemon is alive and active and has commanded one."""
        return self.share_pct if (self.active and self.fresh) else None


class HookWriter:
    """The daemon's side: create the hook file and publish the commanded sleep.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> w = HookWriter(os.path.join(d, "gpu0.hook"))
    >>> w.set_sleep(0.25)
    >>> HookReader(w.path).read().effective_sleep_s
    0.25
    >>> w.close()
    """

    def __init__(self, path: str | os.PathLike[str], *, stale_after_s: float = 10.0,
                 max_sleep_s: float = HARD_MAX_SLEEP_S) -> None:
        if not (stale_after_s > 0 and math.isfinite(stale_after_s)):
            raise ValueError(f"stale_after_s must be > 0, got {stale_after_s!r}")
        if not (0 < max_sleep_s <= HARD_MAX_SLEEP_S):
            raise ValueError(f"max_sleep_s must be in (0, {HARD_MAX_SLEEP_S:g}], "
                             f"got {max_sleep_s!r}")
        self.path = os.fspath(path)
        self.stale_after_s = float(stale_after_s)
        self.max_sleep_s = float(max_sleep_s)
        self._seq = 0
        self._sleep = 0.0
        self._active = 1
        self._share = 0
        # the writer runs in the daemon, inside the package (the guardian, which loads this
        # module by path, only clears hook files in place)
        from gpucontrol.node._runtime import write_private_atomic

        self._map: mmap.mmap

        def map_it(fd: int) -> None:
            self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

        write_private_atomic(self.path, MAGIC + self._record(), flags=os.O_RDWR,
                             before_rename=map_it)

    def _record(self) -> bytes:
        return _pack(self._active | (self._share << _SHARE_SHIFT), self._seq, self._sleep,
                     time.time(), self.stale_after_s, self.max_sleep_s, os.getpid())

    def _publish(self) -> None:
        self._seq += 1
        self._map[8:SIZE] = self._record()

    def set_sleep(self, sleep_s: float) -> None:
        """Publish a new commanded sleep (s) and beat the heartbeat."""
        s = float(sleep_s)
        if not (math.isfinite(s) and 0.0 <= s <= self.max_sleep_s):
            raise ValueError(f"sleep_s must be in [0, {self.max_sleep_s:g}], got {sleep_s!r}")
        self._sleep = s
        self._publish()

    def set_share(self, share_pct: int | None) -> None:
        """Publish the commanded SM share (integer %, 1..100; None or 0: no command) for a
        training that switches its own SM partition (green contexts) at iteration ends."""
        p = 0 if share_pct is None else share_pct
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 100:
            raise ValueError(f"share_pct must be an integer in [1, 100] or None, "
                             f"got {share_pct!r}")
        self._share = p
        self._publish()

    def beat(self) -> None:
        """Refresh the heartbeat (the daemon calls this every period)."""
        self._publish()

    def close(self, unlink: bool = True) -> None:
        """Publish sleep 0 / inactive, then unmap (and remove the file)."""
        if self._map.closed:
            return
        self._sleep, self._active, self._share = 0.0, 0, 0
        self._publish()
        self._map.close()
        if unlink:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def clear_hook_file(path: str | os.PathLike[str]) -> bool:
    """Set a hook file's sleep to 0 (inactive) in place; what the guardian does when the
    daemon dies. Returns False when there is no valid hook file there."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_size != SIZE or st.st_uid != os.geteuid()):
            return False
        with mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
            if m[:8] != MAGIC:
                return False
            _v, _f, seq, _s, _hb, stale, mx, pid = _BODY.unpack(m[8:8 + _BODY.size])
            m[8:SIZE] = _pack(0, seq + 1, 0.0, time.time(), stale, mx, pid)
        return True
    except (OSError, ValueError, struct.error):
        return False
    finally:
        os.close(fd)


class HookReader:
    """The training side: read the commanded sleep. Never raises; 0 when in doubt.

    The file is read with ``pread`` on a descriptor kept open (not mapped: a file truncated
    under a mapping would kill the reader with SIGBUS); a short read is no command. Every
    :attr:`RECHECK_S` the path and the open file are checked again: a replaced file is
    reopened, and one that is no longer a 64-byte regular file owned by us (or root) and
    writable by no one else is ignored from then on."""

    RECHECK_S = 2.0

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = os.fspath(path) if path is not None else self._default_path()
        self._fd: int | None = None
        self._ino = -1
        self._next_check = 0.0

    @staticmethod
    def _default_path() -> str:
        env = os.environ.get(ENV_HOOK_FILE)
        if env:
            return env
        try:
            from gpucontrol.node._runtime import default_path  # only inside the package

            return str(default_path("hook"))
        except ImportError:
            return ""

    @staticmethod
    def _check(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode) or st.st_size != SIZE:
            raise ValueError("not a hook file")
        if st.st_mode & 0o022 or st.st_uid not in (os.geteuid(), 0):
            raise ValueError("hook file writable by others or owned by another user")

    def _open(self) -> None:
        self._close()
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            self._check(st)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._ino = fd, st.st_ino

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._close()

    def read(self) -> HookState:
        """One consistent read (reopens the file when the daemon replaced it)."""
        none = HookState(0.0, False, False, -1, 0)
        try:
            now = time.monotonic()
            if self._fd is None or now >= self._next_check:
                self._next_check = now + self.RECHECK_S
                try:
                    if self._fd is None or os.stat(self.path).st_ino != self._ino:
                        self._open()
                    else:  # the same file: its mode, owner or size may have changed
                        self._check(os.fstat(self._fd))
                except (OSError, ValueError):
                    self._close()
                    return none
            fd = self._fd
            if fd is None:
                return none
            for _ in range(100):
                raw = os.pread(fd, SIZE, 0)
                if len(raw) != SIZE or raw[:8] != MAGIC:  # truncated or not ours
                    return none
                body, (crc,) = raw[8:8 + _BODY.size], _CRC.unpack(raw[8 + _BODY.size:])
                if zlib.crc32(body) == crc:
                    break
            else:
                return none
            ver, flags, seq, sleep_s, hb, stale, mx, pid = _BODY.unpack(body)
            if ver != VERSION or not all(math.isfinite(x) for x in (sleep_s, hb, stale, mx)):
                return none
            fresh = abs(time.time() - hb) <= stale
            s = min(max(sleep_s, 0.0), mx, HARD_MAX_SLEEP_S)
            share = (flags >> _SHARE_SHIFT) & 0xFF
            return HookState(s, bool(flags & 1), fresh, seq, pid,
                             share if 1 <= share <= 100 else None)
        except Exception:
            return none

    def sleep_s(self) -> float:
        """The sleep to apply now (0 unless the daemon is alive and active)."""
        return self.read().effective_sleep_s

    def share_pct(self) -> int | None:
        """The SM share (%) to run on now (None: the full device / no command)."""
        return self.read().effective_share_pct


def notify_ready() -> bool:
    """Tell the launcher (MPS actuator) that this process is ready: writes one byte to
    ``$GPUCONTROL_READY_FD`` and closes it. Returns False when there is nothing to notify.

    Only the process the launcher started signals: ``$GPUCONTROL_READY_PID`` must name this
    process and the descriptor must be a pipe. A process that merely inherited the variables
    (a worker started by a launcher such as torchrun, where that descriptor number may be one
    of its own files) leaves the descriptor alone. Both variables are removed from this
    process's environment on the first call, so its children do not inherit them."""
    fd_s = os.environ.pop(ENV_READY_FD, None)
    pid_s = os.environ.pop(ENV_READY_PID, None)
    if not fd_s or not pid_s:
        return False
    try:
        fd, pid = int(fd_s), int(pid_s)
        if pid != os.getpid() or fd < 0 or not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        try:
            os.write(fd, b"R")
        finally:
            os.close(fd)
        return True
    except (ValueError, OSError):
        return False


#: A commanded sleep is slept in slices this long, re-reading the hook file between them.
SLEEP_SLICE_S = 0.25


def _sleep_commanded(reader: HookReader) -> float:
    """Sleep what the hook file commands, in slices of at most :data:`SLEEP_SLICE_S`: after
    each one the file is read again and the sleep ends early when the command dropped (to 0
    when the daemon stopped, its guardian cleared the file, or its heartbeat went stale).
    Returns the seconds slept (the command when it held to the end)."""
    s = reader.sleep_s()
    if s <= 0:
        return 0.0
    start = time.monotonic()
    end = start + s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return s
        time.sleep(min(left, SLEEP_SLICE_S))
        now_s = reader.sleep_s()
        if start + now_s < end:  # never longer than first commanded; shorter when it dropped
            s, end = now_s, start + now_s
            elapsed = time.monotonic() - start
            if elapsed >= s:  # cut short: what was actually slept
                return elapsed


_readers: dict[str, HookReader] = {}
_last_end: dict[str, float] = {}


def after_iteration(path: str | os.PathLike[str] | None = None) -> float:
    """Sleep the commanded interval; call once at the end of each training iteration.

    Never raises. The first call also runs :func:`notify_ready`; when ``$GPUCONTROL_SOCKET``
    is set the iteration time (since the previous call, sleep excluded) is reported to the
    daemon.

    Parameters
    ----------
    path : str, os.PathLike or None
        The hook file; None: ``$GPUCONTROL_HOOK_FILE``, else the daemon's default for GPU 0.

    Returns
    -------
    float
        The seconds slept (0 when no daemon is active). The sleep is taken in slices of at
        most :data:`SLEEP_SLICE_S`, re-reading the file between them: it ends early when the
        daemon stops, dies (its guardian clears the file) or stops beating, or commands less.
    """
    try:
        key = os.fspath(path) if path is not None else ""
        reader = _readers.get(key)
        if reader is None:
            reader = _readers[key] = HookReader(path)
            notify_ready()
        now = time.monotonic()
        last = _last_end.get(key)
        if last is not None and os.environ.get("GPUCONTROL_SOCKET"):
            try:
                from gpucontrol.node.client import report_iteration

                report_iteration(1e3 * (now - last))
            except ImportError:
                pass
        s = _sleep_commanded(reader)
        _last_end[key] = time.monotonic()
        return s
    except Exception:
        return 0.0


@contextlib.contextmanager
def iteration(path: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Context-manager form: ``with iteration(): train_step()`` sleeps after the step
    (also when the step raises, so a retried step is throttled too).

    Parameters
    ----------
    path : str, os.PathLike or None
        The hook file; None: ``$GPUCONTROL_HOOK_FILE``, else the daemon's default for GPU 0.

    Yields
    ------
    None
        Control returns to the ``with`` body; the sleep follows it.
    """
    try:
        yield
    finally:
        after_iteration(path)
