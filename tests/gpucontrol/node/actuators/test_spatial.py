"""Spatial-share backends, the registry and feature detection (fakes; no GPU, no MPS)."""

import ctypes
import math
import types

import pytest

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.actuators.spatial import (
    BACKENDS,
    BackendInfo,
    CPUShareBackend,
    GreenContextBackend,
    MPSRestartBackend,
    change_cost_periods,
    detect_backends,
    make_backend,
    probe_green_context_driver,
)
from gpucontrol.node.hooks import HookReader, HookWriter


class FakeMPSActuator:
    shadow = True

    def __init__(self):
        self.applied = []

    def apply(self, pct):
        self.applied.append(pct)
        return types.SimpleNamespace(ok=pct != 13, new_pct=pct, total_s=2.5, downtime_s=0.0)


def test_mps_restart_wraps_the_actuator():
    act = FakeMPSActuator()
    b = make_backend("mps-restart", actuator=act)
    assert isinstance(b, MPSRestartBackend) and not b.restart_free
    assert b.resize_latency_s == 10.0  # the prior before a restart was measured
    assert b.set_share_pct(40.4) == 2.5 and act.applied == [40]
    assert b.share_pct == 40 and b.resize_latency_s == 2.5
    b.set_share_pct(13)  # a failed restart keeps the old share
    assert b.share_pct == 40
    with pytest.raises(ConfigurationError, match="share_pct"):
        b.set_share_pct(0)
    assert b.info().name == "mps-restart" and b.info().available


def test_green_context_publishes_through_the_hook_file(tmp_path):
    w = HookWriter(tmp_path / "gpu.hook")
    r = HookReader(w.path)
    b = make_backend("green-context", writer=w, granularity_pct=100 * 8 / 132,
                     iteration_s=0.2)
    assert b.restart_free and b.resize_latency_s == 0.2
    lat = b.set_share_pct(50)
    assert 0 <= lat < 1.0  # a file write (microseconds; benchmarked)
    assert r.share_pct() == 48 and b.share_pct == 48  # 50 % rounded to 8 of 132 SMs
    b.set_share_pct(100)
    assert r.share_pct() is None  # 100 %: no command, the full device
    b.set_share_pct(30)
    b.close()
    assert r.share_pct() is None
    # the measured write (microseconds), no longer the 0.2 s iteration it started from
    assert b.resize_latency_s < 0.15
    assert change_cost_periods(b, 1.0) < 0.15
    w.close()


def test_green_context_reports_the_partition_that_will_run(tmp_path):
    w = HookWriter(tmp_path / "gpu.hook")
    b = GreenContextBackend(w, granularity_pct=100 * 8 / 132, shares_pct=(25, 50, 75))
    assert b.granularity_pct == 25.0
    b.set_share_pct(60)
    assert HookReader(w.path).share_pct() == 61 and b.share_pct == 50
    b.set_share_pct(10)
    assert b.share_pct == 25  # below every partition: the smallest
    with pytest.raises(ConfigurationError, match="shares_pct"):
        GreenContextBackend(w, shares_pct=(0,))
    w.close()


def test_cpu_share_adapter():
    class CPU:
        granularity_pct = 1.0
        backend = "cpu.max"

        def set_share_pct(self, pct):
            self.pct = pct
            return 0.002

    cpu = CPU()
    b = CPUShareBackend(cpu)
    assert b.set_share_pct(25) == 0.002 and cpu.pct == 25 and b.restart_free
    b.close()  # an actuator without close: nothing to do
    cpu.close = lambda: setattr(cpu, "closed", True)
    b.close()  # the cap lifted through the actuator
    assert cpu.closed


def test_unknown_backend_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match=r"mps-restart, green-context, cpu\.max"):
        make_backend("mig")
    assert list(BACKENDS) == ["mps-restart", "green-context", "cpu.max"]


class FakeLib:
    def __init__(self, version, symbols=True):
        self.version = version
        if symbols:
            for s in ("cuDeviceGetDevResource", "cuDevSmResourceSplitByCount",
                      "cuDevResourceGenerateDesc", "cuGreenCtxCreate", "cuCtxFromGreenCtx",
                      "cuGreenCtxDestroy"):
                setattr(self, s, lambda *a: 0)

    def cuDriverGetVersion(self, ref):
        ref._obj.value = self.version
        return 0


def test_probe_green_context_driver():
    assert probe_green_context_driver(lambda: FakeLib(12080)) == (True, "", 12080)
    ok, why, v = probe_green_context_driver(lambda: FakeLib(12020))
    assert not ok and "12.2 < 12.4" in why and v == 12020
    ok, why, _ = probe_green_context_driver(lambda: FakeLib(12040, symbols=False))
    assert not ok and "cuGreenCtxCreate" in why

    def missing():
        raise OSError("libcuda.so.1: cannot open shared object file")

    ok, why, _ = probe_green_context_driver(missing)
    assert not ok and "no CUDA driver library" in why
    # the real loader on this machine answers without raising, GPU or not
    assert isinstance(probe_green_context_driver()[0], bool)
    assert ctypes  # the real probe uses ctypes.CDLL


def test_detect_backends_reports_every_backend_and_why_not(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset io memory\n")
    infos = detect_backends(mps_binary="/nonexistent/nvidia-cuda-mps-control",
                            driver_loader=lambda: FakeLib(12080), cgroup_root=str(tmp_path))
    by = {i.name: i for i in infos}
    assert list(by) == ["mps-restart", "green-context", "cpu.max"]
    assert not by["mps-restart"].available and "not found" in by["mps-restart"].reason
    assert by["green-context"].available and by["green-context"].restart_free
    assert "cooperative" in by["green-context"].reason
    assert not by["cpu.max"].available and by["cpu.max"].reason
    assert isinstance(by["cpu.max"], BackendInfo) and by["cpu.max"].as_dict()["name"] == "cpu.max"
    assert math.isnan(change_cost_periods(by["green-context"], 1.0))


def test_green_contexts_inside_mps_rank_first_where_the_driver_and_mps_allow(tmp_path):
    """Issue 30: green contexts inside MPS are the restart-free share that lowers the
    inference's latency; without MPS they confine the training only, so they rank behind
    MPS restarts, and the reason says why."""
    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    both = detect_backends(mps_binary=str(fake), driver_loader=lambda: FakeLib(12080),
                           cgroup_root=str(tmp_path))
    assert [i.name for i in both] == ["green-context", "mps-restart", "cpu.max"]
    assert "inside MPS" in both[0].reason and "ranked first" in both[0].reason
    no_mps = detect_backends(mps_binary=str(tmp_path / "absent"),
                             driver_loader=lambda: FakeLib(12080), cgroup_root=str(tmp_path))
    assert [i.name for i in no_mps][:2] == ["mps-restart", "green-context"]
    assert "does not lower the inference's latency" in no_mps[1].reason
    old = detect_backends(mps_binary=str(fake), driver_loader=lambda: FakeLib(12020),
                          cgroup_root=str(tmp_path))
    assert old[0].name == "mps-restart"  # no green contexts: MPS restarts first
