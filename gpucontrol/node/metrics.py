"""The daemon's Prometheus metrics and health endpoints (``prometheus_client``).

Each :class:`DaemonMetrics` has its own :class:`prometheus_client.CollectorRegistry` (never the
process-global one), so two daemons, or a daemon inside a test process, do not share series.
Every series carries the labels ``gpu`` (the ``--gpu`` index) and ``target`` (what is being
throttled: ``metrics_target`` (``--config``), else the cgroup's name, the training command or
its PIDs).

The metrics are a view of the daemon's event stream: the daemon hands every record it logs
to :meth:`DaemonMetrics.observe` *before* writing the line, so whoever reads a period line
finds the metrics already updated. Served over HTTP (``127.0.0.1`` by default) and/or written
atomically to a node-exporter text file (``--metrics-textfile``) every period.

HTTP endpoints: ``/metrics`` (the exposition), ``/healthz`` (liveness: 200 while the control
loop beats, else 503) and ``/readyz`` (readiness: also set up, guardian alive, actuator up);
both health answers are JSON. The server bounds its resources (issue B13): at most
``max_connections`` connections are served at once, plus 4 more for ``/healthz`` and
``/readyz`` only (more are closed at once and counted in
``gpucontrol_metrics_rejected_connections_total``), and a connection that has not sent its
whole request within ``timeout_s`` (1 s on the health-only connections) is closed, however
steadily it trickles bytes: slow clients cannot starve the liveness probe.

Series (prefix ``gpucontrol_``; labels ``gpu``, ``target``):

==========================================  ========  ========================================
name                                        type      meaning
==========================================  ========  ========================================
``daemon_info``                             info      mode, outer loop, sleep method, version
``slo_seconds``                             gauge     latency set point (NaN open loop)
``latency_mean_seconds``                    gauge     mean batch latency, last period
``latency_p99_seconds``                     gauge     p99 batch latency, last period
``latency_error_seconds``                   gauge     SLO minus controlled latency (NaN held)
``sleep_seconds``                           gauge     commanded training sleep per quantum
``duty_commanded_ratio``                    gauge     commanded stopped fraction
``duty_achieved_ratio``                     gauge     measured stopped fraction
``spatial_share_ratio``                     gauge     training's spatial share, label backend
``saturated``                               gauge     1 while the sleep is pinned at a bound
``saturated_periods_total``                 counter   periods with a saturated sleep
``controller_fresh_starts_total``           counter   fresh starts after unexplainable readings
``control_action``                          enum      what the controller did last period
``model_gain``                              gauge     latency model gain in use (s per s)
``share_changes_total``                     counter   share changes made, label backend
``mps_changes_total``                       counter   MPS share changes (restarts) attempted
``mps_change_failures_total``               counter   MPS restarts that failed
``mps_restart_downtime_seconds``            summary   training downtime per MPS restart
``mps_up``                                  gauge     1 while the MPS control daemon is healthy
``latency_samples``                         gauge     latency reports in the last period
``periods_without_samples``                 gauge     consecutive periods with no report
``inference_silent``                        gauge     1 once that reached silent_periods
``samples_total``                           counter   latency reports received
``malformed_reports_total``                 counter   malformed report lines dropped
``latency_source_errors_total``             counter   scrapes that failed, label reason
``latency_source_resets_total``             counter   scraped counters that went down
``periods_total``                           counter   control periods run
``last_period_timestamp_seconds``           gauge     Unix time of the last period
``actuator_up``                             gauge     1 while the sleep actuator works
``guardian_up``                             gauge     1 while the guardian process runs
``guardian_restarts_total``                 counter   guardians restarted after dying
``heartbeat_age_seconds``                   gauge     seconds since the loop last beat
``log_dropped_lines_total``                 counter   log lines dropped (stalled reader)
``metrics_rejected_connections_total``      counter   scrapes refused over the cap
==========================================  ========  ========================================

Examples
--------
>>> from gpucontrol.node.metrics import DaemonMetrics
>>> m = DaemonMetrics(port=None, gpu=0, target="train", slo_ms=75.0)   # registry only
>>> m.observe({"period": 1, "count": 3, "mean_ms": 20.0, "p99_ms": 31.0, "sleep_s": 0.01,
...            "mps_pct": 50.0, "reason": "inner", "error_ms": 55.0})
>>> print(m.render().decode())
# HELP gpucontrol_daemon_info ...
gpucontrol_sleep_seconds{gpu="0",target="train"} 0.01
...
>>> m.close()
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Info,
    Summary,
    generate_latest,
)

from gpucontrol.node.metrics_server import MetricsServer
from gpucontrol.two_tier import FRESH_START

if TYPE_CHECKING:
    from gpucontrol.node.config import DaemonConfig

__all__ = ["ACTIONS", "DaemonMetrics", "default_target", "waiting_server"]

logger = logging.getLogger(__name__)

#: States of ``gpucontrol_control_action``.
ACTIONS = ("initial", "inner", "outer", "hold", "open_loop")
_LABELS = ("gpu", "target")


def default_target(*, cgroup: str | None, training_cmd: str | None,
                   training_pids: Iterable[int]) -> str:
    """The ``target`` label when ``metrics_target`` is not set.

    Parameters
    ----------
    cgroup : str or None
        The training's cgroup (its last path component is used).
    training_cmd : str or None
        The training command (its script, or else its program name, is used).
    training_pids : iterable of int
        The training PIDs (``pid-4242-4243``).

    Returns
    -------
    str
        A short, stable name.

    Examples
    --------
    >>> default_target(cgroup=None, training_cmd="python /opt/train.py --x 1",
    ...                training_pids=())
    'train.py'
    >>> default_target(cgroup="/sys/fs/cgroup/train", training_cmd=None, training_pids=[7])
    'train'
    """
    if cgroup:
        return os.path.basename(os.path.normpath(cgroup)) or "cgroup"
    if training_cmd:
        try:
            words = shlex.split(training_cmd)
        except ValueError:
            words = training_cmd.split()
        script = next((w for w in words[1:] if w.endswith(".py")), None)
        return os.path.basename(script or (words[0] if words else "training"))
    pids = list(training_pids)
    return "pid-" + "-".join(str(p) for p in pids) if pids else "training"


def _action(reason: str, mps_changed: bool) -> str:
    if reason == "fixed":
        return "open_loop"
    if reason == "initial":
        return "initial"
    if mps_changed:
        return "outer"
    if reason.startswith("hold"):
        return "hold"
    return "inner"


def _num(x: Any) -> float:
    """A record value as a float; None (NaN written as null) and junk become NaN."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


