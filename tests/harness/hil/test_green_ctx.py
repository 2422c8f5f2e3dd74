"""The ctypes green-context layer, the emulator's partition switcher and the PyTorch helper,
against a fake driver library and fake torch (no GPU)."""

import ctypes
import types

import numpy as np
import pytest

from gpucontrol.node.green_torch import GreenPartitions, sm_count_for
from gpucontrol.node.hooks import HookReader, HookWriter
from harness.hil.green_ctx import (
    CUdevResource,
    GreenContextError,
    GreenContextPool,
    plan_sm_counts,
    sm_granularity,
)
from harness.hil.green_emulator import PartitionSwitcher, parse_shares
from harness.results import read_csv
from tests.harness.hil.fake_cuda import FakeCuda


def test_struct_layout_matches_cuda_h():
    # type (int) + 92 padding bytes, then the union whose first member is smCount
    assert CUdevResource.smCount.offset == 96
    assert CUdevResource.minSmPartitionSize.offset == 100
    assert ctypes.sizeof(CUdevResource) >= 152  # 13.x: union of 48 bytes + nextResource


def test_granularity_and_plan():
    assert sm_granularity(9, 0) == (8, 8)
    assert sm_granularity(8, 0) == (4, 2)
    with pytest.raises(GreenContextError, match=r"6\.0"):
        sm_granularity(5, 2)
    assert plan_sm_counts([100, 75, 50, 25, 1], 132, 8, 8) == [132, 96, 64, 32, 8]
    assert plan_sm_counts([50], 108, 4, 2) == [54]
    with pytest.raises(ValueError, match="shares_pct"):
        plan_sm_counts([0], 132, 8, 8)


def test_pool_creates_one_green_context_and_stream_per_share():
    lib = FakeCuda()
    pool = GreenContextPool((25, 50), lib=lib).open()
    assert [p.share_pct for p in pool.partitions] == [25.0, 50.0, 100.0]
    assert [p.sm_count for p in pool.partitions] == [32, 64, 132]
    assert pool.granularity == (8, 8) and pool.compute_capability == (9, 0)
    splits = [a for n, a in lib.calls if n == "cuDevSmResourceSplitByCount"]
    assert splits == [(1, 0, 32), (1, 0, 64)]  # one group each; 100 % is not split
    creates = [a for n, a in lib.calls if n == "cuGreenCtxCreate"]
    assert creates == [(1,), (1,), (1,)]  # CU_GREEN_CTX_DEFAULT_STREAM
    assert [a for n, a in lib.calls if n == "cuGreenCtxStreamCreate"] == [(1, 0)] * 3
    # each stream belongs to its own green context, with that partition's SMs
    for p in pool.partitions:
        assert lib.streams[p.stream] == p.green_ctx and lib.green[p.green_ctx] == p.sm_count
    assert pool.select(60).share_pct == 50 and pool.select(10).share_pct == 25
    assert pool.select(None).share_pct == 100 and pool.select(100).sm_count == 132
    assert len(pool.select_s) == 4 and all(t >= 0 for t in pool.select_s)
    assert pool.describe()["partitions"][1]["sm_count"] == 64
    pool.close()
    assert lib.green == {} and lib.streams == {} and pool.partitions == []


def test_pool_without_green_stream_create_uses_the_current_green_context():
    lib = FakeCuda(version=12040, stream_create=False)
    with GreenContextPool((50,), lib=lib) as pool:
        names = [n for n, _ in lib.calls]
        assert "cuCtxPushCurrent_v2" in names and "cuCtxPopCurrent_v2" in names
        assert lib.current == []
        for p in pool.partitions:
            assert lib.streams[p.stream] == p.green_ctx


def test_driver_reported_rules_override_the_table():
    lib = FakeCuda(version=13000, report_rules=(16, 4))
    with GreenContextPool((30,), lib=lib) as pool:
        assert pool.granularity == (16, 4)
        assert pool.partitions[0].sm_count == 40  # 0.3 * 132 = 39.6 -> multiple of 4
    # a 12.x driver: those bytes are opaque, the table holds
    with GreenContextPool((30,), lib=FakeCuda(version=12080, report_rules=(16, 4))) as pool:
        assert pool.granularity == (8, 8) and pool.partitions[0].sm_count == 40


