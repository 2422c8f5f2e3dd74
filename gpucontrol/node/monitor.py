"""The inference latency monitor: per-period mean, p99 and count.

It is the monitor box of the GPUColo paper (Chen et al., ICDCS 2024), Fig. 3.

:class:`LatencyAggregator` collects samples and, once per control period, hands back a
:class:`PeriodStats` (and resets). :class:`LatencyMonitor` adds the receiving end of
:func:`gpucontrol.node.client.report_latency`: a Unix datagram socket (mode 0600) read by a
background thread.

Wire format: a datagram holds one or more lines ``L <ms>`` (inference batch latency) or
``I <ms>`` (training iteration time), each a finite number in ``[0, 1e7]``. Anything else --
garbage, a truncated (over-long) datagram, an empty line in the middle, a bad number -- is
counted in ``malformed`` and dropped; it never stops the monitor.

Statistics: the mean and count are exact; the p99 uses the nearest-rank method over the
period's samples, or over a uniform reservoir of ``max_samples`` of them when a period holds
more (a flood cannot grow memory without bound).
"""

from __future__ import annotations

import errno
import math
import os
import random
import re
import socket
import stat
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucontrol.measurement import Measurement
from gpucontrol.node._runtime import open_private_dir
from gpucontrol.node.client import MAX_VALUE_MS

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

__all__ = [
    "MAX_DATAGRAM",
    "LatencyAggregator",
    "LatencyMonitor",
    "PeriodStats",
    "parse_datagram",
    "socket_path_fits",
]

#: Receive buffer per datagram; a longer datagram is truncated and counted as malformed.
MAX_DATAGRAM = 4096
#: The longest socket name bound through its directory's descriptor (``/proc/self/fd/N/NAME``
#: stays within 100 bytes for any N below 100 000), bytes; a longer one is bound by its path.
MAX_NAME_VIA_FD = 80
#: The longest path a Unix socket address holds (``sun_path``, 108 bytes with its NUL).
MAX_SOCKET_PATH = 107


def socket_path_fits(path: str | os.PathLike[str]) -> bool:
    """Whether :class:`LatencyMonitor` can bind ``path``: its name is short enough to be
    bound through its directory's descriptor, or its whole absolute path fits an address.

    >>> socket_path_fits("/run/gpucontrol/gpu0.sock"), socket_path_fits("/tmp/" + "a" * 120)
    (True, False)
    """
    p = os.fsencode(os.path.abspath(path))
    return len(os.path.basename(p)) <= MAX_NAME_VIA_FD or len(p) <= MAX_SOCKET_PATH


#: One sample line: ``L`` or ``I``, one space, a plain non-negative decimal (optionally with an
#: exponent), nothing else (no sign, underscores, extra spaces or carriage return).
_LINE = re.compile(rb"([LI]) ((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")


def parse_datagram(data: bytes) -> tuple[list[float], list[float], int]:
    """Split one datagram into (latencies, iteration times, malformed line count).

    >>> parse_datagram(b"L 12.5\\nL 13\\nI 200\\nbogus\\n")
    ([12.5, 13.0], [200.0], 1)
    """
    lat: list[float] = []
    it: list[float] = []
    bad = 0
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        return lat, it, 1
    for line in lines:
        m = _LINE.fullmatch(line) if len(line) <= 34 else None
        if m is None:
            bad += 1
            continue
        kind, v = m.group(1), float(m.group(2))
        if not (math.isfinite(v) and 0.0 <= v <= MAX_VALUE_MS):
            bad += 1
            continue
        (lat if kind == b"L" else it).append(v)
    return lat, it, bad


def _nearest_rank(sorted_xs: list[float], q: float) -> float:
    if not sorted_xs:
        return math.nan
    k = max(0, min(len(sorted_xs) - 1, math.ceil(q * len(sorted_xs)) - 1))
    return sorted_xs[k]


@dataclass(frozen=True)
class PeriodStats:
    """One control period's latency statistics (ms); NaN where there were no samples."""

    start: float
    end: float
    count: int
    mean_ms: float
    p99_ms: float
    max_ms: float
    malformed: int
    iter_count: int = 0
    iter_mean_ms: float = math.nan

    def to_measurement(self, restarting: bool = False) -> Measurement:
        """The :class:`gpucontrol.Measurement` the controller takes."""
        return Measurement(self.mean_ms, self.p99_ms, self.count, restarting,
                           iteration_s=self.iter_mean_ms / 1e3 if self.iter_count else math.nan)

    def as_dict(self) -> dict[str, float | int]:
        return {"count": self.count, "mean_ms": self.mean_ms, "p99_ms": self.p99_ms,
                "max_ms": self.max_ms, "malformed": self.malformed,
                "iter_count": self.iter_count, "iter_mean_ms": self.iter_mean_ms}


