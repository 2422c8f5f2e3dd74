"""The daemon's Prometheus metrics, served with ``prometheus_client`` on loopback by default.

Each :class:`DaemonMetrics` has its own :class:`prometheus_client.CollectorRegistry` (never the
process-global one), so two daemons, or a daemon inside a test process, do not share series.

Series (every one prefixed ``gpucontrol_``):

=================================  =======  =================================================
name                               type     meaning
=================================  =======  =================================================
``latency_mean_seconds``           gauge    mean inference batch latency of the last period
``latency_p99_seconds``            gauge    p99 inference batch latency of the last period
``latency_samples``                gauge    latency reports in the last period
``slo_seconds``                    gauge    the latency set point (NaN in open loop)
``sleep_seconds``                  gauge    commanded training sleep per run quantum
``mps_active_thread_ratio``        gauge    training's MPS active-thread share (0..1)
``stopped_ratio``                  gauge    achieved stopped fraction of the training
``periods_total``                  counter  control periods run
``samples_total``                  counter  latency reports received
``malformed_total``                counter  malformed report lines dropped
=================================  =======  =================================================

Examples
--------
>>> from gpucontrol.node.metrics import DaemonMetrics
>>> m = DaemonMetrics(port=None)            # no server: just the registry
>>> m.update(latency_mean_ms=20.0, latency_p99_ms=31.0, latency_samples=3, sleep_s=0.01,
...          mps_pct=50.0, slo_ms=75.0, stopped_fraction=0.05, periods_total=1,
...          samples_total=3, malformed_total=0)
>>> print(m.render().decode())
# HELP gpucontrol_latency_mean_seconds ...
gpucontrol_latency_mean_seconds 0.02
...
gpucontrol_sleep_seconds 0.01
...
>>> m.close()
"""

from __future__ import annotations

import logging
import math
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, make_wsgi_app

__all__ = ["DaemonMetrics"]

logger = logging.getLogger(__name__)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        logger.debug("metrics request: %s", format % args)


class DaemonMetrics:
    """One daemon's metrics registry and, when ``port`` is given, its HTTP server.

    Parameters
    ----------
    port : int or None
        TCP port to serve ``/metrics`` on (0: any free port); None: no server.
    addr : str
        Address to bind; loopback (``127.0.0.1``) by default.

    Attributes
    ----------
    registry : prometheus_client.CollectorRegistry
        The daemon's own registry.
    port : int or None
        The port actually bound (useful with ``port=0``).
    url : str or None
        ``http://addr:port/metrics`` while serving.
    """

    def __init__(self, port: int | None = None, addr: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"gpucontrol_{name}", doc, registry=r)

        self._mean = gauge("latency_mean_seconds",
                           "Mean inference batch latency over the last control period.")
        self._p99 = gauge("latency_p99_seconds",
                          "p99 inference batch latency over the last control period.")
        self._samples = gauge("latency_samples",
                              "Latency reports received in the last control period.")
        self._slo = gauge("slo_seconds", "Latency set point (NaN when running open loop).")
        self._sleep = gauge("sleep_seconds", "Commanded training sleep per run quantum.")
        self._mps = gauge("mps_active_thread_ratio",
                          "The training's MPS active-thread share (0..1).")
        self._stopped = gauge("stopped_ratio",
                              "Achieved stopped fraction of the training (NaN with the hook).")
        self._periods = Counter("gpucontrol_periods", "Control periods run.", registry=r)
        self._reports = Counter("gpucontrol_samples", "Latency reports received.", registry=r)
        self._malformed = Counter("gpucontrol_malformed",
                                  "Malformed latency report lines dropped.", registry=r)
        self._counted = {"periods": 0.0, "samples": 0.0, "malformed": 0.0}
        for g in (self._mean, self._p99, self._slo, self._mps, self._stopped):
            g.set(math.nan)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.url: str | None = None
        if port is not None:
            self._serve(port, addr)

    def _serve(self, port: int, addr: str) -> None:
        self._server = make_server(addr, port, make_wsgi_app(self.registry),
                                   server_class=_Server, handler_class=_QuietHandler)
        self.port = int(self._server.server_port)
        host = f"[{addr}]" if ":" in addr else addr
        self.url = f"http://{host}:{self.port}/metrics"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="gpucontrol-metrics", daemon=True)
        self._thread.start()
        logger.info("serving metrics on %s", self.url)

    def update(self, *, latency_mean_ms: float, latency_p99_ms: float, latency_samples: int,
               sleep_s: float, mps_pct: float, slo_ms: float | None, stopped_fraction: float,
               periods_total: int, samples_total: int, malformed_total: int) -> None:
        """Record one control period (milliseconds and percentages are converted).

        Parameters
        ----------
        latency_mean_ms, latency_p99_ms : float
            The period's mean and p99 latency, ms (NaN when there were no reports).
        latency_samples : int
            Reports in the period.
        sleep_s : float
            Commanded sleep, s.
        mps_pct : float
            MPS active-thread percentage, 1..100.
        slo_ms : float or None
            Set point, ms; None in open loop.
        stopped_fraction : float
            Achieved stopped fraction (NaN when not measured).
        periods_total, samples_total, malformed_total : int
            Running totals since the daemon started; the counters advance to them.
        """
        self._mean.set(latency_mean_ms / 1e3)
        self._p99.set(latency_p99_ms / 1e3)
        self._samples.set(latency_samples)
        self._sleep.set(sleep_s)
        self._mps.set(mps_pct / 100.0)
        self._slo.set(math.nan if slo_ms is None else slo_ms / 1e3)
        self._stopped.set(stopped_fraction)
        for key, counter, total in (("periods", self._periods, periods_total),
                                    ("samples", self._reports, samples_total),
                                    ("malformed", self._malformed, malformed_total)):
            delta = float(total) - self._counted[key]
            if delta > 0:
                counter.inc(delta)
                self._counted[key] = float(total)

    def render(self) -> bytes:
        """The current exposition (Prometheus text format), as served.

        Returns
        -------
        bytes
            The text the ``/metrics`` endpoint answers with.
        """
        return generate_latest(self.registry)

    def close(self) -> None:
        """Stop the HTTP server (if any) and wait for its thread; safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
