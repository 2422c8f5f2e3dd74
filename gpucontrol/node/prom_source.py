"""A latency source that scrapes a Prometheus latency histogram (``/metrics``).

Any inference server that exposes a latency histogram -- Triton, TorchServe, vLLM, the CPU
plant's service (:mod:`harness.hil.cpu.inference`) -- feeds the daemon without a code change:
once per control period :class:`PrometheusSource` scrapes the text exposition, takes the
difference of the cumulative ``_bucket``, ``_sum`` and ``_count`` series since the previous
scrape, and hands back the period's :class:`~gpucontrol.node.monitor.PeriodStats`:

- mean = delta(sum) / delta(count) (exact, whatever the buckets);
- p99 = the 0.99 quantile of the period's bucket deltas, interpolated linearly inside the
  bucket that holds it (Prometheus' ``histogram_quantile`` rule); a quantile in the ``+Inf``
  bucket reads as the largest finite bound.

A counter that went down (the server restarted) starts a new baseline: that period reports
no samples (the controller holds) and counts one malformed reading, as does a failed scrape,
or a malformed one (a value that is not a finite number, a negative count), or a late one:
none of them stops the control loop. Each such period has a **reason** (:data:`REASONS`):
``timeout``, ``refused``, ``connection``, ``http_status``, ``too_long``, ``not_finite``,
``missing``, ``malformed`` or ``counter_reset``; :attr:`PrometheusSource.reason` holds the
last period's ("" after a usable one), so the daemon logs one line when it changes and counts
the periods by reason.

The body is parsed as it arrives, line by line, into the histogram's running sums: memory
stays bounded by one line (:data:`MAX_LINE`) and the histogram itself, whatever the body's
size; a body longer than :data:`MAX_BODY` is cut off (``too_long``).

A scrape never holds the control loop longer than ``timeout_s``, however slowly the server
connects, answers or drips its body: it runs on a thread of its own that
:meth:`PrometheusSource.collect` waits for at most that long. A late scrape is abandoned (its
reading is never used; it ends by itself, at its own deadline or socket timeout) and no new
one starts while it still runs.
Units: the histogram is read in seconds (the Prometheus convention) unless ``unit_ms=1.0``.

Examples
--------
>>> text = '''# TYPE lat_seconds histogram
... lat_seconds_bucket{le="0.01"} 2
... lat_seconds_bucket{le="0.02"} 10
... lat_seconds_bucket{le="+Inf"} 10
... lat_seconds_sum 0.15
... lat_seconds_count 10
... '''
>>> h = parse_histogram(text, "lat_seconds")
>>> h.count, h.buckets[-1]
(10.0, (inf, 10.0))
>>> round(histogram_quantile(0.5, h.buckets), 5)
0.01375
"""

from __future__ import annotations

import http.client
import math
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpucontrol._validate import positive
from gpucontrol.errors import ConfigurationError
from gpucontrol.node.monitor import PeriodStats

__all__ = ["REASONS", "Histogram", "PrometheusSource", "ScrapeError", "histogram_delta",
           "histogram_quantile", "parse_histogram", "scrape_reason"]

#: The largest ``/metrics`` body read, bytes; a longer one is a malformed scrape.
MAX_BODY = 64 << 20
#: The longest line of the body, bytes (the read buffer holds at most one).
MAX_LINE = 64 << 10

#: Why a scrape gave no usable period (the ``reason`` label of the daemon's error counter).
REASONS = ("timeout", "refused", "connection", "http_status", "too_long", "not_finite",
           "missing", "malformed", "counter_reset")

#: What a failed or malformed scrape raises (it then counts as one malformed period).
_SCRAPE_ERRORS = (OSError, ValueError, http.client.HTTPException)


class ScrapeError(ValueError):
    """A scrape's body that gives no histogram, with its :data:`REASONS` entry.

    Parameters
    ----------
    message : str
        What was wrong.
    reason : str
        One of :data:`REASONS`.
    """

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


