"""The daemon's CPU-plant wiring: the Prometheus latency source and the cgroup CPU-share
backend, as flags and as a real daemon process on a busy loop."""

import io
import json
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from actuators._children import (
    SLEEPER,
    cpu_controller_writable,
    daemon_argv,
    histogram_text,
    metrics_server,
    read_events,
    run_daemon,
    send_body,
    slow_inference_metrics,
    stopped_pids,
)

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.cli import build_parser
from gpucontrol.node.cli import main as daemon_main
from gpucontrol.node.config import DaemonConfig


def test_flags_reach_the_config():
    ns = build_parser().parse_args(["--training-pid", "4242", "--fixed-sleep", "0",
                                    "--latency-source", "prometheus", "--prometheus-url",
                                    "http://127.0.0.1:9/metrics", "--share-backend", "cpu",
                                    "--share-cgroup", "plant/training"])
    cfg = DaemonConfig.from_args(ns)
    assert (cfg.latency_source, cfg.share_backend, cfg.share_cgroup) == \
        ("prometheus", "cpu", "plant/training")
    assert DaemonConfig(training_pids=(4242,), fixed_sleep=0).latency_source == "socket"


def test_default_share_group_is_one_per_gpu():
    """Without --share-cgroup each GPU's daemon gets a group of its own (two daemons on one
    group are refused); a given name is kept."""
    cfg = {gpu: DaemonConfig.from_args(build_parser().parse_args(
        ["--training-pid", "4242", "--fixed-sleep", "0", "--share-backend", "cpu",
         "--gpu", str(gpu)])) for gpu in (0, 1)}
    assert cfg[0].share_cgroup == "gpucontrol-training-gpu0"
    assert cfg[1].share_cgroup == "gpucontrol-training-gpu1"
    assert DaemonConfig(training_pids=(4242,), fixed_sleep=0, gpu=1, share_backend="cpu",
                        share_cgroup="plant/training").share_cgroup == "plant/training"
    with pytest.raises(ConfigurationError, match="--share-cgroup goes with --share-backend cpu"):
        DaemonConfig(training_pids=(4242,), fixed_sleep=0, share_cgroup="plant/training")
    assert DaemonConfig(training_pids=(4242,), fixed_sleep=0, gpu=1).share_cgroup == \
        "gpucontrol-training-gpu1"  # the default, filled in: not refused without cpu


def test_detune_reaches_the_inner_loop(tmp_path):
    """--detune sets the inner gain as a fraction of deadbeat on the model (default 0.5)."""
    import sys

    from gpucontrol.node.daemon import Daemon

    model = tmp_path / "model.json"
    model.write_text('{"gain": -100.0, "offset": 20.0}')
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        scales = []
        for extra in ([], ["--detune", "0.3"]):
            ns = build_parser().parse_args(["--training-pid", str(child.pid), "--slo-ms", "15",
                                            "--model", str(model), "--share-backend", "cpu",
                                            "--socket", str(tmp_path / "g.sock"), *extra])
            ctl = Daemon(DaemonConfig.from_args(ns))._make_controller(True)
            assert ctl is not None
            scales.append(ctl.design.kp * ctl.design.model.gain)
        assert scales == pytest.approx([0.5, 0.3])
    finally:
        child.kill()
        child.wait()


