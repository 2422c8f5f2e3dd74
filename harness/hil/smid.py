"""Which SMs can a process occupy right now? Sample ``%smid`` with a tiny kernel.

The GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-B, measures the training job's SM share by
sampling the SM ids its blocks run on
in every iteration. :class:`SMIDSampler` loads ``cuda_kernels/smid.cu`` with
``cupy.RawModule``, launches it on a given stream (the training stream), and
:func:`summarize_smids` turns the recorded ids into the distinct SMs and their fraction of the
device's multiprocessor count.

Run ``python -m harness.hil.smid`` on a GPU to print one sample of the idle device.

Examples
--------
>>> s = summarize_smids([3, 1, 3, 0, 1], multiprocessor_count=8)
>>> s.sm_ids, s.n_sms, s.fraction
((0, 1, 3), 3, 0.375)

Each block is also timed (``%globaltimer`` at its start and end), which gives the second
reading of a launch: the most SMs that held one of its blocks *at the same instant*
(:func:`peak_concurrent_sms`). The union of ids counts every SM the launch visited; under MPS,
whose active-thread percentage caps how many SMs a client uses at a time but not which ones,
the union over one launch overstates the share (on the H100, 0.44-0.63 of the SMs for MPS
25-100 %), and the peak is the reading that means "the SMs the process can hold".

>>> s = summarize_smids([0, 1, 2], 4, starts=[0, 10, 20], ends=[10, 20, 30])
>>> s.n_sms, s.peak_sms, s.peak_fraction       # three SMs, one at a time
(3, 1, 0.25)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.hil._lazy import gpu_entry_point, require
from harness.results import json_line

#: Environment variable that overrides the folder holding the ``.cu`` sources.
KERNELS_ENV = "GPUCONTROL_CUDA_KERNELS"
KERNEL_FILE = "smid.cu"
KERNEL_NAME = "record_smid"


def kernels_dir() -> Path:
    """The folder of the ``.cu`` sources: ``$GPUCONTROL_CUDA_KERNELS`` if set, else the
    installed :mod:`cuda_kernels` package (package data, found without the source tree)."""
    env = os.environ.get(KERNELS_ENV)
    if env:
        return Path(env)
    import cuda_kernels

    return cuda_kernels.KERNELS_DIR


def kernel_source(path: str | os.PathLike[str] | None = None) -> str:
    """Return the CUDA source of the sampler (``cuda_kernels/smid.cu`` unless ``path``)."""
    p = Path(path) if path is not None else kernels_dir() / KERNEL_FILE
    try:
        return p.read_text()
    except OSError as exc:
        raise FileNotFoundError(
            f"cannot read the %smid kernel source {p} ({exc}); reinstall gpucontrol (the "
            f".cu files are package data) or set {KERNELS_ENV} to the cuda_kernels folder") from exc


@dataclass(frozen=True)
class SMSample:
    """One launch of the sampler.

    ``sm_ids`` are the distinct SM ids seen (sorted); ``fraction`` is their count over the
    device's multiprocessor count; ``out_of_range`` lists ids ``>= multiprocessor_count``
    (PTX allows non-contiguous ids; on Ampere/Hopper there should be none).

    Parameters
    ----------
    sm_ids : tuple[int, ...]
        The distinct SM ids seen, sorted.
    multiprocessor_count : int
        The device's SM count, >= 1.
    blocks : int
        Blocks the kernel launched (ids read).
    nsmid : int or None
        The ``%nsmid`` the kernel read, if any.
    peak_sms : int or None
        The most SMs holding a block of the launch at one instant (None: not timed).
    """

    sm_ids: tuple[int, ...]
    multiprocessor_count: int
    blocks: int
    nsmid: int | None = None
    peak_sms: int | None = None

    def __post_init__(self) -> None:
        if self.multiprocessor_count < 1:
            raise ValueError("multiprocessor_count must be >= 1, "
                             f"got {self.multiprocessor_count!r}")
        if self.blocks < 0:
            raise ValueError(f"blocks must be >= 0, got {self.blocks!r}")
        if self.peak_sms is not None and self.peak_sms < 0:
            raise ValueError(f"peak_sms must be >= 0, got {self.peak_sms!r}")

    @property
    def n_sms(self) -> int:
        return len(self.sm_ids)

    @property
    def fraction(self) -> float:
        """Distinct SMs over the multiprocessor count, in [0, 1] when ids are contiguous."""
        return self.n_sms / self.multiprocessor_count

    @property
    def peak_fraction(self) -> float:
        """Peak concurrent SMs over the multiprocessor count (NaN when not timed)."""
        return self.peak_sms / self.multiprocessor_count if self.peak_sms is not None \
            else float("nan")

    @property
    def out_of_range(self) -> tuple[int, ...]:
        return tuple(i for i in self.sm_ids if i >= self.multiprocessor_count)

    def as_dict(self) -> dict[str, Any]:
        return {"n_sms": self.n_sms, "sm_fraction": self.fraction,
                "multiprocessor_count": self.multiprocessor_count, "blocks": self.blocks,
                "nsmid": self.nsmid, "max_sm_id": max(self.sm_ids) if self.sm_ids else None,
                "peak_n_sms": self.peak_sms,
                "sm_peak_fraction": None if self.peak_sms is None else self.peak_fraction}


def peak_concurrent_sms(ids: Sequence[int], starts: Sequence[float],
                        ends: Sequence[float]) -> int:
    """The most distinct SMs holding at least one block at the same instant.

    A sweep over the blocks' ``[start, end)`` intervals (ends before starts at equal times; an
    interval shorter than one clock tick counts as one tick).

    Parameters
    ----------
    ids : sequence of int
        Each block's SM id.
    starts, ends : sequence of float
        Each block's start and end time (any unit, one clock).

    Returns
    -------
    int
        The peak number of SMs in use at once (0 for no blocks).

    >>> peak_concurrent_sms([0, 1, 0, 1], [0, 0, 5, 5], [5, 5, 9, 9])   # two at a time
    2
    >>> peak_concurrent_sms([0, 0, 1], [0, 1, 2], [3, 3, 3])           # SM 0 twice, then 1
    2
    """
    events: list[tuple[float, int, int]] = []
    for sm, a, b in zip(ids, starts, ends):
        a, b = float(a), float(b)
        events += [(a, 1, int(sm)), (max(b, a + 1), 0, int(sm))]  # 0 sorts ends first
    held: dict[int, int] = {}
    busy = peak = 0
    for _t, kind, sm in sorted(events):
        if kind:
            held[sm] = held.get(sm, 0) + 1
            busy += held[sm] == 1
            peak = max(peak, busy)
        else:
            held[sm] -= 1
            busy -= held[sm] == 0
    return peak


def summarize_smids(ids: Iterable[int], multiprocessor_count: int, *,
                    nsmid: int | None = None, starts: Sequence[float] | None = None,
                    ends: Sequence[float] | None = None) -> SMSample:
    """Distinct SM ids of one launch, their share of the device, and the peak held at once.

    Parameters
    ----------
    ids : iterable of int
        The per-block SM ids the kernel wrote (any order, repeats allowed).
    multiprocessor_count : int
        The device's SM count (``cudaDevAttrMultiProcessorCount``), >= 1.
    nsmid : int, optional
        The ``%nsmid`` the kernel read (upper bound on ids), for the record.
    starts, ends : sequence of float, optional
        Each block's start and end (``%globaltimer``); with them the sample has ``peak_sms``.

    Returns
    -------
    SMSample
        The distinct ids and their share.
    """
    vals = [int(i) for i in ids]
    if any(v < 0 for v in vals):
        raise ValueError(f"SM ids must be >= 0, got {min(vals)}")
    peak = None
    if starts is not None and ends is not None:
        if not len(starts) == len(ends) == len(vals):
            raise ValueError(f"starts and ends must have one entry per id ({len(vals)}), got "
                             f"{len(starts)} and {len(ends)}")
        peak = peak_concurrent_sms(vals, starts, ends)
    return SMSample(tuple(sorted(set(vals))), int(multiprocessor_count), len(vals),
                    None if nsmid is None else int(nsmid), peak)


class SMIDSampler:
    """Launch ``record_smid`` on a CuPy stream and read back the SMs its blocks ran on.

    Parameters
    ----------
    blocks : int, optional
        Grid size; default 4 x the multiprocessor count, so every SM the context may use
        gets a block.
    threads : int
        Threads per block (only thread 0 works; a warp keeps the footprint honest).
    spin_cycles : int
        Clock cycles each block stays resident (~10 us at 2 GHz by default), so that the
        scheduler spreads the grid over all SMs it is allowed to use.
    source_path : path, optional
        Kernel source (default ``cuda_kernels/smid.cu``).
    cupy : module, optional
        The CuPy module (injected by tests); imported lazily otherwise.

    ``launch(stream)`` queues the kernel without waiting (call it between the training
    matmuls, on the training stream); ``collect(stream)`` waits for it and returns the
    :class:`SMSample`; ``sample(stream)`` does both.
    """

    def __init__(self, *, blocks: int | None = None, threads: int = 32,
                 spin_cycles: int = 20_000, source_path: str | os.PathLike[str] | None = None,
                 cupy: Any = None) -> None:
        cp = cupy if cupy is not None else require("cupy")
        self._cp = cp
        if threads < 1 or threads > 1024:
            raise ValueError(f"threads must be in [1, 1024], got {threads!r}")
        if spin_cycles < 0:
            raise ValueError(f"spin_cycles must be >= 0, got {spin_cycles!r}")
        dev = cp.cuda.Device()
        self.multiprocessor_count = int(dev.attributes["MultiProcessorCount"])
        self.blocks = 4 * self.multiprocessor_count if blocks is None else int(blocks)
        if self.blocks < 1:
            raise ValueError(f"blocks must be >= 1, got {blocks!r}")
        self.threads = int(threads)
        self.spin_cycles = int(spin_cycles)
        module = cp.RawModule(code=kernel_source(source_path))
        self._kernel = module.get_function(KERNEL_NAME)
        self._out = cp.zeros(self.blocks, dtype=cp.uint32)
        self._nsmid = cp.zeros(1, dtype=cp.uint32)
        self._times = cp.zeros(2 * self.blocks, dtype=cp.uint64)
        self._launched = False

    def launch(self, stream: Any = None) -> None:
        """Queue one sampler launch on ``stream`` (the current stream if None)."""
        cp = self._cp
        args = (self._out, self._nsmid, cp.int32(self.blocks), cp.int64(self.spin_cycles),
                self._times)
        if stream is None:
            self._kernel((self.blocks,), (self.threads,), args)
        else:
            with stream:  # RawKernel launches on the current stream
                self._kernel((self.blocks,), (self.threads,), args)
        self._launched = True

    def collect(self, stream: Any = None) -> SMSample:
        """Wait for the last launch and summarize it."""
        if not self._launched:
            raise RuntimeError("collect() before launch()")
        kw = {"stream": stream} if stream is not None else {}
        ids = self._out.get(**kw)
        nsmid = self._nsmid.get(**kw)
        raw = self._times.get(**kw).astype("int64")  # ns since an epoch: keep the digits
        times = (raw - raw.min()).astype(float) if raw.size else raw.astype(float)
        self._launched = False
        return summarize_smids(ids.tolist(), self.multiprocessor_count, nsmid=int(nsmid[0]),
                               starts=times[0::2], ends=times[1::2])

    def sample(self, stream: Any = None) -> SMSample:
        self.launch(stream)
        return self.collect(stream)


def _at_least_1(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return v


@gpu_entry_point("python -m harness.hil.smid")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.hil.smid",
                                 description="Print the SMs a %smid sample reaches (JSON).")
    ap.add_argument("--samples", type=_at_least_1, default=5, help="samples, >= 1 (default 5)")
    ap.add_argument("--blocks", type=_at_least_1, default=None,
                    help="blocks per launch, >= 1 (default: 4 per SM)")
    ap.add_argument("--spin-cycles", type=_at_least_1, default=20_000,
                    help="cycles each block spins, >= 1 (default 20000)")
    args = ap.parse_args(argv)
    sampler = SMIDSampler(blocks=args.blocks, spin_cycles=args.spin_cycles)
    seen: set[int] = set()
    peaks: list[int] = []
    for _ in range(args.samples):
        s = sampler.sample()
        seen.update(s.sm_ids)
        if s.peak_sms is not None:
            peaks.append(s.peak_sms)
        print(json_line(s.as_dict()))
    union = summarize_smids(seen, sampler.multiprocessor_count)
    print(json_line({"union_n_sms": union.n_sms, "union_fraction": union.fraction,
                     "max_peak_n_sms": max(peaks) if peaks else None,
                     "out_of_range": list(union.out_of_range)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
