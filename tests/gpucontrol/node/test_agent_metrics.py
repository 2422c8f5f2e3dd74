"""The operator's view of the node agent: Prometheus metrics (names, HELP, labels), the
no-samples warning, /healthz and /readyz, the text-file output, and a metrics server whose
connections are capped and time out (issue B13)."""

import json
import os
import random
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from actuators._children import SLEEPER, daemon_argv, read_events
from prometheus_client.parser import text_string_to_metric_families

from gpucontrol.node import metrics as metrics_mod
from gpucontrol.node.client import report_latency
from gpucontrol.node.metrics import DaemonMetrics

NAME = re.compile(r"^gpucontrol_[a-z][a-z0-9_]*$")
UNIT_SUFFIXES = ("_seconds", "_ratio", "_total", "_info", "_timestamp_seconds")


def _documented_names():
    """The series names of the table in gpucontrol.node.metrics' docstring."""
    rows = re.findall(r"^``([a-z0-9_]+)``\s{2,}(?:gauge|counter|summary|info|enum)\s",
                      metrics_mod.__doc__, re.M)
    return {"gpucontrol_" + m for m in rows}


def test_every_metric_has_help_labels_and_a_prometheus_name():
    m = DaemonMetrics(port=None, gpu=3, target="train", slo_ms=75.0, backend="mps",
                      info={"mode": "mean"}, health=lambda: {"live": True,
                                                             "guardian_alive": True,
                                                             "heartbeat_age_s": 0.1})
    m.observe({"period": 1, "count": 4, "mean_ms": 70.0, "p99_ms": 90.0, "sleep_s": 0.02,
               "mps_pct": 60.0, "reason": "inner", "error_ms": 5.0, "saturated": False,
               "commanded_fraction": 0.1, "stopped_fraction": 0.09, "gain_estimate": -600.0,
               "malformed": 2, "periods_without_samples": 0, "inference_silent": False})
    m.observe({"event": "mps_restart", "ok": True, "downtime_s": 0.25})
    text = m.render().decode()
    families = list(text_string_to_metric_families(text))
    names = set()
    for fam in families:
        assert NAME.match(fam.name), fam.name
        assert fam.documentation and len(fam.documentation) > 15, fam.name
        for sample in fam.samples:
            assert sample.labels.get("gpu") == "3" and sample.labels.get("target") == "train"
        if fam.type == "counter":
            names.add(fam.name + "_total")
        elif fam.type == "info":
            names.add(fam.name + "_info")
        elif fam.type == "gauge" and fam.name.endswith("_created"):
            continue
        else:
            names.add(fam.name)
    assert names == _documented_names()  # the docstring's table is the list served
    values = {(f.name, s.name): s for f in families for s in f.samples}
    assert values["gpucontrol_latency_p99_seconds", "gpucontrol_latency_p99_seconds"].value \
        == 0.09
    share = values["gpucontrol_spatial_share_ratio", "gpucontrol_spatial_share_ratio"]
    assert share.value == 0.6 and share.labels["backend"] == "mps"
    assert values["gpucontrol_model_gain", "gpucontrol_model_gain"].value == -0.6
    assert values["gpucontrol_malformed_reports", "gpucontrol_malformed_reports_total"].value \
        == 2
    assert values["gpucontrol_mps_restart_downtime_seconds",
                  "gpucontrol_mps_restart_downtime_seconds_sum"].value == 0.25
    action = {s.labels["gpucontrol_control_action"]: s.value
              for s in next(f for f in families if f.name == "gpucontrol_control_action").samples}
    assert action["inner"] == 1 and sum(action.values()) == 1
    for fam in families:  # units in the names, where the series has one
        if ("seconds" in fam.name or "ratio" in fam.name) and not fam.name.endswith("_created"):
            assert fam.name.endswith(UNIT_SUFFIXES) or fam.type == "summary", fam.name
    m.close()