def test_duty_cycler_quantum_and_identified_span_reach_the_controller(tmp_path):
    """With a duty-cycling sleep (signal/freezer) and a fixed run quantum the schedule uses
    q/(q+s) over the span model.json records; with the hook it keeps the iteration time."""
    import sys

    from gpucontrol.node.daemon import Daemon

    model = tmp_path / "model.json"
    model.write_text('{"gain": -100.0, "offset": 20.0, "sleep_span_s": [0.0, 0.03]}')
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ctls = {}
        for method, quantum in (("signal", ["--run-quantum-s", "0.03"]), ("hook", [])):
            ns = build_parser().parse_args([
                "--training-pid", str(child.pid), "--slo-ms", "15", "--model", str(model),
                "--share-backend", "cpu", "--socket", str(tmp_path / "g.sock"),
                "--sleep-method", method, *quantum, "--max-sleep-s", "0.15"])
            ctls[method] = Daemon(DaemonConfig.from_args(ns))._make_controller(True)
        sig, hook = ctls["signal"], ctls["hook"]
        assert sig.sleep_knob.run_quantum_s == 0.03 and sig.family.sleep_span_s == (0.0, 0.03)
        # the duty q / (q + s): its slope at sleep 0 (1 / q) over its least-squares slope
        # across the span (what the fitted line's gain measured)
        import numpy as np

        s = np.linspace(0.0, 0.03, 2001)
        ls = np.polyfit(s, 0.03 / (0.03 + s), 1)[0]
        assert sig._slope_ratio(0.0) == pytest.approx((1 / 0.03) / -ls, rel=1e-3)
        assert hook.sleep_knob.run_quantum_s is None and hook.family.sleep_span_s == (0.0, 0.03)
        assert hook._slope_ratio(0.0) == 1.0          # no iteration time reported yet
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("kw, message", [
    ({"fixed_sleep": None, "slo_ms": 10, "model": "m.json", "detune": 2.0}, "--detune"),
    ({"detune": 0.0}, "--detune"),
    ({"latency_source": "prometheus"}, "--prometheus-url"),
    ({"latency_source": "carrier-pigeon"}, "--latency-source"),
    ({"share_backend": "cpu", "share_cgroup": "/sys/fs/cgroup/x"}, "--share-cgroup"),
    ({"share_backend": "cpu", "share_cgroup": "a/../b"}, "--share-cgroup"),
    ({"share_backend": "tpu"}, "--share-backend"),
    ({"latency_source": "prometheus", "prometheus_url": "http://127.0.0.1:9/metrics",
      "period_s": 0.05}, r"--period-s >= 0\.1 and --stall-timeout-s >= 0\.2"),
    ({"latency_source": "prometheus", "prometheus_url": "http://127.0.0.1:9/metrics",
      "stall_timeout_s": 0.1}, r"--period-s >= 0\.1 and --stall-timeout-s >= 0\.2"),
])
def test_bad_settings_name_the_flag(kw, message):
    with pytest.raises(ConfigurationError, match=message):
        DaemonConfig(training_pids=(4242,), **{"fixed_sleep": 0, **kw})


@pytest.mark.parametrize("period, stall, deadline", [
    (4.0, None, 1.0), (1.0, None, 0.5), (0.2, 0.6, 0.1), (0.2, None, 0.1), (2.0, 1.0, 0.25),
    (0.2, 0.0, 0.1),
])
def test_the_scrape_deadline_fits_the_period_and_the_stall_timeout(period, stall, deadline):
    """1 s, at most half a period and a quarter of the stall timeout (its default when off)."""
    cfg = DaemonConfig(training_pids=(4242,), fixed_sleep=0, period_s=period,
                       stall_timeout_s=stall, latency_source="prometheus",
                       prometheus_url="http://127.0.0.1:9/metrics")
    assert cfg.scrape_timeout_s == pytest.approx(deadline)


def test_cli_error_exits_2(tmp_path, capsys):
    argv = daemon_argv(tmp_path, "x", "--training-cmd", "true", "--fixed-sleep", "0",
                       "--latency-source", "prometheus")[3:]
    assert daemon_main(argv) == 2
    assert "--prometheus-url" in capsys.readouterr().err


