"""One contract for every green-context pool (harness.hil.green_pools): the dry-run pool and
the three real ones over fakes of their libraries on the CPU, and the real ones on a GPU
(marker ``gpu``; skipped without CuPy and a CUDA device, or without the library)."""

import pytest

from harness.hil.green_ctx import GreenContextError, PartitionPool
from harness.hil.green_pools import make_pool, open_pool
from tests.harness.hil.fake_cuda import FakeCuda
from tests.harness.hil.fake_green import FakeCore, FakeTorch

SHARES = (25, 50, 75)


def _fake(name):
    if name == "simulated":
        return make_pool("simulated", SHARES), lambda: True
    if name == "ctypes":
        lib = FakeCuda()
        return make_pool("ctypes", SHARES, lib=lib), lambda: lib.green == {} == lib.streams
    if name == "cuda.core":
        core = FakeCore()
        return make_pool("cuda.core", SHARES, core=core), lambda: core.live == {}
    torch = FakeTorch()
    return make_pool("torch", SHARES, torch=torch), lambda: True


def _real(name):
    from tests.harness.hil.conftest import gpu_skip_reason

    why = gpu_skip_reason()
    if why:
        pytest.skip(f"GPU test skipped: {why}")
    pytest.importorskip({"cuda.core": "cuda.core", "torch": "torch",
                         "ctypes": "ctypes"}[name])
    return make_pool(name, SHARES), lambda: True


POOLS = [pytest.param(("fake", n), id=f"{n}-cpu") for n in
         ("simulated", "ctypes", "cuda.core", "torch")] + \
        [pytest.param(("real", n), id=f"{n}-gpu", marks=pytest.mark.gpu) for n in
         ("cuda.core", "torch", "ctypes")]


@pytest.fixture(params=POOLS)
def pool_and_released(request):
    kind, name = request.param
    pool, released = (_fake if kind == "fake" else _real)(name)
    try:
        pool.open()
    except GreenContextError as exc:
        if kind == "real":
            pytest.skip(f"{name} green contexts unavailable here: {exc}")
        raise
    yield pool, released, kind
    pool.close()


def test_partitions_cover_every_share_and_the_full_device(pool_and_released):
    pool, _released, _kind = pool_and_released
    assert isinstance(pool, PartitionPool)
    shares = [p.share_pct for p in pool.partitions]
    assert shares == [25.0, 50.0, 75.0, 100.0]
    counts = [p.sm_count for p in pool.partitions]
    assert counts == sorted(counts) and counts[-1] == pool.total_sms
    lo, step = pool.granularity if pool.backend != "simulated" else (1, 1)
    for p in pool.partitions[:-1]:
        assert lo <= p.sm_count < pool.total_sms
        assert p.sm_count % step == 0, (p.sm_count, step)
    streams = [p.stream for p in pool.partitions]
    assert all(isinstance(s, int) and s for s in streams) and len(set(streams)) == 4


def test_select_picks_the_largest_partition_not_above_the_command(pool_and_released):
    pool, _released, _kind = pool_and_released
    assert pool.select(60).share_pct == 50 and pool.select(75).share_pct == 75
    assert pool.select(10).share_pct == 25  # below the smallest: the smallest
    assert pool.select(None).sm_count == pool.total_sms
    # a lookup, not a context's creation: under a millisecond, but one call on a busy CI
    # machine can wait for the CPU (4 ms seen beside a busy loop): three of the four are held
    times = sorted(pool.select_s)
    assert len(times) == 4 and times[0] >= 0 and times[2] < 1e-3 and times[-1] < 0.1
    d = pool.describe()
    assert d["backend"] == pool.backend and len(d["partitions"]) == 4


def test_close_releases_everything_and_is_idempotent(pool_and_released):
    pool, released, _kind = pool_and_released
    pool.close()
    pool.close()
    assert pool.partitions == [] and released()
    with pytest.raises(RuntimeError, match="before open"):
        pool.select(50)


def test_partition_streams_confine_a_smid_sample(pool_and_released):
    pool, _released, kind = pool_and_released
    if kind != "real":
        pytest.skip("needs the GPU: a %smid sample on each partition's stream")
    import cupy as cp

    from harness.hil.smid import SMIDSampler

    sampler = SMIDSampler(cupy=cp)
    for p in pool.partitions:
        s = sampler.sample(cp.cuda.ExternalStream(p.stream, pool.device))
        assert 0 < s.n_sms <= p.sm_count and s.peak_sms <= p.sm_count, (p, s)


def test_auto_falls_back_to_the_ctypes_layer_and_says_why(monkeypatch):
    import harness.hil.green_pools as gp

    broken = FakeCore(fail_split=True)
    real_make = gp.make_pool
    monkeypatch.setattr(gp, "make_pool", lambda name, shares, **kw: real_make(
        name, shares, **({"core": broken} if name == "cuda.core" else {}),
        **({"lib": FakeCuda()} if name == "ctypes" else {})))
    pool = open_pool(SHARES, backend="auto")
    assert pool.backend == "ctypes"
    assert pool.tried and pool.tried[0].startswith("cuda.core: RuntimeError: CUDA_ERROR_NOT_SUP")
    assert pool.describe()["not_used"] == pool.tried and broken.live == {}
    pool.close()
    monkeypatch.undo()
    with pytest.raises(GreenContextError, match="no green-context pool"):
        open_pool(SHARES, backend="ctypes", lib=FakeCuda(version=12000))
    with pytest.raises(ValueError, match="backend"):
        open_pool(SHARES, backend="mig")


def test_torch_pool_runs_the_whole_device_on_a_plain_stream():
    """132 SMs are no multiple of the 8-SM split step: the full device is not split."""
    torch = FakeTorch()
    pool = make_pool("torch", SHARES, torch=torch).open()
    assert torch.made == [32, 64, 96] and pool.partitions[-1].sm_count == 132