def test_errors_name_the_call_and_clean_up():
    with pytest.raises(GreenContextError, match=r"12\.4"):
        GreenContextPool((50,), lib=FakeCuda(version=12030)).open()
    lib = FakeCuda(fail="cuGreenCtxStreamCreate")
    pool = GreenContextPool((50,), lib=lib)
    with pytest.raises(GreenContextError, match="cuGreenCtxStreamCreate failed: CUDA_ERROR_FAKE"):
        pool.open()
    assert lib.green == {} and pool.partitions == []  # the half-made context was destroyed


def test_switcher_follows_the_hook_file_at_iteration_boundaries(tmp_path):
    w = HookWriter(tmp_path / "gpu.hook")
    reader = HookReader(tmp_path / "gpu.hook")
    pool = GreenContextPool((25, 50, 75), lib=FakeCuda()).open()
    sw = PartitionSwitcher(pool, reader.share_pct, lambda p: ("stream", p.stream),
                           log_path=str(tmp_path / "spatial.csv"))
    first = sw.boundary()
    assert sw.current.share_pct == 100 and first == ("stream", sw.current.stream)
    w.set_share(50)
    assert sw.boundary() == ("stream", pool.select(50).stream)
    assert sw.boundary() is sw.stream and len(sw.switches) == 2  # no change, no switch
    w.set_share(30)
    sw.boundary()
    assert sw.current.share_pct == 25
    w.close()  # the daemon goes away: back to the full device
    reader.RECHECK_S = 0.0
    sw.boundary()
    assert sw.current.share_pct == 100
    sw.close()
    rows = read_csv(tmp_path / "spatial.csv")
    assert [r["share_pct"] for r in rows] == [100, 50, 25, 100]
    assert [r["sm_count"] for r in rows] == [132, 64, 32, 132]
    assert all(0 <= r["switch_s"] < 0.1 for r in rows)


def test_parse_shares():
    assert parse_shares("25,50") == [25.0, 50.0]
    for bad in ("", "0", "101", "x"):
        with pytest.raises(ValueError):
            parse_shares(bad)


class FakeStream:
    def __init__(self, name):
        self.name, self.waits = name, []

    def wait_stream(self, other):
        self.waits.append(other.name)


def fake_torch(new_api=True):
    """torch.cuda.green_contexts as released: 2.11+ (keyword-only ``create``, ``Stream()``) or
    2.8-2.10 (positional ``create``, ``set_context`` / ``pop_context``); no constructor."""
    made = []

    class GC:
        def __init__(self, *a, **k):
            raise TypeError("No constructor defined")

        @classmethod
        def _new(cls, n):
            obj = object.__new__(cls)
            made.append(n)
            obj.n, obj.stream, obj.log = n, FakeStream(f"g{n}"), []
            return obj

        if new_api:
            @classmethod
            def create(cls, *, num_sms=None, workqueue_scope=None,
                       workqueue_concurrency_limit=None, device_id=None):
                return cls._new(num_sms)

            def Stream(self):
                return self.stream
        else:
            @classmethod
            def create(cls, num_sms, device_id=0):
                return cls._new(num_sms)

            def set_context(self):
                self.log.append("set")

            def pop_context(self):
                self.log.append("pop")

    cur = FakeStream("main")
    entered = []

    class Ctx:
        def __init__(self, s):
            self.s = s

        def __enter__(self):
            entered.append(self.s.name)

        def __exit__(self, *a):
            return False

    cuda = types.SimpleNamespace(
        green_contexts=types.SimpleNamespace(GreenContext=GC),
        get_device_properties=lambda d: types.SimpleNamespace(multi_processor_count=132,
                                                              major=9),
        current_stream=lambda d=None: cur, stream=Ctx)
    return types.SimpleNamespace(cuda=cuda), made, entered, cur


def test_torch_helper_new_api():
    """PyTorch 2.11+: ``GreenContext.create`` is keyword-only (the helper called the class,
    then ``create(n, device)`` positionally, and ran every iteration unpartitioned)."""
    torch, made, entered, cur = fake_torch()
    share = [None]
    switches = []
    parts = GreenPartitions((25, 50, 100), read_share=lambda: share[0], torch=torch,
                            on_switch=lambda *a: switches.append(a))
    with parts.iteration() as s:
        assert s == 100
    assert parts.available and parts.backend == "torch", parts.reason
    assert made == [32, 64] and entered == []
    share[0] = 60
    with parts.iteration() as s:
        assert s == 50
    assert entered == ["g64"] and cur.waits == ["g64"]
    assert [(c, s, n) for c, s, n, _t in switches] == [(60, 50.0, 64)]
    assert sm_count_for(75, 132, 9) == 96