def test_daemon_holds_through_scrapes_that_are_not_finite(tmp_path, children):
    """A histogram whose _count turns NaN or +Inf (or _sum NaN) now and then: those periods
    hold (no samples, one malformed each), the others count, and the daemon runs to its end
    (exit 0, no traceback) with the training never left stopped."""
    train = children.spawn(SLEEPER)
    (tmp_path / "model.json").write_text(json.dumps({"gain": -50.0, "offset": 150.0}))

    def respond(handler, n):
        bad = {2: ("NaN", None), 4: ("+Inf", None), 6: (10 * n, "NaN")}.get(n % 8)
        send_body(handler, histogram_text(*bad) if bad else histogram_text(10 * n))

    with metrics_server(respond) as url:
        out = run_daemon(daemon_argv(
            tmp_path, "x", "--training-pid", str(train.pid), "--slo-ms", "100", "--model",
            str(tmp_path / "model.json"), "--period-s", "0.25", "--duration-s", "2.5",
            "--latency-source", "prometheus", "--prometheus-url", url,
            "--prometheus-metric", "lat_seconds", "--share-backend", "cpu",
            "--sleep-method", "signal", "--run-quantum-s", "0.05"),
            capture_output=True, text=True, timeout=40, stdin=subprocess.DEVNULL, check=False)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    recs = [json.loads(x) for x in out.stdout.splitlines()]
    periods = [r for r in recs if "period" in r and "event" not in r]
    assert any(r["malformed"] == 1 and r["count"] == 0 for r in periods), periods
    assert any(r["count"] > 0 and r["mean_ms"] == 20.0 for r in periods), periods
    assert recs[-1]["event"] == "stopped"
    assert stopped_pids([train.pid]) == [] and train.poll() is None


@pytest.mark.parametrize("mode", ["silent", "drip"])
def test_a_slow_metrics_endpoint_costs_periods_never_the_daemon(tmp_path, children, mode):
    """With 0.2 s periods an endpoint that accepts and never answers (for 10 s), or drips its
    body a byte every 0.1 s (for about 15 s): every period holds (no samples, one malformed),
    the loop keeps beating, the guardian never declares a stall, the daemon runs to its end
    (exit 0) and the training is never left stopped. The scrape's deadline is 0.1 s (half a
    period); a scrape that held the loop would outlast the 3 s stall timeout many times over,
    which leaves a loaded machine room (at 0.6 s a busy CI machine alone tripped it)."""
    train = children.spawn(SLEEPER)
    (tmp_path / "model.json").write_text(json.dumps({"gain": -50.0, "offset": 150.0}))
    stop = threading.Event()

    def respond(handler, n):
        body = histogram_text(10 * (n + 1)).encode()
        if mode == "drip":
            handler.wfile.write(f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n"
                                .encode())
            for i in range(len(body)):
                if stop.wait(0.1):
                    return
                handler.wfile.write(body[i:i + 1])
        stop.wait(10)

    with metrics_server(respond) as url:
        try:
            out = run_daemon(daemon_argv(
                tmp_path, "x", "--training-pid", str(train.pid), "--slo-ms", "100", "--model",
                str(tmp_path / "model.json"), "--period-s", "0.2", "--stall-timeout-s", "3",
                "--duration-s", "2", "--latency-source", "prometheus", "--prometheus-url", url,
                "--prometheus-metric", "lat_seconds", "--share-backend", "cpu",
                "--sleep-method", "signal", "--run-quantum-s", "0.05"),
                capture_output=True, text=True, timeout=40, stdin=subprocess.DEVNULL,
                check=False)
        finally:
            stop.set()
    assert out.returncode == 0, out.stderr
    assert "stalled" not in out.stderr
    # the silence warning points at the source in use, not at the (unused) socket
    assert f"is {url} serving a growing lat_seconds histogram?" in out.stderr, out.stderr
    recs = [json.loads(x) for x in out.stdout.splitlines()]
    periods = [r for r in recs if "period" in r and "event" not in r]
    assert len(periods) >= 5, periods
    assert all(r["count"] == 0 and r["malformed"] == 1 for r in periods), periods
    assert recs[-1]["event"] == "stopped"
    assert stopped_pids([train.pid]) == [] and train.poll() is None


def _open_loop_daemon(tmp_path, pid):
    from gpucontrol.node.daemon import Daemon

    log = io.StringIO()
    cfg = DaemonConfig(training_pids=(pid,), fixed_sleep=0.0, socket=str(tmp_path / "g.sock"),
                       state=str(tmp_path / "g.state.json"), hook=str(tmp_path / "g.hook"))
    return Daemon(cfg, log=log), log


