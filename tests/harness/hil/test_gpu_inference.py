"""CPU-side tests of the inference loop with a fake backend: batch-size changes while
running, the per-batch log, reporting to the daemon, the summary."""

import csv
import io
import json
import math
import sys
import types

import pytest

from harness.hil.inference import (
    InferenceConfig,
    InferenceLoop,
    InferenceSummary,
    TorchResNet50,
    build_parser,
    config_from_args,
    resolve_reporter,
)
from harness.results import IntFile, read_json, write_int, write_json


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class FakeResNet:
    """Latency linear in the batch size: 0.8 ms per image (ResNet-50-ish on an RTX 3090)."""

    def __init__(self, clock, on_batch=None):
        self.clock, self.on_batch, self.sizes = clock, on_batch, []

    def run_batch(self, batch_size):
        self.sizes.append(batch_size)
        ms = 0.8 * batch_size
        self.clock.t += ms / 1e3
        if self.on_batch:
            self.on_batch(len(self.sizes))
        return ms - 0.5, ms


def make(cfg, **kw):
    clock = FakeClock()
    backend = FakeResNet(clock, kw.pop("on_batch", None))
    loop = InferenceLoop(cfg, backend, clock=clock, wall=clock, sleep=clock.sleep, **kw)
    return loop, backend, clock


@pytest.mark.parametrize("kw, field", [
    ({"batch_size": 0}, "batch_size"), ({"image_size": 8}, "image_size"),
    ({"batches": -1}, "batches"), ({"duration_s": 0}, "duration_s"), ({"warmup": -1}, "warmup"),
    ({"interval_s": -0.1}, "interval_s"), ({"gpu": -1}, "gpu")])
def test_config_validation(kw, field):
    with pytest.raises(ValueError, match=field):
        InferenceConfig(**kw)


def test_defaults_follow_the_seed():
    cfg = InferenceConfig()
    assert cfg.batch_size == 105 and cfg.image_size == 224
    assert not cfg.fp16 and not cfg.channels_last


def test_batches_are_logged_with_both_latencies(tmp_path):
    log = tmp_path / "inf.csv"
    loop, backend, _ = make(InferenceConfig(batches=4, warmup=2, log_path=str(log)))
    summary = loop.run()
    assert backend.sizes == [105] * 6  # 2 warm-up + 4 measured
    rows = list(csv.DictReader(log.read_text().splitlines()))
    assert [int(r["batch"]) for r in rows] == [0, 1, 2, 3]
    assert all(float(r["wall_ms"]) == pytest.approx(84.0) for r in rows)
    assert all(float(r["gpu_ms"]) == pytest.approx(83.5) for r in rows)
    t = [float(r["t_unix"]) for r in rows]
    assert t[1] - t[0] == pytest.approx(0.084)
    assert summary.as_dict()["wall_ms"]["mean"] == pytest.approx(84.0)


def test_batch_size_changes_while_running(tmp_path):
    bf = tmp_path / "batch"
    write_int(bf, 105)

    def on_batch(n):  # the burst: 105 -> 115 after 3 batches, back after 6
        if n == 3:
            write_int(bf, 115)
        if n == 6:
            write_int(bf, 105)

    loop, backend, _ = make(InferenceConfig(batches=8, warmup=0, batch_file=str(bf)),
                            on_batch=on_batch)
    loop.run()
    assert backend.sizes == [105] * 3 + [115] * 3 + [105] * 2


def test_duration_and_interval(tmp_path):
    loop, _, _ = make(InferenceConfig(duration_s=1.0, interval_s=0.12, warmup=0))
    assert loop.run().batches == 5  # 0.084 + 0.12 = 0.204 s per batch


def test_stop_request():
    loop, backend, _ = make(InferenceConfig(warmup=0))
    backend.on_batch = lambda n: setattr(loop, "stop_requested", n >= 3)
    assert loop.run().batches == 3


def test_ready_file_after_warm_up(tmp_path):
    ready = tmp_path / "ready.json"
    loop, backend, _ = make(InferenceConfig(batches=1, warmup=3, ready_file=str(ready),
                                            fp16=True))
    backend.on_batch = lambda n: (n <= 3) == (not ready.exists()) or pytest.fail("order")
    loop.run()
    info = read_json(ready)
    assert info["batch_size"] == 105 and info["fp16"] is True