def test_a_scraped_sources_failures_are_counted_by_reason():
    m = DaemonMetrics(port=None)
    for reason in ("timeout", "timeout", "http_status", "counter_reset", None):
        m.observe({"period": 1, "count": 0, "malformed": 1 if reason else 0,
                   "source_reason": reason})
    got = {(f.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(m.render().decode()) for s in f.samples
           if s.name.endswith("_total")}
    base = (("gpu", "0"), ("target", "training"))
    err = "gpucontrol_latency_source_errors"
    assert got[err, (*base[:1], ("reason", "timeout"), base[1])] == 2
    assert got[err, (*base[:1], ("reason", "http_status"), base[1])] == 1
    assert got["gpucontrol_latency_source_resets", base] == 1
    m.close()


def test_a_fresh_start_of_the_controller_is_counted():
    """A period whose actuation says the controller started afresh (after readings past
    explaining) counts once; other periods do not."""
    from gpucontrol import Measurement, TwoTierController
    from gpucontrol.models import LinearLatencyModel

    ctl = TwoTierController(LinearLatencyModel(-20.0, 100.0), 90.0)
    m = DaemonMetrics(port=None)
    base = {"period": 1, "count": 5, "mean_ms": 80.0, "sleep_s": 0.1, "mps_pct": 100.0}
    rng = random.Random(3)
    reasons = []
    for k in range(400):   # readings past explaining, then ones a plant would give
        lat = rng.uniform(0.0, 450.0) if k < 200 else 80.0
        reasons.append(ctl.update(Measurement(mean=lat, count=5)).reason)
    assert sum("fresh start" in r for r in reasons) == 1
    for r in reasons:
        m.observe({**base, "reason": r})
    got = {s.name: s.value for f in text_string_to_metric_families(m.render().decode())
           for s in f.samples}
    assert got["gpucontrol_controller_fresh_starts_total"] == 1
    assert got["gpucontrol_periods_total"] == 400
    m.close()


def test_health_endpoints_and_the_connection_cap_in_process():
    state = {"live": True, "ready": False}
    m = DaemonMetrics(port=0, health=lambda: dict(state), max_connections=2, timeout_s=0.3)
    base = m.url.rsplit("/", 1)[0]
    try:
        assert urllib.request.urlopen(base + "/healthz", timeout=5).status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert err.value.code == 503 and json.loads(err.value.read())["ready"] is False
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/nope", timeout=5)
        assert err.value.code == 404
        # an idle connection is closed by the server after the timeout
        idle = socket.create_connection(("127.0.0.1", m.port), timeout=10)
        t0 = time.monotonic()
        assert idle.recv(1) == b""  # never closed: the client's own 10 s timeout raises
        assert 0.2 < time.monotonic() - t0 < 5.0
        idle.close()
        # over the cap (2, plus 4 kept for the health endpoints): closed at once, counted
        held = [socket.create_connection(("127.0.0.1", m.port), timeout=5) for _ in range(6)]
        time.sleep(0.05)
        extra = socket.create_connection(("127.0.0.1", m.port), timeout=5)
        assert extra.recv(1) == b""
        for s in (*held, extra):
            s.close()
        assert b"gpucontrol_metrics_rejected_connections_total" in m.render()
        assert re.search(rb"rejected_connections_total\{[^}]*\} [1-9]", m.render())
    finally:
        m.close()


def _trickle(port, stop, gap_s=0.2):
    """A client that sends a request one header line at a time, for as long as it may."""
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    closed_after = None
    t0 = time.monotonic()
    try:
        c.sendall(b"GET /metrics HTTP/1.1\r\n")
        while not stop.is_set():
            time.sleep(gap_s)
            c.sendall(b"X-Slow: 1\r\n")
    except OSError:
        closed_after = time.monotonic() - t0
    finally:
        c.close()
    return closed_after


def test_slow_clients_cannot_starve_the_health_probes():
    import concurrent.futures
    import threading

    # the server's total deadline is DEADLINE_S: a probe stuck behind the trickling clients
    # (the bug) would wait most of it; a served one takes milliseconds, and PROBE_S leaves a
    # loaded CI machine room
    deadline_s, probe_s = 2.5, 1.5
    m = DaemonMetrics(port=0, health=lambda: {"live": True, "ready": True},
                      max_connections=3, timeout_s=deadline_s)
    base = m.url.rsplit("/", 1)[0]
    stop = threading.Event()
    try:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            t_slow = time.monotonic()
            slow = [pool.submit(_trickle, m.port, stop) for _ in range(3)]
            time.sleep(0.3)  # every regular slot is held by a trickling client
            for _ in range(3):
                t0 = time.monotonic()
                assert urllib.request.urlopen(base + "/healthz", timeout=5).status == 200
                assert urllib.request.urlopen(base + "/readyz", timeout=5).status == 200
                assert time.monotonic() - t0 < probe_s
            assert time.monotonic() - t_slow < deadline_s  # still held: the probes got past
            with pytest.raises(urllib.error.HTTPError) as err:  # the spare slots: probes only
                urllib.request.urlopen(base + "/metrics", timeout=5)
            assert err.value.code == 503
            # a total deadline: cut off at it although a line came every 0.2 s (they would
            # trickle on until told to stop)
            done, _ = concurrent.futures.wait(slow, timeout=deadline_s + 5)
            stop.set()
            closed = [f.result(10) for f in slow]
        assert len(done) == 3, closed
        assert all(c is not None and deadline_s - 0.5 < c < deadline_s + 3 for c in closed), \
            closed
    finally:
        stop.set()
        m.close()


def _threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("Threads:")))


def _scrape(url):
    return urllib.request.urlopen(url, timeout=5).read().decode()


