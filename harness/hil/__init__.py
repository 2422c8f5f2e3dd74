"""Hardware-in-the-loop GPU harness (GPUColo paper, Sec. IV-B, V-A, VII-A).

- :mod:`harness.hil.smid` — ``%smid`` sampler (``cuda_kernels/smid.cu`` via cupy.RawModule):
  which SMs a process's blocks reach, as a fraction of the multiprocessor count.
- :mod:`harness.hil.training_emulator` — ``python -m harness.hil.training_emulator``: CuPy
  matmuls sized to a target iteration time, emulated H2D copy, cooperative sleep hook.
- :mod:`harness.hil.inference` — ``python -m harness.hil.inference``: ResNet-50 on random
  batches with per-batch latency (CUDA events and wall clock).
- :mod:`harness.hil.mps_session` — a private MPS control daemon
  (``gpucontrol.node.actuators.mps.MPSControl``) for an experiment, always stopped with
  ``quit``; sleep-only fallback without MPS.
- :mod:`harness.hil.gpu_plant` — :class:`GPUPlant`, the real co-location behind the Plant protocol
  (:mod:`harness.hil.sizing`: its inference batch sized to the GPU).
- :mod:`harness.hil.torch_training` — ``python -m harness.hil.torch_training``: a PyTorch
  ResNet-18 training on the commanded green-context partition (the loop to copy).
- :mod:`harness.hil.green_pools` — green-context pools through cuda.core, PyTorch, or the
  ctypes driver layer (:mod:`harness.hil.green_ctx`); :mod:`harness.hil.spatial_plant` and
  :mod:`harness.hil.spatial_study` — the plant and the study of restart-free shares.
- :mod:`harness.hil.daemon_run` — the node agent as its own process through a burst.
- :mod:`harness.hil.cpu` — the CPU plant: real inference and training processes sharing this
  machine's CPUs (no GPU), the registry's ``cpu`` plant.

No GPU package (cupy, torch, pynvml) is imported at module level anywhere in this package, so
``import harness.hil`` works on a machine without a GPU; the GPU paths import them lazily and
raise :class:`GPUUnavailableError` with an install hint when they are missing.
"""

from typing import Any

from harness.hil._lazy import GPUUnavailableError, cupy_device_count, torch_cuda_available

#: Names exported from submodules, imported on first use: a submodule imported here eagerly
#: would already be in ``sys.modules`` when ``python -m harness.hil.smid`` runs it as
#: ``__main__`` (runpy's RuntimeWarning, and two copies of the module).
_LAZY = {"SMIDSampler": "harness.hil.smid", "SMSample": "harness.hil.smid",
         "summarize_smids": "harness.hil.smid", "client_env": "harness.hil.mps_session",
         "mps_session": "harness.hil.mps_session"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness.hil' has no attribute {name!r}")

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