def scrape_reason(exc: BaseException) -> str:
    """The :data:`REASONS` entry of what a scrape raised.

    Parameters
    ----------
    exc : BaseException
        The error.

    Returns
    -------
    str
        ``timeout``, ``refused``, ``connection``, ``http_status`` or the
        :class:`ScrapeError`'s reason (``malformed`` for any other ``ValueError``).

    Examples
    --------
    >>> scrape_reason(ConnectionRefusedError()), scrape_reason(TimeoutError())
    ('refused', 'timeout')
    """
    import urllib.error

    if isinstance(exc, ScrapeError):
        return exc.reason
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, urllib.error.HTTPError):
        return "http_status"
    if isinstance(exc, urllib.error.URLError):
        return scrape_reason(exc.reason) if isinstance(exc.reason, BaseException) \
            else "connection"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, (OSError, http.client.HTTPException)):
        return "connection"
    return "malformed"

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Histogram:
    """One scrape of a cumulative histogram.

    Parameters
    ----------
    buckets : tuple of (float, float)
        ``(upper bound, cumulative count)`` sorted by bound, ending with ``+Inf``.
    sum : float
        The ``_sum`` series.
    count : float
        The ``_count`` series.
    """

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


def _labels(text: str | None) -> dict[str, str]:
    return dict(_LABEL.findall(text or ""))


class _HistogramReader:
    """The running sums of one histogram, fed one exposition line at a time."""

    def __init__(self, name: str, labels: Mapping[str, str] | None) -> None:
        self.name = name
        self.want = dict(labels or {})
        self.buckets: dict[float, float] = {}
        self.total = self.count = 0.0
        self.seen = False

    def line(self, line: str) -> None:
        if not line or line[0] == "#":
            return
        m = _LINE.match(line)
        if not m or not m.group(1).startswith(self.name):
            return
        series, lab, val = m.group(1), _labels(m.group(2)), m.group(3)
        suffix = series[len(self.name):]
        if suffix not in ("_bucket", "_sum", "_count"):
            return
        le = lab.pop("le", None)
        if any(lab.get(k) != v for k, v in self.want.items()):
            return
        try:
            v = float(val)
        except ValueError:
            raise ScrapeError(f"{series}: value {val[:40]!r} is not a number") from None
        if not math.isfinite(v) or (v < 0 and suffix != "_sum"):
            raise ScrapeError(f"{series}: value {val[:40]!r} is not a finite "
                              f"{'number' if suffix == '_sum' else 'count'}",
                              "not_finite" if not math.isfinite(v) else "malformed")
        self.seen = True
        if suffix == "_bucket" and le is not None:
            try:
                b = float(le)
            except ValueError:
                raise ScrapeError(f"{series}: bound le={le[:40]!r} is not a number") from None
            if math.isnan(b) or b == -math.inf:
                raise ScrapeError(f"{series}: bound le={le[:40]!r} is not a bucket bound")
            self.buckets[b] = self.buckets.get(b, 0.0) + v
        elif suffix == "_sum":
            self.total += v
        elif suffix == "_count":
            self.count += v

    def result(self) -> Histogram:
        if not self.seen:
            raise ScrapeError(f"histogram {self.name!r} not found in the scrape", "missing")
        if math.inf not in self.buckets:
            raise ScrapeError(f"histogram {self.name!r} has no +Inf bucket", "missing")
        return Histogram(tuple(sorted(self.buckets.items())), self.total, self.count)


def parse_histogram(text: str, name: str, labels: Mapping[str, str] | None = None) -> Histogram:
    """Read the histogram ``name`` from Prometheus text exposition.

    Series whose labels (other than ``le``) differ from ``labels`` are skipped; with
    ``labels`` None every series of the name is summed (all label sets pooled).

    Parameters
    ----------
    text : str
        The ``/metrics`` body.
    name : str
        Base name of the histogram (without ``_bucket``/``_sum``/``_count``).
    labels : mapping or None
        Label values a series must carry to count.

    Returns
    -------
    Histogram
        The pooled cumulative buckets, sum and count.

    Raises
    ------
    ScrapeError
        (A ``ValueError``.) The histogram is absent, or has no ``+Inf`` bucket, or one of its
        series holds something other than a finite number (a negative one for a count), or a
        bucket bound that is not a number.
    """
    reader = _HistogramReader(name, labels)
    for line in text.splitlines():
        reader.line(line)
    return reader.result()