def _value(body, name):
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def test_daemon_metrics_health_textfile_and_silence(children, tmp_path):
    t = children.spawn(SLEEPER)
    textfile = tmp_path / "prom" / "gpucontrol.prom"
    textfile.parent.mkdir()
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"gain": -600.0, "offset": 100.0}))
    conf = tmp_path / "gpu0.toml"  # settings only the configuration file holds
    conf.write_text('metrics_target = "train"\nsilent_periods = 3\n')
    d = children.popen(daemon_argv(tmp_path, "m", "--training-pid", str(t.pid),
                                   "--slo-ms", "75", "--model", str(model),
                                   "--max-sleep-s", "0.1", "--period-s", "0.2",
                                   "--metrics-port", "0", "--metrics-textfile", str(textfile),
                                   "--config", str(conf)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ev = read_events(d.stdout, "metrics")
        url = ev[-1]["url"]
        base = url.rsplit("/", 1)[0]
        sock = next(e for e in ev if e.get("event") == "started")["socket"]
        for ms in (10, 20, 30):
            report_latency(ms, socket_path=sock)
        recs = read_events(d.stdout, "inference_silent", timeout=10)
        counted = [r for r in recs if r.get("count")]
        assert counted and counted[0]["mean_ms"] == 20.0
        body = _scrape(url)
        assert 'gpucontrol_slo_seconds{gpu="0",target="train"} 0.075' in body
        assert _value(body, "gpucontrol_sleep_seconds") == 0.0  # 20 ms is far below the SLO
        assert 'gpucontrol_control_action{gpu="0",gpucontrol_control_action="hold",' \
            'target="train"} 1.0' in body  # silent periods: the controller holds
        assert _value(body, "gpucontrol_model_gain") == -0.6
        assert _value(body, "gpucontrol_inference_silent") == 1.0
        assert _value(body, "gpucontrol_periods_without_samples") >= 3
        assert _value(body, "gpucontrol_samples_total") == 3.0
        assert time.time() - _value(body, "gpucontrol_last_period_timestamp_seconds") < 2
        assert _value(body, "gpucontrol_guardian_up") == 1.0
        assert _value(body, "gpucontrol_actuator_up") == 1.0
        health = json.loads(_scrape(base + "/healthz"))
        assert health["live"] and health["ready"] and health["guardian_alive"]
        assert json.loads(_scrape(base + "/readyz"))["ready"]
        assert os.stat(textfile).st_mode & 0o777 == 0o644
        assert "gpucontrol_periods_total" in textfile.read_text()
        report_latency(15, socket_path=sock)
        recs = read_events(d.stdout, "inference_resumed", timeout=10)
    finally:
        d.send_signal(signal.SIGTERM)
        assert d.wait(10) == 0
    assert "no latency report for 3 periods" in d.stderr.read()
    assert not textfile.exists()  # a stopped daemon leaves no stale metrics behind


IDLE_CONNECTIONS = 80


def test_idle_connections_cannot_exhaust_the_daemon(children, tmp_path):
    """B13: idle connections to the metrics port, four times what it holds (16 + 4 for the
    probes): the daemon's thread count stays bounded, it keeps running its periods, and
    /metrics answers again once they are gone. (300 took 17 s: past the cap the accept queue
    of 16 fills and every 17th connect waits out the kernel's 1 s SYN retry.)"""
    t = children.spawn(SLEEPER)
    d = children.popen(daemon_argv(tmp_path, "c", "--training-pid", str(t.pid),
                                   "--fixed-sleep", "0.01", "--period-s", "0.1",
                                   "--metrics-port", "0"),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    conns = []
    try:
        ev = read_events(d.stdout, "metrics")
        url = ev[-1]["url"]
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        before = _threads(d.pid)
        for _ in range(IDLE_CONNECTIONS):
            try:
                conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                pass
        time.sleep(0.5)
        assert _threads(d.pid) <= before + 16 + 4 + 2
        recs = [json.loads(d.stdout.readline()) for _ in range(8)]  # still running periods
        assert sum("period" in r for r in recs) >= 5
    finally:
        for c in conns:
            c.close()
    time.sleep(0.3)
    body = _scrape(url)
    # the load reached the daemon: most were turned away (the 4 probe slots take a new
    # connection each time one times out, every second)
    assert _value(body, "gpucontrol_metrics_rejected_connections_total") >= \
        IDLE_CONNECTIONS // 2
    d.send_signal(signal.SIGTERM)
    assert d.wait(10) == 0
    assert "Traceback" not in d.stderr.read()  # dropped connections are routine, not errors


def test_component_events_move_the_up_gauges():
    m = DaemonMetrics(port=None, backend="mps")

    def up(name):
        return _value(m.render().decode(), f"gpucontrol_{name}")

    assert up("mps_up") == 1 and up("actuator_up") == 1
    for ev, name, want in (("mps_unhealthy", "mps_up", 0), ("mps_recovered", "mps_up", 1),
                           ("actuator_error", "actuator_up", 0),
                           ("actuator_recovered", "actuator_up", 1)):
        m.observe({"event": ev})
        assert up(name) == want, ev
    m.observe({"event": "mps_unavailable"})
    text = m.render().decode()
    assert 'backend="none"' in text and 'backend="mps"' not in text and up("mps_up") == 0
    m.close()
