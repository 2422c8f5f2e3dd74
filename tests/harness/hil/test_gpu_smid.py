"""CPU-side tests of the %smid sampler: the summary, the kernel source, the CuPy wrapper
against a fake CuPy, and the PTX the kernel compiles to (when nvcc is present)."""

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.hil import smid
from harness.hil.smid import SMIDSampler, SMSample, kernel_source, summarize_smids

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("ids, count, distinct, frac", [
    ([0, 1, 2, 3], 4, (0, 1, 2, 3), 1.0),
    ([5, 5, 5], 10, (5,), 0.1),
    ([], 82, (), 0.0),
    ([81, 0, 40, 40, 0], 82, (0, 40, 81), 3 / 82),
])
def test_summarize(ids, count, distinct, frac):
    s = summarize_smids(ids, count)
    assert s.sm_ids == distinct
    assert s.n_sms == len(distinct)
    assert s.blocks == len(ids)
    assert s.fraction == pytest.approx(frac, abs=1e-12)
    assert s.out_of_range == ()


@given(st.lists(st.integers(0, 200), max_size=600), st.integers(1, 200))
def test_summary_properties(ids, count):
    s = summarize_smids(ids, count)
    assert list(s.sm_ids) == sorted(set(ids))
    assert s.out_of_range == tuple(i for i in s.sm_ids if i >= count)
    if not s.out_of_range:
        assert 0.0 <= s.fraction <= 1.0


def test_out_of_range_ids_are_flagged_not_hidden():
    s = summarize_smids([0, 3, 9], 4, nsmid=10)
    assert s.out_of_range == (9,)
    assert s.nsmid == 10
    assert s.as_dict()["max_sm_id"] == 9


@pytest.mark.parametrize("kw, field", [({"multiprocessor_count": 0, "blocks": 1}, "multipro"),
                                       ({"multiprocessor_count": 4, "blocks": -1}, "blocks")])
def test_sample_validation(kw, field):
    with pytest.raises(ValueError, match=field):
        SMSample((), **kw)


def test_negative_ids_rejected():
    with pytest.raises(ValueError, match="SM ids"):
        summarize_smids([0, -1], 4)


def test_kernel_source_reads_smid_register():
    src = kernel_source()
    assert "record_smid" in src
    assert 'asm volatile("mov.u32 %0, %%smid;"' in src
    assert 'extern "C"' in src


def test_kernel_dir_override(tmp_path, monkeypatch):
    (tmp_path / "smid.cu").write_text("// custom")
    monkeypatch.setenv(smid.KERNELS_ENV, str(tmp_path))
    assert kernel_source() == "// custom"


def test_missing_source_says_how_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="GPUCONTROL_CUDA_KERNELS"):
        kernel_source(tmp_path / "nope.cu")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_kernel_compiles_to_ptx_reading_smid(tmp_path):
    out = tmp_path / "smid.ptx"
    subprocess.run(["nvcc", "--ptx", "-o", str(out), str(ROOT / "cuda_kernels" / "smid.cu")],
                   check=True, capture_output=True)
    ptx = out.read_text()
    assert ".entry record_smid" in ptx
    assert "%smid;" in ptx and "%nsmid;" in ptx


# ---- the CuPy wrapper against a fake CuPy -----------------------------------------------------
class FakeArray:
    def __init__(self, n, dtype):
        self.data = np.zeros(n, dtype=dtype)

    def get(self, stream=None):
        return self.data.copy()


class FakeStream:
    entered = 0

    def __enter__(self):
        FakeStream.entered += 1
        return self

    def __exit__(self, *exc):
        return False


def make_fake_cupy(sm_count, assign, interval=lambda b: (0, 10)):
    """A CuPy stand-in: the kernel writes ``assign(block)`` as each block's SM id and
    ``interval(block)`` as its start and end time."""
    calls = []

    class Kernel:
        def __call__(self, grid, block, args):
            out, nsmid, n, spin, times = args
            calls.append((grid, block, int(n), int(spin)))
            for b in range(grid[0]):
                out.data[b] = assign(b)
                times.data[2 * b:2 * b + 2] = interval(b)
            nsmid.data[0] = sm_count

    class RawModule:
        def __init__(self, code):
            assert "record_smid" in code
            self.code = code

        def get_function(self, name):
            assert name == "record_smid"
            return Kernel()

    cp = SimpleNamespace(
        cuda=SimpleNamespace(Device=lambda: SimpleNamespace(
            attributes={"MultiProcessorCount": sm_count})),
        RawModule=RawModule, zeros=lambda n, dtype: FakeArray(n, dtype),
        uint32=np.uint32, uint64=np.uint64, int32=np.int32, int64=np.int64)
    return cp, calls