class DaemonMetrics:
    """One daemon's metrics registry and, when ``port`` is given, its HTTP server.

    Parameters
    ----------
    port : int or None
        TCP port to serve ``/metrics``, ``/healthz`` and ``/readyz`` on (0: any free port);
        None: no server.
    addr : str
        Address to bind; loopback (``127.0.0.1``) by default.
    gpu : int
        The ``gpu`` label.
    target : str
        The ``target`` label.
    slo_ms : float or None
        The set point (None: open loop).
    info : dict or None
        Static facts for ``gpucontrol_daemon_info`` (mode, outer, method...).
    backend : str
        The spatial-sharing backend label (``mps``, ``cpu.max``, ``green-context`` or
        ``none``).
    textfile : str or None
        Also write the exposition to this file (atomically, mode 0644) after every period,
        for node-exporter's text-file collector; removed by :meth:`close`.
    health : callable or None
        Returns the health dict (``live``, ``ready``, ...) the endpoints answer with.
    max_connections : int
        Connections served at once; 4 more are kept for the health endpoints; more are
        refused.
    timeout_s : float
        A connection that has not sent its whole request this long after it was accepted is
        closed.
    mps : bool or None
        Whether an MPS control daemon is in use (``gpucontrol_mps_up``); None: when the
        backend is ``mps``.

    Attributes
    ----------
    registry : prometheus_client.CollectorRegistry
        The daemon's own registry.
    port : int or None
        The port actually bound (useful with ``port=0``).
    url : str or None
        ``http://addr:port/metrics`` while serving.
    """

    def __init__(self, port: int | None = None, addr: str = "127.0.0.1", *, gpu: int = 0,
                 target: str = "training", slo_ms: float | None = None,
                 info: dict[str, str] | None = None, backend: str = "none",
                 textfile: str | None = None,
                 health: Callable[[], dict[str, Any]] | None = None,
                 max_connections: int = 16, timeout_s: float = 5.0,
                 mps: bool | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.textfile = textfile
        self._health = health
        self._lock = threading.Lock()
        labels = {"gpu": str(int(gpu)), "target": str(target)}
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"gpucontrol_{name}", doc, _LABELS, registry=r).labels(**labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(f"gpucontrol_{name}", doc, _LABELS, registry=r).labels(**labels)

        self._info_facts = {k: str(v) for k, v in (info or {}).items()}
        self._info = Info("gpucontrol_daemon", "Static facts of the daemon (value 1).",
                          _LABELS, registry=r).labels(**labels)
        self._info.info(self._info_facts)
        gauge("slo_seconds", "Latency set point (NaN when running open loop).").set(
            math.nan if slo_ms is None else slo_ms / 1e3)
        self._mean = gauge("latency_mean_seconds",
                           "Mean inference batch latency over the last control period.")
        self._p99 = gauge("latency_p99_seconds",
                          "p99 inference batch latency over the last control period.")
        self._error = gauge("latency_error_seconds",
                            "SLO minus the controlled latency statistic (positive: headroom; "
                            "NaN when the controller held).")
        self._sleep = gauge("sleep_seconds", "Commanded training sleep per run quantum.")
        self._duty_cmd = gauge("duty_commanded_ratio",
                               "Commanded stopped fraction of the training (0..1).")
        self._duty_got = gauge("duty_achieved_ratio",
                               "Measured stopped fraction of the training (0..1; NaN with "
                               "the cooperative hook).")
        self._share_family = Gauge("gpucontrol_spatial_share_ratio",
                                   "The training's spatial GPU share (0..1), e.g. the MPS "
                                   "active-thread percentage / 100.", (*_LABELS, "backend"),
                                   registry=r)
        self._labels = labels
        self._backend = str(backend)
        self._share = self._share_family.labels(**labels, backend=self._backend)
        self._saturated = gauge("saturated", "1 while the commanded sleep is pinned at a "
                                "bound (the inner loop alone cannot reach the SLO).")
        self._saturated_n = counter("saturated_periods",
                                    "Control periods with a saturated sleep.")
        self._fresh_starts = counter(
            "controller_fresh_starts", "Fresh starts of the controller: latency readings past "
            "explaining (a latency source gone wrong) became explainable again, and it started "
            "over as built, at its starting share.")
        self._action = Enum("gpucontrol_control_action",
                            "What the controller did in the last period: the inner (sleep) "
                            "tier, the outer (spatial share) tier, hold, or open loop.", _LABELS,
                            states=list(ACTIONS), registry=r).labels(**labels)
        self._gain = gauge("model_gain", "Latency model gain in use: seconds of latency per "
                           "second of sleep (the adaptive estimate when adaptive).")
        self._share_changes = Counter(
            "gpucontrol_share_changes", "Spatial share changes made (an MPS restart attempted, "
            "or a restart-free change applied), by backend.", (*_LABELS, "backend"), registry=r)
        self._mps_changes = counter("mps_changes", "MPS share changes (training restarts) "
                                    "attempted.")
        self._mps_failures = counter("mps_change_failures", "MPS restarts that failed.")
        self._downtime = Summary("gpucontrol_mps_restart_downtime_seconds",
                                 "Training downtime per successful MPS restart.", _LABELS,
                                 registry=r).labels(**labels)
        self._mps_up = gauge("mps_up", "1 while an MPS control daemon is in use and answers "
                             "its health checks.")
        self._samples = gauge("latency_samples",
                              "Latency reports received in the last control period.")
        self._silent = gauge("periods_without_samples",
                             "Consecutive control periods without a latency report.")
        self._silent_flag = gauge("inference_silent", "1 once silent_periods (--config) periods "
                                  "passed without a latency report (a silent inference "
                                  "server looks like an idle one).")
        self._reports = counter("samples", "Latency reports received.")
        self._malformed = counter("malformed_reports", "Malformed latency report lines "
                                  "dropped.")
        self._source_errors = Counter(
            "gpucontrol_latency_source_errors", "Periods whose latency scrape failed, by reason "
            "(timeout, refused, connection, http_status, too_long, not_finite, missing, "
            "malformed).", (*_LABELS, "reason"), registry=r)
        self._source_resets = counter("latency_source_resets", "Periods whose scraped "
                                      "latency counters went down (a restarted server).")
        self._periods = counter("periods", "Control periods run.")
        self._last = gauge("last_period_timestamp_seconds",
                           "Unix time at which the last control period ended (freshness).")
        self._actuator_up = gauge("actuator_up",
                                  "1 while the sleep actuator works, 0 after it stopped on "
                                  "an error (the training then runs unthrottled).")
        self._guardian_up = gauge("guardian_up", "1 while the guardian process (which "
                                  "resumes the training if the daemon dies or stalls) runs.")
        self._guardian_restarts = counter("guardian_restarts",
                                          "Guardian processes restarted after dying.")
        self._hb_age = gauge("heartbeat_age_seconds",
                             "Seconds since the control loop last beat its heartbeat.")
        self._log_dropped = counter("log_dropped_lines",
                                    "Log lines dropped because the log reader stalled.")
        self._rejected = counter("metrics_rejected_connections",
                                 "Metrics connections refused over the connection cap.")
        for g in (self._mean, self._p99, self._error, self._duty_got, self._duty_cmd,
                  self._gain, self._last):
            g.set(math.nan)
        self._share_value = math.nan
        self._share.set(math.nan)
        self._actuator_up.set(1)
        self._mps_up.set(1 if (self._backend == "mps" if mps is None else mps) else 0)
        self._action.state("initial")
        if health is not None:
            self._guardian_up.set_function(
                lambda: float(bool(self._call_health().get("guardian_alive"))))
            self._hb_age.set_function(
                lambda: _num(self._call_health().get("heartbeat_age_s")))
        self._log_seen = 0
        self._server: MetricsServer | None = None
        self.port: int | None = None
        self.url: str | None = None
        if port is not None:
            self._serve(port, addr, max_connections, timeout_s)

    @classmethod
    def from_config(cls, cfg: DaemonConfig, *, pids: Iterable[int], mps_ok: bool,
                    method: str, health: Callable[[], dict[str, Any]] | None = None,
                    backend: str | None = None, mps_up: bool | None = None) -> DaemonMetrics:
        """The daemon's metrics, as its configuration asks (server and/or text file).

        Parameters
        ----------
        cfg : DaemonConfig
            The daemon's settings (``metrics_*``, ``gpu``, ``slo_ms``, ``mode``, ``outer``...).
        pids : iterable of int
            The training processes (for the default ``target`` label).
        mps_ok : bool
            Whether an MPS control daemon is in use (the ``backend`` label when ``backend``
            is not given).
        method : str
            The sleep method in use.
        health : callable or None
            The health answer of ``/healthz`` and ``/readyz``.
        backend : str or None
            The spatial-share backend label (``mps``, ``cpu.max``, ``green-context`` or
            ``none``; :meth:`gpucontrol.node.share.ShareKnob.metrics_label`).
        mps_up : bool or None
            Whether an MPS control daemon is in use whatever the backend (green contexts run
            inside one); None: when the backend is ``mps``.

        Returns
        -------
        DaemonMetrics
            Serving when ``cfg.metrics_port`` is set.
        """
        target = cfg.metrics_target or default_target(
            cgroup=cfg.cgroup, training_cmd=cfg.training_cmd, training_pids=pids)
        return cls(cfg.metrics_port, cfg.metrics_addr, gpu=cfg.gpu, target=target,
                   slo_ms=cfg.slo_ms, backend=backend or ("mps" if mps_ok else "none"),
                   textfile=cfg.metrics_textfile, health=health, mps=mps_up,
                   info={"mode": cfg.mode, "outer": cfg.outer, "method": method,
                         "closed_loop": str(cfg.closed_loop).lower()})

    # ------------------------------------------------------------------ serving
    def _call_health(self) -> dict[str, Any]:
        try:
            return dict(self._health()) if self._health is not None else {}
        except Exception as exc:  # a health probe must answer, not raise
            return {"live": False, "ready": False, "error": str(exc)}

    def _serve(self, port: int, addr: str, max_connections: int, timeout_s: float) -> None:
        rejected = self._rejected
        self._server = MetricsServer(self.registry, self._call_health, port, addr,
                                     max_connections=max_connections, timeout_s=timeout_s,
                                     on_reject=lambda: rejected.inc())
        self.port, self.url = self._server.port, self._server.url
        logger.info("serving metrics on %s", self.url)

    # ------------------------------------------------------------------ recording
    def observe(self, rec: dict[str, Any], log_dropped: int = 0) -> None:
        """Update the metrics from one log record (a period line or an event); never raises
        (metrics must not stop the control loop).

        Parameters
        ----------
        rec : dict
            What the daemon logs: a period record (``period``, ``count``, ``mean_ms``,
            ``p99_ms``, ``sleep_s``, ``mps_pct``, ``reason``, ``error_ms``, ``saturated``,
            ``commanded_fraction``, ``stopped_fraction``, ``gain_estimate``, ``malformed``,
            ``periods_without_samples``...) or an event (``mps_restart``,
            ``guardian_restarted``, ``actuator_error``, ``mps_unavailable``...).
        log_dropped : int
            Log lines dropped so far (the counter advances to it).
        """
        try:
            with self._lock:
                if "period" in rec:
                    self._period(rec)
                else:
                    self._event(rec)
                self.log_dropped(log_dropped)
            if "period" in rec and self.textfile:
                self.write_textfile()
        except Exception as exc:
            logger.debug("metrics update failed: %s", exc)

    def _period(self, rec: dict[str, Any]) -> None:
        self._mean.set(_num(rec.get("mean_ms")) / 1e3)
        self._p99.set(_num(rec.get("p99_ms")) / 1e3)
        self._error.set(_num(rec.get("error_ms")) / 1e3)
        self._sleep.set(_num(rec.get("sleep_s")))
        self._duty_cmd.set(_num(rec.get("commanded_fraction")))
        self._duty_got.set(_num(rec.get("stopped_fraction")))
        self._share_value = _num(rec.get("mps_pct")) / 100.0
        self._share.set(self._share_value)
        sat = bool(rec.get("saturated"))
        self._saturated.set(int(sat))
        if sat:
            self._saturated_n.inc()
        why = str(rec.get("reason") or "")
        self._action.state(_action(why, bool(rec.get("mps_changed"))))
        if FRESH_START in why:
            self._fresh_starts.inc()
        gain = _num(rec.get("gain_estimate"))
        if math.isfinite(gain):
            self._gain.set(gain / 1e3)
        n = int(_num(rec.get("count")) or 0)
        self._samples.set(n)
        self._reports.inc(max(n, 0))
        bad = _num(rec.get("malformed"))
        if math.isfinite(bad) and bad > 0:
            self._malformed.inc(bad)
        reason = rec.get("source_reason")
        if reason == "counter_reset":
            self._source_resets.inc()
        elif reason:
            self._source_errors.labels(**self._labels, reason=str(reason)).inc()
        silent = _num(rec.get("periods_without_samples"))
        if math.isfinite(silent):
            self._silent.set(silent)
            self._silent_flag.set(int(bool(rec.get("inference_silent"))))
        self._periods.inc()
        self._last.set(time.time())

    def _event(self, rec: dict[str, Any]) -> None:
        ev = rec.get("event")
        if ev == "share_change" and rec.get("ok"):
            self._share_changes.labels(**self._labels, backend=str(rec.get("backend"))).inc()
        elif ev == "mps_restart":
            self._share_changes.labels(**self._labels, backend="mps").inc()
            self._mps_changes.inc()
            if rec.get("ok", True) is False:
                self._mps_failures.inc()
            else:
                dt = _num(rec.get("downtime_s"))
                if math.isfinite(dt):
                    self._downtime.observe(dt)
        elif ev == "guardian_restarted":
            self._guardian_restarts.inc()
        elif ev == "actuator_error":
            self._actuator_up.set(0)
        elif ev == "actuator_recovered":
            self._actuator_up.set(1)
        elif ev == "mps_unavailable":
            self.set_backend("none")
        elif ev == "mps_ready":
            self.set_backend("mps")
        elif ev == "mps_unhealthy":  # the periodic MPS health check failed
            self._mps_up.set(0)
        elif ev == "mps_recovered":
            self._mps_up.set(1)

    def set_info(self, **facts: Any) -> None:
        """Update facts of ``gpucontrol_daemon_info`` (e.g. the sleep method once chosen).

        Parameters
        ----------
        **facts : Any
            Fact -> value (shown as text).
        """
        with self._lock:
            self._info_facts.update({k: str(v) for k, v in facts.items()})
            self._info.info(self._info_facts)

    def set_backend(self, backend: str) -> None:
        """Switch the spatial-share backend label (the old series is removed).

        Parameters
        ----------
        backend : str
            ``mps`` or ``none`` (or another backend's name).
        """
        if backend == self._backend:
            return
        self._share_family.remove(*self._labels.values(), self._backend)
        self._backend = backend
        self._share = self._share_family.labels(**self._labels, backend=backend)
        self._share.set(self._share_value)  # the last share, under the new label
        self._mps_up.set(1 if backend == "mps" else 0)

    def log_dropped(self, total: int) -> None:
        """Advance the dropped-log-lines counter to ``total``.

        Parameters
        ----------
        total : int
            Lines dropped since the daemon started.
        """
        if total > self._log_seen:
            self._log_dropped.inc(total - self._log_seen)
            self._log_seen = total

    # ------------------------------------------------------------------ output
    def render(self) -> bytes:
        """The current exposition (Prometheus text format), as served.

        Returns
        -------
        bytes
            The text the ``/metrics`` endpoint answers with.
        """
        return generate_latest(self.registry)

    def write_textfile(self) -> None:
        """Write the exposition to :attr:`textfile` atomically (mode 0644), for
        node-exporter's text-file collector; errors are logged, never raised. Not fsynced:
        it is rewritten every period from the control loop, and a copy lost to a power cut
        costs nothing."""
        if not self.textfile:
            return
        from gpucontrol.node._runtime import write_private_atomic

        try:
            write_private_atomic(self.textfile, self.render(), mode=0o644, durable=False)
        except (OSError, ValueError) as exc:
            logger.warning("cannot write metrics text file %s: %s", self.textfile, exc)

    def close(self) -> None:
        """Stop the HTTP server (if any), remove the text file; safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        if self.textfile:
            try:
                os.unlink(self.textfile)
            except OSError:
                pass


def waiting_server(cfg: DaemonConfig, why: str) -> MetricsServer:
    """The metrics port while the daemon waits before its set-up (for the training's PID
    file): ``/healthz`` 200 (waiting is no stall), ``/readyz`` 503 with ``why`` as its
    reason, ``/metrics`` empty. Closed before the daemon's own server binds the port.

    Parameters
    ----------
    cfg : DaemonConfig
        Its ``metrics_port`` (not None) and ``metrics_addr``.
    why : str
        What the daemon waits for.

    Returns
    -------
    MetricsServer
        Serving from its own thread; close it.
    """
    assert cfg.metrics_port is not None
    answer = {"live": True, "ready": False, "set_up": False, "reason": why}
    return MetricsServer(CollectorRegistry(auto_describe=True), lambda: dict(answer),
                         cfg.metrics_port, cfg.metrics_addr)
