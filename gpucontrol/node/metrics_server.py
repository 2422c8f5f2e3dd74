"""The metrics HTTP server of the daemon: ``/metrics``, ``/healthz``, ``/readyz``, with its
resources bounded (issue B13).

At most ``max_connections`` connections are served at once, plus 4 more for ``/healthz`` and
``/readyz`` only (more are closed at once and counted by ``on_reject``), and a connection that
has not sent its whole request within ``timeout_s`` (1 s on the health-only connections) is
closed, however steadily it trickles bytes: slow clients cannot starve the liveness probe.
Both health answers are JSON: 200 when ``live`` (``/healthz``) or ``ready`` (``/readyz``)
holds, else 503, the body saying why.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

__all__ = ["MetricsServer"]

logger = logging.getLogger(__name__)

_HEALTH_PATHS = ("/healthz", "/readyz")


class _Server(ThreadingMixIn, WSGIServer):
    """A threading WSGI server with a cap on concurrent connections (issue B13).

    Each connection must deliver its whole request within ``request_timeout_s`` (a total
    deadline, not per receive: a client trickling a header line at a time is cut off too).
    When all ``max_connections`` slots are taken, up to ``health_connections`` more are
    accepted for ``/healthz`` and ``/readyz`` only, with a deadline of ``health_timeout_s``
    (anything else there is answered 503), so slow clients cannot starve the probes."""

    daemon_threads = True
    request_queue_size = 16
    max_connections = 16  # set per server by a subclass (DaemonMetrics._serve)
    request_timeout_s = 5.0
    health_connections = 4
    health_timeout_s = 1.0

    def __init__(self, *args: Any, **kw: Any) -> None:
        self.slots = threading.BoundedSemaphore(self.max_connections)
        self.health_slots = threading.BoundedSemaphore(self.health_connections)
        self.health_only: dict[Any, threading.BoundedSemaphore] = {}
        self.on_reject: Callable[[], None] = lambda: None
        super().__init__(*args, **kw)

    def process_request(self, request: Any, client_address: Any) -> None:
        slots = self.slots
        if not slots.acquire(blocking=False):
            slots = self.health_slots
            if not slots.acquire(blocking=False):
                self.on_reject()
                self.shutdown_request(request)  # over the cap: closed at once, no thread
                return
            self.health_only[request] = slots
        try:
            request.settimeout(self.request_timeout_s)  # an idle connection is dropped
            super().process_request(request, client_address)
        except BaseException:
            self.health_only.pop(request, None)
            slots.release()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        # an idle client timing out is routine: a debug line, not a traceback on stderr
        logger.debug("metrics connection from %s ended: %s", client_address,
                     sys.exc_info()[1])

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            (self.health_only.pop(request, None) or self.slots).release()


class _DeadlineReader(io.RawIOBase):
    """Reads a socket until a deadline (monotonic): each receive waits only what is left."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not received in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(b)


class _QuietHandler(WSGIRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.health_only = self.request in self.server.health_only
        limit = (min(self.server.health_timeout_s, self.server.request_timeout_s)
                 if self.health_only else self.server.request_timeout_s)
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection,
                                                       time.monotonic() + limit))

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        self.connection.settimeout(self.server.request_timeout_s)  # for the answer
        if self.health_only and self.path.split("?", 1)[0] not in _HEALTH_PATHS:
            self.send_error(503, "busy: only /healthz and /readyz are served now")
            return False
        return True

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("metrics request: %s", format % args)


class MetricsServer:
    """Serve a registry and the health answers on ``addr:port`` from a thread of its own.

    Parameters
    ----------
    registry : prometheus_client.CollectorRegistry
        What ``/metrics`` renders.
    health : callable
        Returns the health dict (``live``, ``ready``, ...) of ``/healthz`` and ``/readyz``.
    port : int
        TCP port (0: any free port).
    addr : str
        Address to bind.
    max_connections : int
        Connections served at once; 4 more are kept for the health endpoints.
    timeout_s : float
        A connection that has not sent its whole request this long after it was accepted is
        closed.
    on_reject : callable
        Called for each connection refused over the cap.

    Attributes
    ----------
    port : int
        The port bound.
    url : str
        ``http://addr:port/metrics``.
    """

    def __init__(self, registry: CollectorRegistry, health: Callable[[], dict[str, Any]],
                 port: int, addr: str = "127.0.0.1", *, max_connections: int = 16,
                 timeout_s: float = 5.0, on_reject: Callable[[], None] = lambda: None) -> None:
        self.registry = registry
        self._health = health

        class _Bound(_Server):
            pass

        _Bound.max_connections = int(max_connections)
        _Bound.request_timeout_s = float(timeout_s)
        self._server = make_server(addr, port, self._app(), server_class=_Bound,
                                   handler_class=_QuietHandler)
        self._server.on_reject = on_reject
        self.port = int(self._server.server_port)
        host = f"[{addr}]" if ":" in addr else addr
        self.url = f"http://{host}:{self.port}/metrics"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="gpucontrol-metrics", daemon=True)
        self._thread.start()

    def _app(self) -> Callable[..., Iterable[bytes]]:
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "/")
            if path in _HEALTH_PATHS:
                h = self._health()
                ok = bool(h.get("live" if path == "/healthz" else "ready"))
                body = json.dumps(h).encode()
                start_response("200 OK" if ok else "503 Service Unavailable",
                               [("Content-Type", "application/json"),
                                ("Content-Length", str(len(body)))])
                return [body]
            if path in ("/", "/metrics"):
                return metrics_app(environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"try /metrics, /healthz or /readyz\n"]

        return app

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
