"""The daemon's latency sources as knobs (``--latency-source``, registry
:data:`gpucontrol.node.registry.LATENCY_SOURCES`).

* ``socket`` -- :class:`SocketSource`: the datagrams ``report_latency`` sends
  (:class:`gpucontrol.node.monitor.LatencyMonitor`).
* ``prometheus`` -- :class:`ScrapeSource`: a scraped latency histogram
  (:class:`gpucontrol.node.prom_source.PrometheusSource`), with the reason of each period
  without a usable reading.

A source's ``apply()`` ends the period and returns its
:class:`~gpucontrol.node.monitor.PeriodStats` (``collect`` is the same call, the face of the
monitor classes).
"""

from __future__ import annotations

from typing import Any

from gpucontrol.node.knobs import Knob
from gpucontrol.node.monitor import LatencyMonitor, PeriodStats
from gpucontrol.node.prom_source import PrometheusSource

__all__ = ["ScrapeSource", "SocketSource"]


class SocketSource(Knob):
    """``report_latency`` datagrams on the daemon's Unix socket (``--socket``).

    Parameters
    ----------
    cfg : DaemonConfig
        The settings (``socket``).
    """

    name = "socket"

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.monitor: LatencyMonitor | None = None
        self.reason = ""  # a socket has no failed reading: its malformed lines are counted
        self.last_error = ""

    def start(self, host: Any) -> None:
        """Bind the socket and start receiving."""
        self.monitor = LatencyMonitor(self.cfg.socket).start()

    def apply(self, value: Any = None) -> PeriodStats:
        """End the period.

        Parameters
        ----------
        value : Any
            Unused.

        Returns
        -------
        PeriodStats
            The period's statistics.
        """
        assert self.monitor is not None
        return self.monitor.collect()

    collect = apply

    def where(self) -> str:
        """What to check when no latency comes."""
        return f"is the inference server reporting to {self.cfg.socket}?"

    def close(self) -> None:
        """Unbind the socket."""
        if self.monitor is not None:
            self.monitor.close()


class ScrapeSource(Knob):
    """A Prometheus latency histogram scraped once per period (``--prometheus-url``).

    Parameters
    ----------
    cfg : DaemonConfig
        The settings (``prometheus_url``, ``prometheus_metric``, ``scrape_timeout_s``).
    """

    name = "prometheus"

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.source: PrometheusSource | None = None

    @property
    def reason(self) -> str:
        """The last period's reason without a usable reading ("" when usable)."""
        return self.source.reason if self.source is not None else ""

    @property
    def last_error(self) -> str:
        """The last failed scrape's message."""
        return self.source.last_error if self.source is not None else ""

    def start(self, host: Any) -> None:
        """Take the baseline scrape (a failure is retried at the first period)."""
        cfg = self.cfg
        self.source = PrometheusSource(cfg.prometheus_url, cfg.prometheus_metric,
                                       timeout_s=cfg.scrape_timeout_s).start()

    def apply(self, value: Any = None) -> PeriodStats:
        """Scrape and end the period (never raises, never waits past the deadline).

        Parameters
        ----------
        value : Any
            Unused.

        Returns
        -------
        PeriodStats
            The period's statistics from the bucket deltas.
        """
        assert self.source is not None
        return self.source.collect()

    collect = apply

    def where(self) -> str:
        """What to check when no latency comes."""
        return (f"is {self.cfg.prometheus_url} serving a growing "
                f"{self.cfg.prometheus_metric} histogram?")

    def close(self) -> None:
        """Nothing held (each scrape is its own connection)."""
        if self.source is not None:
            self.source.close()
