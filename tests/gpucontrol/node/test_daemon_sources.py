"""The daemon's CPU-plant wiring: the Prometheus latency source and the cgroup CPU-share
backend, as flags and as a real daemon process on a busy loop."""

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from actuators._children import (
    cpu_controller_writable,
    daemon_argv,
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
        assert sig.run_quantum_s == 0.03 and sig.identified_span_s == (0.0, 0.03)
        assert sig._slope_ratio(0.0) == pytest.approx(2.0)
        assert hook.run_quantum_s is None and hook.identified_span_s == (0.0, 0.03)
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
])
def test_bad_settings_name_the_flag(kw, message):
    with pytest.raises(ConfigurationError, match=message):
        DaemonConfig(training_pids=(4242,), **{"fixed_sleep": 0, **kw})


def test_cli_error_exits_2(tmp_path, capsys):
    argv = daemon_argv(tmp_path, "x", "--training-cmd", "true", "--fixed-sleep", "0",
                       "--latency-source", "prometheus")[3:]
    assert daemon_main(argv) == 2
    assert "--prometheus-url" in capsys.readouterr().err


@pytest.mark.skipif(not cpu_controller_writable(), reason="no writable cgroup CPU controller here")
def test_daemon_scrapes_prometheus_and_moves_the_cpu_share(tmp_path, children):
    """Latency far above the SLO: the sleep saturates, the outer loop lowers the CPU share
    (no restart), and at exit the cap is lifted and the training resumed."""
    busy = children.spawn()
    (tmp_path / "model.json").write_text(json.dumps({"gain": -50.0, "offset": 150.0}))
    group = f"gpucontrol-test-{uuid.uuid4().hex[:8]}"
    with slow_inference_metrics(0.2) as url:   # 200 ms per batch: always over the SLO
        out = subprocess.run(daemon_argv(
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