def test_reporter_gets_every_wall_latency():
    got = []
    loop, _, _ = make(InferenceConfig(batches=3, warmup=1), reporter=got.append)
    loop.run()
    assert got == [pytest.approx(84.0)] * 3


def test_reporter_failure_disables_reporting_but_keeps_serving():
    calls = []

    def broken(ms):
        calls.append(ms)
        raise ConnectionRefusedError("daemon down")

    loop, _, _ = make(InferenceConfig(batches=3, warmup=0), reporter=broken)
    with pytest.warns(RuntimeWarning, match="daemon down"):
        assert loop.run().batches == 3
    assert len(calls) == 1


def test_resolve_reporter_uses_gpucontrol_report(monkeypatch):
    fake = types.ModuleType("gpucontrol.node.client")
    sent = []
    fake.report_latency = lambda ms, socket_path=None: sent.append((ms, socket_path))
    monkeypatch.setitem(sys.modules, "gpucontrol.node.client", fake)
    resolve_reporter("/run/x.sock")(12.5)
    assert sent == [(12.5, "/run/x.sock")]


def test_report_reaches_a_real_daemon_socket(tmp_path):
    import socket

    path = str(tmp_path / "d.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(path)
    srv.settimeout(2.0)
    try:
        loop, _, _ = make(InferenceConfig(batches=2, warmup=0, report=True, socket_path=path))
        loop.run()
        got = [srv.recv(256) for _ in range(2)]
    finally:
        srv.close()
        from gpucontrol.node.client import client

        client(path).close()
    assert got == [b"L 84.0\n"] * 2


def test_resolve_reporter_missing_module_warns(monkeypatch):
    monkeypatch.setitem(sys.modules, "gpucontrol.node.client", None)
    with pytest.warns(RuntimeWarning, match="report_latency"):
        send = resolve_reporter()
    assert send(1.0) is None


def test_report_flag_resolves_the_reporter(monkeypatch):
    fake = types.ModuleType("gpucontrol.node.client")
    sent = []
    fake.report_latency = lambda ms, socket_path=None: sent.append(ms)
    monkeypatch.setitem(sys.modules, "gpucontrol.node.client", fake)
    loop, _, _ = make(InferenceConfig(batches=2, warmup=0, report=True))
    loop.run()
    assert len(sent) == 2


def test_json_lines():
    out = io.StringIO()
    loop, _, _ = make(InferenceConfig(batches=2, warmup=0, json_lines=True), out=out)
    loop.run()
    assert [json.loads(x)["batch_size"] for x in out.getvalue().splitlines()] == [105, 105]


def test_summary_percentiles():
    s = InferenceSummary(batches=100, wall_ms=[float(i) for i in range(1, 101)], gpu_ms=[])
    d = s.as_dict()
    assert d["wall_ms"]["p99"] == 99.0
    assert d["wall_ms"]["p50"] == pytest.approx(50.5)
    assert math.isnan(d["gpu_ms"]["mean"])


def test_cli_arguments_map_to_the_config():
    args = build_parser().parse_args(["--batch-size", "64", "--fp16", "--channels-last",
                                      "--batches", "10", "--batch-file", "b", "--report",
                                      "--socket", "s.sock"])
    assert config_from_args(args) == InferenceConfig(batch_size=64, fp16=True,
                                                     channels_last=True, batches=10,
                                                     batch_file="b", report=True,
                                                     socket_path="s.sock")


def test_torch_backend_without_torch_says_what_to_install(monkeypatch):
    from harness.hil import GPUUnavailableError

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(GPUUnavailableError, match="torch"):
        TorchResNet50()


# ---- the little file helpers ------------------------------------------------------------------
def test_int_file_keeps_last_good_value(tmp_path):
    p = tmp_path / "n"
    f = IntFile(p, default=105, lo=1, hi=4096)
    assert f.value() == 105
    write_int(p, 115)
    assert f.value() == 115
    p.write_text("garbage")
    assert f.value() == 115
    write_int(p, 0)  # out of range
    assert f.value() == 115
    p.unlink()
    assert f.value() == 115


def test_json_atomic_roundtrip(tmp_path):
    p = tmp_path / "sub" / "x.json"
    write_json({"a": 1}, p)
    assert read_json(p) == {"a": 1}
    assert read_json(tmp_path / "missing.json") is None
    assert not [x for x in p.parent.iterdir() if x.name.startswith(".")]