def test_a_latency_source_that_raises_costs_one_period(tmp_path, children):
    """Whatever a latency source raises, the period holds (no samples, one malformed) and
    an event names the error; the loop goes on."""

    class Broken:
        def collect(self):
            raise ValueError("cannot convert float NaN to integer")

    d, log = _open_loop_daemon(tmp_path, children.spawn(SLEEPER).pid)
    d.monitor = Broken()  # type: ignore[assignment]
    d.step()
    d.step()
    recs = [json.loads(x) for x in log.getvalue().splitlines()]
    errors = [r for r in recs if r.get("event") == "latency_source_error"]
    assert len(errors) == 2 and "ValueError: cannot convert float NaN" in errors[0]["error"]
    periods = [r for r in recs if "period" in r and "event" not in r]
    assert [(r["period"], r["count"], r["malformed"]) for r in periods] == [(1, 0, 1), (2, 0, 1)]
    assert periods[0]["mean_ms"] is None and d.periods == 2


def test_a_failure_in_the_control_loop_exits_1_with_the_training_resumed(tmp_path, children,
                                                                        capsys, monkeypatch):
    """An exception in the loop after set-up is a failure (exit 1, the traceback, a
    loop_failed event), never a configuration error (exit 2); the shutdown resumes the
    training, which the duty cycler was pausing."""
    from gpucontrol.node.daemon import Daemon

    train = children.spawn(SLEEPER)
    real = Daemon.step

    def failing(self):
        if self.periods == 3:
            raise ValueError("a bug in period 4")
        real(self)

    monkeypatch.setattr(Daemon, "step", failing)
    argv = daemon_argv(tmp_path, "x", "--training-pid", str(train.pid), "--fixed-sleep",
                       "0.05", "--run-quantum-s", "0.02", "--sleep-method", "signal",
                       "--period-s", "0.1")[3:]
    assert daemon_main(argv) == 1
    out, err = capsys.readouterr()
    assert "the control loop failed after 3 periods (ValueError: a bug in period 4)" in err
    assert "Traceback" in err
    recs = [json.loads(x) for x in out.splitlines()]
    failed = [r for r in recs if r.get("event") == "loop_failed"]
    assert failed and failed[0]["periods"] == 3 and recs[-1]["event"] == "stopped"
    assert stopped_pids([train.pid]) == [] and train.poll() is None


@pytest.mark.skipif(not cpu_controller_writable(), reason="no writable cgroup CPU controller here")
def test_daemon_scrapes_prometheus_and_moves_the_cpu_share(tmp_path, children):
    """Latency far above the SLO: the sleep saturates, the outer loop lowers the CPU share
    (no restart), and at exit the cap is lifted and the training resumed."""
    busy = children.spawn()
    (tmp_path / "model.json").write_text(json.dumps({"gain": -50.0, "offset": 150.0}))
    group = f"gpucontrol-test-{uuid.uuid4().hex[:8]}"
    with slow_inference_metrics(0.2) as url:   # 200 ms per batch: always over the SLO
        out = run_daemon(daemon_argv(
            tmp_path, "x", "--training-pid", str(busy.pid), "--slo-ms", "100", "--model",
            str(tmp_path / "model.json"), "--period-s", "0.3", "--outer-every", "3",
            "--duration-s", "4", "--latency-source", "prometheus", "--prometheus-url", url,
            "--share-backend", "cpu",
            "--share-cgroup", group, "--sleep-method", "signal", "--run-quantum-s", "0.05"),
            capture_output=True, text=True, timeout=40, stdin=subprocess.DEVNULL, check=False)
    assert out.returncode == 0, out.stderr
    recs = [json.loads(x) for x in out.stdout.splitlines()]
    ready = [r for r in recs if r.get("event") == "cpu_share_ready"]
    assert ready and ready[0]["backend"] in ("cpu.max", "cfs_quota_us")
    periods = [r for r in recs if "period" in r and "event" not in r]
    assert periods and all(abs(r["mean_ms"] - 200.0) < 1e-6 for r in periods if r["count"])
    assert max(r["sleep_s"] for r in periods) == 1.0  # saturated
    changes = [r for r in recs if r.get("event") == "share_change"]
    assert changes and all(c["ok"] and c["latency_s"] < 0.05 for c in changes)
    assert changes[-1]["new_pct"] < 100.0
    assert recs[-1]["event"] == "stopped"
    assert stopped_pids([busy.pid]) == []
    assert not (Path(ready[0]["cgroup"])).exists()  # the group it made is gone