def test_torch_helper_on_another_pool_and_the_dry_run():
    from harness.hil.green_pools import SimulatedPool, make_pool
    from tests.harness.hil.fake_green import FakeCore

    share = [50]
    dry = GreenPartitions((25, 50), read_share=lambda: share[0], pool=SimulatedPool((25, 50)))
    with dry.iteration() as s:  # the rule, not the stream: the CPU runs it unchanged
        assert s == 50 and dry.backend == "simulated"
    share[0] = 30
    with dry.iteration() as s:
        assert s == 25
    torch, _made, entered, cur = fake_torch()
    made_ext = []

    def external(ptr, device=None):
        made_ext.append(ptr)
        return FakeStream(f"x{ptr}")

    torch.cuda.ExternalStream = external
    pool = make_pool("cuda.core", (25, 50), core=FakeCore())
    parts = GreenPartitions((25, 50), read_share=lambda: 50, pool=pool, torch=torch)
    with parts.iteration() as s:
        assert s == 50
    assert parts.backend == "cuda.core" and made_ext == [pool.select(50).stream]
    assert entered == [f"x{made_ext[0]}"] and cur.waits == [f"x{made_ext[0]}"]


def test_torch_helper_old_api_and_missing_green_contexts():
    torch, _made, _e, _c = fake_torch(new_api=False)
    parts = GreenPartitions((50,), read_share=lambda: 50, torch=torch)
    with parts.iteration() as s:
        assert s == 50
    assert parts._ctx[50.0].log == ["set", "pop"]
    broken = types.SimpleNamespace(cuda=types.SimpleNamespace())
    parts = GreenPartitions((50,), read_share=lambda: 50, torch=broken)
    with parts.iteration() as s:
        assert s == 100  # unchanged loop
    assert parts.available is False and "green_contexts" in parts.reason


# ---- the emulator's cupy-green backend over a fake CuPy -------------------------------------
class FakeCupy:
    """Just what CupyBackend and GreenCupyBackend touch; records the stream of each launch."""

    uint8 = np.uint8

    def __init__(self):
        self.launches, self.records, self.active = [], [], ["null"]
        cp = self

        class Stream:
            def __init__(self, non_blocking=False, ptr="primary"):
                self.ptr = ptr

            def __enter__(self):
                cp.active.append(self.ptr)

            def __exit__(self, *a):
                cp.active.pop()

            def synchronize(self):
                pass

        class Event:
            def record(self, stream):
                cp.records.append(stream.ptr)

            def synchronize(self):
                pass

        class Device:
            id = 0
            attributes = {"MultiProcessorCount": 132}  # noqa: RUF012 -- as CuPy's

        self.cuda = types.SimpleNamespace(
            Stream=Stream, Event=Event, Device=Device,
            ExternalStream=lambda ptr, dev: Stream(ptr=ptr),
            get_elapsed_time=lambda a, b: 1.0)
        self.random = types.SimpleNamespace(
            RandomState=lambda seed: types.SimpleNamespace(
                random_sample=lambda shape: np.zeros(shape)))

    def empty(self, shape, dtype=None):
        return np.empty(shape, dtype=dtype)

    def matmul(self, a, b, out=None):
        self.launches.append(self.active[-1])


def test_green_cupy_backend_launches_on_the_commanded_partition(tmp_path, monkeypatch):
    import harness.hil.emulator_backends as te
    from harness.hil.green_emulator import GreenCupyBackend

    cp = FakeCupy()
    monkeypatch.setattr(te, "require", lambda name: cp if name == "cupy" else
                        types.SimpleNamespace(empty_pinned=np.empty))
    w = HookWriter(tmp_path / "gpu.hook")
    b = GreenCupyBackend(64, "float32", 0.0, False, shares_pct=[25, 50], lib=FakeCuda(),
                         hook_path=str(tmp_path / "gpu.hook"),
                         spatial_log=str(tmp_path / "sw.csv"))
    full, half = b.pool.select(None).stream, b.pool.select(50).stream
    b.run_iteration(4)
    assert set(cp.launches) == {full} and set(cp.records) == {full}
    cp.launches.clear()
    cp.records.clear()
    w.set_share(50)
    t = b.run_iteration(4)
    assert cp.launches == [half] * 4 and set(cp.records) == {half}
    assert t.compute_s == 1e-3 and t.sm is None
    b.close()
    assert b.stream.ptr == "primary" and b.pool.partitions == []
    assert [r["sm_count"] for r in read_csv(tmp_path / "sw.csv")] == [132, 64]
    w.close()
