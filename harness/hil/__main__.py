"""``python -m harness.hil``: print what the GPU harness sees (JSON), for the results' README.

Read-only: the GPU's name, SM count, driver and CUDA versions, the package versions, and
whether ``nvidia-cuda-mps-control`` is installed, and which spatial-share backends
(``gpucontrol.node.actuators.spatial.detect_backends``) this machine offers and why not.
Changes nothing on the GPU.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys


def main() -> int:
    out: dict[str, object] = {"python": platform.python_version(),
                              "mps_control": shutil.which("nvidia-cuda-mps-control")}
    try:
        from harness.hil.gpu_plant import gpu_info

        out["gpu"] = gpu_info()
    except Exception as exc:
        out["gpu"] = None
        out["gpu_error"] = f"{type(exc).__name__}: {exc}"
    try:
        from gpucontrol.node.actuators.spatial import detect_backends

        out["spatial_backends"] = [i.as_dict() for i in detect_backends()]
    except Exception as exc:
        out["spatial_backends_error"] = f"{type(exc).__name__}: {exc}"
    for mod in ("torch", "torchvision", "control", "sysidentpy", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
