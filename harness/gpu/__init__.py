"""Hardware-in-the-loop GPU harness (seed 000 §IV-B, §V-A, §VII-A).

- :mod:`harness.gpu.smid` — ``%smid`` sampler (``cuda_kernels/smid.cu`` via cupy.RawModule):
  which SMs a process's blocks reach, as a fraction of the multiprocessor count.
- :mod:`harness.gpu.training_emulator` — ``python -m harness.gpu.training_emulator``: CuPy
  matmuls sized to a target iteration time, emulated H2D copy, cooperative sleep hook.
- :mod:`harness.gpu.inference` — ``python -m harness.gpu.inference``: ResNet-50 on random
  batches with per-batch latency (CUDA events and wall clock).
- :mod:`harness.gpu.mps` — a private MPS control daemon (``gpucontrol.actuators.mps.MPSControl``)
  for an experiment, always stopped with ``quit``; sleep-only fallback without MPS.
- :mod:`harness.gpu.plant` — :class:`GPUPlant`, the real co-location behind the Plant protocol.

No GPU package (cupy, torch, pynvml) is imported at module level anywhere in this package, so
``import harness.gpu`` works on a machine without a GPU; the GPU paths import them lazily and
raise :class:`GPUUnavailableError` with an install hint when they are missing.
"""

from ._lazy import GPUUnavailableError, cupy_device_count, torch_cuda_available
from .mps import client_env, mps_session
from .smid import SMIDSampler, SMSample, summarize_smids

__all__ = [
           "GPUUnavailableError",
           "SMIDSampler",
           "SMSample",
           "client_env",
           "cupy_device_count",
           "mps_session",
           "summarize_smids",
           "torch_cuda_available",
]