class LatencyAggregator:
    """Thread-safe per-period aggregation of latency samples.

    >>> agg = LatencyAggregator()
    >>> for ms in range(1, 101):
    ...     agg.add(float(ms))
    >>> s = agg.collect()
    >>> s.count, s.mean_ms, s.p99_ms
    (100, 50.5, 99.0)
    >>> agg.collect().count     # reset by collect
    0
    """

    def __init__(self, max_samples: int = 100_000) -> None:
        if int(max_samples) < 100:
            raise ValueError(f"max_samples must be >= 100, got {max_samples!r}")
        self.max_samples = int(max_samples)
        self._lock = threading.Lock()
        self._rng = random.Random(0x6770)
        self.total_count = 0
        self.total_malformed = 0
        self._reset(time.monotonic())

    def _reset(self, now: float) -> None:
        self._start = now
        self._samples: list[float] = []
        self._n = 0
        self._sum = 0.0
        self._max = -math.inf
        self._bad = 0
        self._it_n = 0
        self._it_sum = 0.0

    def add(self, ms: float) -> None:
        """One latency sample (assumed valid; use :meth:`feed` for untrusted bytes)."""
        with self._lock:
            self._add(ms)

    def _add(self, ms: float) -> None:
        self._n += 1
        self._sum += ms
        self._max = max(self._max, ms)
        if len(self._samples) < self.max_samples:
            self._samples.append(ms)
        else:  # reservoir sampling keeps a uniform sample for the p99
            j = self._rng.randrange(self._n)
            if j < self.max_samples:
                self._samples[j] = ms

    def add_iteration(self, ms: float) -> None:
        with self._lock:
            self._it_n += 1
            self._it_sum += ms

    def add_malformed(self, n: int = 1) -> None:
        with self._lock:
            self._bad += n
            self.total_malformed += n

    def feed(self, data: bytes) -> int:
        """Parse one datagram's bytes; returns the number of malformed lines."""
        lat, it, bad = parse_datagram(data)
        with self._lock:
            for v in lat:
                self._add(v)
            self.total_count += len(lat)
            self._it_n += len(it)
            self._it_sum += sum(it)
            self._bad += bad
            self.total_malformed += bad
        return bad

    def collect(self) -> PeriodStats:
        """Statistics since the last collect, then reset."""
        now = time.monotonic()
        with self._lock:
            xs = sorted(self._samples)
            n = self._n
            out = PeriodStats(
                start=self._start, end=now, count=n,
                mean_ms=self._sum / n if n else math.nan,
                p99_ms=_nearest_rank(xs, 0.99), max_ms=self._max if n else math.nan,
                malformed=self._bad, iter_count=self._it_n,
                iter_mean_ms=self._it_sum / self._it_n if self._it_n else math.nan)
            self._reset(now)
        return out


class LatencyMonitor(LatencyAggregator):
    """A :class:`LatencyAggregator` fed by a Unix datagram socket (mode 0600).

    Parameters
    ----------
    socket_path : path
        Where to bind. A stale socket left by a dead daemon is replaced; a live one (another
        daemon answers) or a non-socket file there raises ValueError.
    max_samples : int
        Reservoir size for the p99.

    Use as a context manager, or call :meth:`start` and :meth:`close`.
    """

    def __init__(self, socket_path: str | os.PathLike[str], max_samples: int = 100_000,
                 rcvbuf: int = 4 << 20) -> None:
        super().__init__(max_samples)
        self.path = os.fspath(socket_path)
        self._sock = self._bind(self.path, rcvbuf)
        self._ino = os.lstat(self.path).st_ino
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _bind(path: str, rcvbuf: int) -> socket.socket:
        # every directory up to the socket's is checked and held open; the socket is then
        # probed, replaced and bound through that descriptor (/proc/self/fd/N/name), so a
        # directory swapped in between cannot redirect the bind or the unlink
        dfd = open_private_dir(os.path.dirname(os.path.abspath(path)), create=True)
        try:
            name = os.path.basename(path)
            at = f"/proc/self/fd/{dfd}/{name}"
            if (len(os.fsencode(name)) > MAX_NAME_VIA_FD
                    or not os.path.isdir(f"/proc/self/fd/{dfd}")):
                at = path  # no /proc (or a very long name): the checked path itself
            return LatencyMonitor._bind_at(path, at, name, dfd, rcvbuf)
        finally:
            os.close(dfd)

    @staticmethod
    def _bind_at(path: str, at: str, name: str, dfd: int, rcvbuf: int) -> socket.socket:
        try:
            st = os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISSOCK(st.st_mode):
                raise ValueError(f"{path} exists and is not a socket; refusing to replace it")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                probe.connect(at)
            except OSError as exc:
                if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                    raise
                os.unlink(name, dir_fd=dfd)  # stale: nobody is bound to it
            else:
                raise ValueError(f"{path} is in use by another process (a daemon is running?)")
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        except OSError:
            pass
        old = os.umask(0o177)  # the socket inode is created 0600 (no window of wider access)
        try:
            sock.bind(at)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old)
        os.chmod(name, 0o600, dir_fd=dfd)  # a socket we just made, not a link
        sock.settimeout(0.2)
        return sock

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpucontrol-monitor",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        buf = bytearray(MAX_DATAGRAM)
        sock = self._sock
        while not self._stop.is_set():
            try:
                n, _anc, flags, _addr = sock.recvmsg_into([buf], 0, 0)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.01)
                continue
            if self._stop.is_set():
                return
            try:
                if flags & socket.MSG_TRUNC:
                    self.add_malformed(1)
                else:
                    self.feed(bytes(buf[:n]))
            except Exception:
                self.add_malformed(1)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            try:  # wake the receiving thread now rather than at its next timeout
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK) as s:
                    s.sendto(b"", self.path)
            except OSError:
                pass
            self._thread.join(2.0)
            self._thread = None
        try:
            self._sock.close()
        finally:
            try:
                if os.lstat(self.path).st_ino == self._ino:  # still ours, not a successor's
                    os.unlink(self.path)
            except OSError:
                pass

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