def histogram_delta(new: Histogram, old: Histogram | None) -> Histogram | None:
    """What happened between two scrapes (``new - old``); None when a counter went down.

    Parameters
    ----------
    new, old : Histogram
        The later and the earlier scrape (``old`` None: ``new`` itself).

    Returns
    -------
    Histogram or None
        Bucket, sum and count increments; None after a reset (a restarted server).

    Raises
    ------
    ValueError
        A value of either scrape, or an increment, is not a finite number.
    """
    for h in (new, old):
        if h is not None and not all(math.isfinite(v) for v in _values(h)):
            raise ScrapeError("the histogram holds a value that is not a finite number",
                              "not_finite")
    if old is None:
        return new
    prev = dict(old.buckets)
    out = []
    for b, c in new.buckets:
        d = c - prev.get(b, 0.0)
        if d < 0:
            return None
        out.append((b, d))
    if new.count < old.count or new.sum < old.sum - 1e-12:
        return None
    delta = Histogram(tuple(out), new.sum - old.sum, new.count - old.count)
    if not all(math.isfinite(v) for v in _values(delta)):  # overflow
        raise ScrapeError("the histogram's increment is not a finite number", "not_finite")
    return delta


def _values(h: Histogram) -> list[float]:
    return [h.sum, h.count, *(c for _, c in h.buckets)]


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The ``q`` quantile of cumulative buckets, linear inside the bucket (NaN when empty).

    Parameters
    ----------
    q : float
        Quantile in [0, 1].
    buckets : sequence of (float, float)
        ``(upper bound, cumulative count)`` sorted by bound, the last ``+Inf``.

    Returns
    -------
    float
        The estimate, in the histogram's unit; the largest finite bound when it falls in
        ``+Inf``; the lower buckets start at 0.
    """
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    lo_b, lo_c = 0.0, 0.0
    for b, c in buckets:
        if c >= rank and c > lo_c:
            if math.isinf(b):
                return lo_b
            return lo_b + (b - lo_b) * (rank - lo_c) / (c - lo_c)
        lo_b, lo_c = (b if not math.isinf(b) else lo_b), c
    return lo_b


class PrometheusSource:
    """The daemon's latency source from a scraped histogram (same face as the monitor).

    ``start()``, ``collect() -> PeriodStats``, ``close()``, ``total_count`` and
    ``total_malformed`` match :class:`~gpucontrol.node.monitor.LatencyMonitor`, so the daemon
    takes either.

    Parameters
    ----------
    url : str
        The ``http://host:port/metrics`` address.
    metric : str
        Histogram base name (default ``inference_latency_seconds``).
    labels : mapping or None
        Only series with these labels (None: all pooled).
    unit_ms : float
        Milliseconds per histogram unit (1000 for seconds), > 0.
    timeout_s : float
        The whole scrape's deadline (connect, headers, body), seconds, > 0: the longest
        :meth:`start` and :meth:`collect` wait (the daemon derives it from the period and
        the stall timeout, :attr:`~gpucontrol.node.config.DaemonConfig.scrape_timeout_s`).
    """

    def __init__(self, url: str, metric: str = "inference_latency_seconds", *,
                 labels: Mapping[str, str] | None = None, unit_ms: float = 1000.0,
                 timeout_s: float = 1.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"--prometheus-url must be an http(s) URL, got {url!r}")
        self.url = url
        self.metric = metric
        self.labels = dict(labels or {})
        self.unit_ms = positive("unit_ms", unit_ms)
        self.timeout_s = positive("timeout_s", timeout_s)
        self._last: Histogram | None = None
        self._t = time.time()
        self._lock = threading.Lock()
        self._late: _Scrape | None = None  # an abandoned scrape still running
        self.total_count = 0
        self.total_malformed = 0
        self.last_error = ""
        self.reason = ""  # the last period's REASONS entry; "" after a usable one

    def scrape(self) -> Histogram:
        """One scrape of the histogram, in the calling thread.

        Each socket operation waits at most ``timeout_s``, and the body is read only until
        ``timeout_s`` after the start (a server dripping it byte by byte is cut off).

        Returns
        -------
        Histogram
            The cumulative histogram now.

        Raises
        ------
        OSError, http.client.HTTPException
            The request failed, or took longer (``TimeoutError``).
        ScrapeError
            (A ``ValueError``.) The body is not a usable histogram, longer than
            :data:`MAX_BODY` or has a line longer than :data:`MAX_LINE`.
        """
        deadline = time.monotonic() + self.timeout_s
        reader = _HistogramReader(self.metric, self.labels)
        pending = bytearray()  # at most one line: the body is never held whole
        size = 0
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
            while chunk := resp.read1(1 << 16):
                size += len(chunk)
                if size > MAX_BODY:
                    raise ScrapeError(f"{self.url}: body longer than {MAX_BODY} bytes",
                                      "too_long")
                pending += chunk
                *lines, rest = pending.split(b"\n")
                for line in lines:
                    reader.line(line.decode("utf-8", "replace").rstrip("\r"))
                if len(rest) > MAX_LINE:
                    raise ScrapeError(f"{self.url}: a line longer than {MAX_LINE} bytes",
                                      "too_long")
                pending = bytearray(rest)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.url}: body not read within {self.timeout_s:g} s")
        reader.line(pending.decode("utf-8", "replace").rstrip("\r"))
        return reader.result()

    def _scrape_in_time(self) -> Histogram:
        """:meth:`scrape` on a thread of its own, waited for at most ``timeout_s``.

        A late scrape raises TimeoutError here and is abandoned: its reading is never used,
        and until it has ended every call raises TimeoutError at once (one scrape at a time).
        """
        late = self._late
        if late is not None:
            if not late.done.is_set():
                raise TimeoutError(f"{self.url}: the previous scrape, abandoned after "
                                   f"{self.timeout_s:g} s, still runs")
            self._late = None
        job = _Scrape(self.scrape)
        if not job.done.wait(self.timeout_s):
            self._late = job
            raise TimeoutError(f"{self.url}: no complete answer within {self.timeout_s:g} s")
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def start(self) -> PrometheusSource:
        """Take the baseline scrape (a failure is retried at the first collect).

        Returns
        -------
        PrometheusSource
            self.
        """
        with self._lock:
            self._t = time.time()
            try:
                self._last = self._scrape_in_time()
            except _SCRAPE_ERRORS as exc:
                self.last_error, self.reason = str(exc), scrape_reason(exc)
                self._last = None
        return self

    def collect(self) -> PeriodStats:
        """The period since the previous call, from the bucket deltas.

        Returns
        -------
        PeriodStats
            mean (exact), p99 (bucket estimate), max (upper bound of the highest non-empty
            finite bucket) and count; no samples (and one malformed) when the scrape failed,
            was malformed or late, or a counter reset. Never raises, never waits longer than
            ``timeout_s``.
        """
        with self._lock:
            now = time.time()
            start, self._t = self._t, now
            bad = 0
            delta: Histogram | None = None
            reason = ""
            try:
                new = self._scrape_in_time()  # finite values only (parse_histogram)
                old, self._last = self._last, new
                if old is not None:
                    delta = histogram_delta(new, old)
                    if delta is None:
                        self.last_error = "a counter went down (a restarted server)"
                        bad, reason = 1, "counter_reset"  # new baseline
            except _SCRAPE_ERRORS as exc:  # failed, malformed or late: the period holds
                self.last_error, reason = str(exc), scrape_reason(exc)
                delta, bad = None, 1
            self.reason = reason
            self.total_malformed += bad
            n = round(delta.count) if delta is not None else 0
            if delta is None or n <= 0:
                return PeriodStats(start, now, 0, math.nan, math.nan, math.nan, bad)
            self.total_count += n
            mean = delta.sum / delta.count * self.unit_ms
            p99 = histogram_quantile(0.99, _cumulative(delta.buckets)) * self.unit_ms
            top = max((b for b, c in delta.buckets if c > 0 and not math.isinf(b)),
                      default=math.nan)
            return PeriodStats(start, now, n, mean, p99, top * self.unit_ms, bad)

    def close(self) -> None:
        """Nothing to release (each scrape is its own connection; a late one ends by
        itself)."""

    def __enter__(self) -> PrometheusSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Scrape:
    """One :meth:`PrometheusSource.scrape` running on a daemon thread of its own."""

    def __init__(self, scrape: Callable[[], Histogram]) -> None:
        self.done = threading.Event()
        self.result: Histogram | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._run, args=(scrape,), name="gpucontrol-prom-scrape",
                         daemon=True).start()

    def _run(self, scrape: Callable[[], Histogram]) -> None:
        try:
            self.result = scrape()
        except Exception as exc:  # handed to the waiting caller, which counts it
            self.error = exc
        finally:
            self.done.set()


def _cumulative(buckets: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    # a delta of cumulative buckets is itself cumulative; this guards monotonicity only
    out: list[tuple[float, float]] = []
    run = 0.0
    for b, c in buckets:
        run = max(run, c)
        out.append((b, run))
    return out