def test_a_daemon_runs_once(tmp_path, children):
    from gpucontrol.node.daemon import Daemon

    pid = children.spawn(SLEEPER).pid
    cfg = DaemonConfig(training_pids=(pid,), fixed_sleep=0.0, period_s=0.1, duration_s=0.2,
                       socket=str(tmp_path / "g.sock"), state=str(tmp_path / "g.state.json"),
                       hook=str(tmp_path / "g.hook"))
    log = io.StringIO()
    d = Daemon(cfg, log=log)
    assert d.run() == 0
    first = log.getvalue()
    assert '"stopped"' in first
    with pytest.raises(RuntimeError, match="runs once; make a new one"):
        d.run()
    assert log.getvalue() == first  # nothing set up, nothing logged
    log2 = io.StringIO()
    assert Daemon(cfg, log=log2).run() == 0  # a new one with the same config runs
    assert sum('"period"' in x for x in log2.getvalue().splitlines()) >= 1


def test_the_daemon_says_why_the_source_fails_counts_it_and_turns_unready(tmp_path, children):
    """A scraped endpoint that answers, then fails with 500 for five scrapes, answers again,
    then restarts (its counters go down): one line and one ``latency_source_state`` event per
    change of reason (never one per period), the periods counted by reason in the metrics,
    and with unready_periods = 2 /readyz answers 503 naming the reason while no usable
    latency comes in, 200 again once it does."""
    import time
    import urllib.error
    import urllib.request

    train = children.spawn(SLEEPER)
    (tmp_path / "model.json").write_text(json.dumps({"gain": -50.0, "offset": 150.0}))

    def respond(handler, n):
        if 3 <= n <= 7:
            handler.send_error(500)
        else:
            send_body(handler, histogram_text(10 * (n + 1) if n < 10 else 10 * (n - 9)))

    probes, texts = [], []
    conf = tmp_path / "gpu0.toml"
    conf.write_text("unready_periods = 2\n")
    with metrics_server(respond) as url:
        d = children.popen(daemon_argv(
            tmp_path, "x", "--training-pid", str(train.pid), "--slo-ms", "100", "--model",
            str(tmp_path / "model.json"), "--period-s", "0.25", "--duration-s", "4",
            "--latency-source", "prometheus", "--prometheus-url", url, "--prometheus-metric",
            "lat_seconds", "--sleep-method", "signal", "--run-quantum-s", "0.05",
            "--metrics-port", "0", "--config", str(conf)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        events = read_events(d.stdout, "metrics")
        base = next(e for e in events if e.get("event") == "metrics")["url"].rsplit("/", 1)[0]
        while d.poll() is None:
            try:
                with urllib.request.urlopen(base + "/readyz", timeout=2) as r:
                    probes.append((r.status, r.read().decode()))
                with urllib.request.urlopen(base + "/metrics", timeout=2) as r:
                    texts.append(r.read().decode())
            except urllib.error.HTTPError as exc:
                probes.append((exc.code, exc.read().decode()))
            except OSError:
                pass
            time.sleep(0.05)
        out, err = d.communicate(timeout=30)
    assert d.returncode == 0, err
    recs = events + [json.loads(x) for x in out.splitlines()]
    states = [(r["reason"], r["previous"]) for r in recs
              if r.get("event") == "latency_source_state"]
    assert states == [("http_status", None), (None, "http_status"), ("counter_reset", None),
                      (None, "counter_reset")], states
    assert err.count(": http_status (") == 1 and "usable again (was http_status)" in err, err
    periods = [r for r in recs if "period" in r and "event" not in r]
    assert [r["source_reason"] for r in periods].count("http_status") == 5
    unready = [body for code, body in probes if code == 503]
    assert any("no usable latency" in b and "http_status" in b for b in unready), probes
    assert probes[-1][0] == 200 or any(c == 200 for c, _ in probes[-5:]), probes
    last = texts[-1]
    assert 'gpucontrol_latency_source_errors_total{gpu="0",reason="http_status"' in last \
        or 'reason="http_status"' in last, last
    assert "gpucontrol_latency_source_resets_total" in last