def test_sampler_launches_four_blocks_per_sm_and_summarizes():
    cp, calls = make_fake_cupy(8, assign=lambda b: b % 6)  # only 6 of 8 SMs reachable
    s = SMIDSampler(cupy=cp).sample()
    assert calls == [((32,), (32,), 32, 20_000)]
    assert s.sm_ids == tuple(range(6))
    assert s.fraction == pytest.approx(6 / 8)
    assert s.nsmid == 8


def test_peak_counts_the_sms_held_at_once_not_the_sms_visited():
    # MPS-like: the launch moves over 8 SMs in waves of 2 -- the union reads 8, the peak 2
    cp, _ = make_fake_cupy(8, assign=lambda b: b % 8,
                           interval=lambda b: (100 * (b // 2), 100 * (b // 2) + 90))
    s = SMIDSampler(cupy=cp, blocks=8).sample()
    assert (s.n_sms, s.peak_sms) == (8, 2)
    assert s.fraction == 1.0 and s.peak_fraction == pytest.approx(0.25)
    # a partition: the same SMs all along -- both read 3
    cp, _ = make_fake_cupy(8, assign=lambda b: b % 3, interval=lambda b: (0, 50))
    s = SMIDSampler(cupy=cp, blocks=12).sample()
    assert (s.n_sms, s.peak_sms) == (3, 3)
    assert s.as_dict()["sm_peak_fraction"] == pytest.approx(3 / 8)


@given(st.lists(st.tuples(st.integers(0, 15), st.integers(0, 50), st.integers(0, 20)),
                max_size=60))
def test_peak_is_at_most_the_union_and_at_least_one(blocks):
    ids = [b[0] for b in blocks]
    starts = [b[1] for b in blocks]
    ends = [b[1] + b[2] for b in blocks]  # zero-length blocks count as one tick
    s = summarize_smids(ids, 16, starts=starts, ends=ends)
    assert (1 if ids else 0) <= s.peak_sms <= s.n_sms
    assert summarize_smids(ids, 16).peak_sms is None
    with pytest.raises(ValueError, match="one entry per id"):
        summarize_smids([1, 2], 4, starts=[0], ends=[1])


def test_sampler_uses_the_given_stream():
    cp, calls = make_fake_cupy(4, assign=lambda b: 0)
    sampler = SMIDSampler(cupy=cp, blocks=5, spin_cycles=0)
    before = FakeStream.entered
    s = sampler.sample(FakeStream())
    assert FakeStream.entered == before + 1
    assert calls[-1] == ((5,), (32,), 5, 0)
    assert s.sm_ids == (0,) and s.blocks == 5


def test_collect_before_launch_is_an_error():
    cp, _ = make_fake_cupy(4, assign=lambda b: 0)
    with pytest.raises(RuntimeError, match="before launch"):
        SMIDSampler(cupy=cp).collect()


@pytest.mark.parametrize("kw, msg", [({"threads": 0}, "threads"), ({"spin_cycles": -1}, "spin"),
                                     ({"blocks": 0}, "blocks")])
def test_sampler_validation(kw, msg):
    cp, _ = make_fake_cupy(4, assign=lambda b: 0)
    with pytest.raises(ValueError, match=msg):
        SMIDSampler(cupy=cp, **kw)


def test_import_harness_gpu_loads_no_gpu_package():
    code = ("import sys, harness.hil, harness.hil.smid, harness.hil.training_emulator, "
            "harness.hil.inference, harness.hil.mps_session; "
            "print(','.join(m for m in ('cupy', 'torch', 'torchvision', 'pynvml') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_sampler_without_cupy_says_what_to_install(monkeypatch):
    from harness.hil import GPUUnavailableError

    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` now raises ImportError
    with pytest.raises(GPUUnavailableError, match="cupy"):
        SMIDSampler()
