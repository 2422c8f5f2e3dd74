"""The inference side of latency ingestion: ``report_latency(ms)``.

An inference loop calls :func:`report_latency` once per batch with the batch latency in
milliseconds. The call formats one short datagram and sends it, non-blocking, to the daemon's
Unix socket; it never blocks and never raises into the caller: when the daemon is not running,
its queue is full, or the value is not a finite non-negative number, the sample is dropped and
counted (``client().dropped``), and the call returns False.

Wire format (one datagram may carry several lines; see :mod:`gpucontrol.node.monitor`)::

    L <float>\\n     one inference batch latency, ms
    I <float>\\n     one training iteration time, ms (sent by :mod:`gpucontrol.node.hooks`)

The socket path is the ``socket_path`` argument, else ``$GPUCONTROL_SOCKET``, else the
daemon's default for GPU 0 (``<runtime dir>/gpu0.sock``).

Examples
--------
>>> from gpucontrol.node.client import report_latency
>>> report_latency(12.5, socket_path="/nonexistent/gpucontrol.sock")   # no daemon: dropped
False
"""

from __future__ import annotations

import atexit
import math
import os
import socket
import threading

ENV_SOCKET = "GPUCONTROL_SOCKET"
#: Largest value accepted (ms); larger is treated as garbage by both ends.
MAX_VALUE_MS = 1e7

__all__ = [
    "ENV_SOCKET",
    "MAX_VALUE_MS",
    "ReportClient",
    "client",
    "report_iteration",
    "report_latency",
]


def default_socket_path() -> str:
    env = os.environ.get(ENV_SOCKET)
    if env:
        return env
    from gpucontrol.node._runtime import default_path

    return str(default_path("sock"))


class ReportClient:
    """A non-blocking datagram client bound to one socket path (safe across fork/threads).

    Parameters
    ----------
    socket_path : str, os.PathLike or None
        The daemon's socket; None: ``$GPUCONTROL_SOCKET``, else the default for GPU 0.

    Attributes
    ----------
    sent, dropped : int
        Samples handed to the kernel, and samples dropped (bad value, no daemon, queue full).
    """

    def __init__(self, socket_path: str | os.PathLike[str] | None = None) -> None:
        self.path = os.fspath(socket_path) if socket_path is not None else default_socket_path()
        self.sent = 0
        self.dropped = 0
        self._sock: socket.socket | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def _socket(self) -> socket.socket:
        if self._sock is None or self._pid != os.getpid():  # a forked child gets its own
            with self._lock:
                if self._sock is None or self._pid != os.getpid():
                    self._sock = socket.socket(
                        socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK
                        | socket.SOCK_CLOEXEC)
                    self._pid = os.getpid()
        return self._sock

    def send(self, kind: str, value: float) -> bool:
        """Send one sample (``kind`` ``"L"`` or ``"I"``); False when dropped. Never raises."""
        try:
            if isinstance(value, (str, bytes, bytearray, memoryview, bool)) or (
                    type(value).__name__ in ("bool_", "bool")):  # numpy's bool too
                self.dropped += 1
                return False
            v = float(value) + 0.0  # -0.0 is sent as 0.0
            if not (math.isfinite(v) and 0.0 <= v <= MAX_VALUE_MS) or kind not in ("L", "I"):
                self.dropped += 1
                return False
            self._socket().sendto(f"{kind} {v!r}\n".encode("ascii"), self.path)
            self.sent += 1
            return True
        except Exception:
            self.dropped += 1
            return False

    def _after_fork(self) -> None:
        """In a forked child: a fresh lock (another thread may have held it at the fork) and
        no socket (a new one is made on the next send)."""
        self._lock = threading.Lock()
        self._sock, self._pid = None, -1

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


_clients: dict[str, ReportClient] = {}
_clients_lock = threading.Lock()


def client(socket_path: str | os.PathLike[str] | None = None) -> ReportClient:
    """The shared client for a socket path.

    Parameters
    ----------
    socket_path : str, os.PathLike or None
        The daemon's socket; None: ``$GPUCONTROL_SOCKET``, else the default for GPU 0.

    Returns
    -------
    ReportClient
        One client per path, shared by every caller in the process.
    """
    try:
        path = os.fspath(socket_path) if socket_path is not None else default_socket_path()
    except Exception:
        path = ""
    c = _clients.get(path)
    if c is None:
        with _clients_lock:
            c = _clients.get(path)
            if c is None:
                c = _clients[path] = ReportClient(path)
    return c


def close_all() -> None:
    """Close every shared client's socket (registered with atexit; safe to call any time)."""
    with _clients_lock:
        for c in _clients.values():
            c.close()
        _clients.clear()


atexit.register(close_all)


def _after_fork_in_child() -> None:
    global _clients_lock
    _clients_lock = threading.Lock()
    for c in list(_clients.values()):
        c._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def report_latency(ms: float, socket_path: str | os.PathLike[str] | None = None) -> bool:
    """Report one inference batch latency (ms) to the daemon. Non-blocking; never raises.

    Parameters
    ----------
    ms : float
        The batch latency in milliseconds, a real number (a string, bytes or a bool is
        dropped), finite, in ``[0, 1e7]`` (else dropped).
    socket_path : str, os.PathLike or None
        The daemon's socket; None: ``$GPUCONTROL_SOCKET``, else the default for GPU 0.

    Returns
    -------
    bool
        True when the datagram was handed to the kernel, False when it was dropped.
    """
    try:
        return client(socket_path).send("L", ms)
    except Exception:
        return False


def report_iteration(ms: float, socket_path: str | os.PathLike[str] | None = None) -> bool:
    """Report one training iteration time (ms); used by :mod:`gpucontrol.node.hooks`.

    Parameters
    ----------
    ms : float
        The iteration time in milliseconds, finite, in ``[0, 1e7]`` (else dropped).
    socket_path : str, os.PathLike or None
        The daemon's socket; None: ``$GPUCONTROL_SOCKET``, else the default for GPU 0.

    Returns
    -------
    bool
        True when sent, False when dropped. Never raises.
    """
    try:
        return client(socket_path).send("I", ms)
    except Exception:
        return False
