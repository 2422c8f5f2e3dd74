"""What GPU the harness runs on, for the results' metadata (``gpu.json``, ``meta.json``)."""

from __future__ import annotations

from typing import Any

__all__ = ["gpu_info"]


def gpu_info(device: int = 0) -> dict[str, Any]:
    """Name, SM count, driver and CUDA versions of a GPU, for the results' metadata.

    Read-only queries through CuPy (and nvidia-ml-py for the driver string when installed).
    """
    from harness.hil._lazy import require

    cp = require("cupy")
    props = cp.cuda.runtime.getDeviceProperties(device)
    name = props["name"]
    info: dict[str, Any] = {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "multiprocessor_count": int(props["multiProcessorCount"]),
        "total_memory_gib": round(int(props["totalGlobalMem"]) / 2**30, 1),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "cuda_driver_api": int(cp.cuda.runtime.driverGetVersion()),
        "cuda_runtime": int(cp.cuda.runtime.runtimeGetVersion()),
        "cupy": cp.__version__,
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            drv = pynvml.nvmlSystemGetDriverVersion()
            info["driver"] = drv.decode() if isinstance(drv, bytes) else str(drv)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        info["driver"] = None
    return info
