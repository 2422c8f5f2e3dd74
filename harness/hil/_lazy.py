"""Lazy imports of the GPU packages, with errors that say what to install.

Nothing in :mod:`harness.hil` imports cupy, torch or pynvml at module level; the functions that
need them call these helpers, so ``import harness.hil`` works on a machine without a GPU.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Protocol

from gpucontrol.errors import GPUUnavailableError, PlantUnavailable

_HINTS = {
    "cupy": "install the CuPy build matching your CUDA driver: "
            "`pip install -e '.[gpu]'` (cupy-cuda13x, with PyPI's CUDA 13 torch) or "
            "`pip install -e '.[gpu-cuda12]'` (cupy-cuda12x; torch from PyTorch's cu12 index)",
    "torch": "install torch and torchvision (`pip install -e '.[gpu]'`)",
    "torchvision": "install torch and torchvision (`pip install -e '.[gpu]'`)",
    "pynvml": "install nvidia-ml-py (`pip install nvidia-ml-py`)",
}


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`GPUUnavailableError` with an install hint."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        hint = _HINTS.get(module.split(".")[0], "install it")
        raise GPUUnavailableError(
            f"{module} is not importable ({exc}); the GPU harness needs it: {hint}") from exc


def cupy_device_count() -> int:
    """Number of CUDA devices CuPy sees (0 when cupy is missing or the driver is unusable).

    Returns
    -------
    int
        The device count.
    """
    try:
        cp = importlib.import_module("cupy")
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def torch_cuda_available() -> bool:
    """Whether torch is importable and sees a CUDA device.

    Returns
    -------
    bool
        True when ``torch.cuda.is_available()``.
    """
    try:
        torch = importlib.import_module("torch")
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def gpu_missing(*packages: str) -> str | None:
    """What keeps the GPU harness's ``packages`` (``"cupy"``, ``"torch"``) from running here, in
    one line with what to install, or None when each imports and sees a CUDA device. A
    command calls it (through :func:`require_gpu`) before it creates a folder or starts a
    process, so a machine without a GPU is told at once instead of after a failed start-up.

    Parameters
    ----------
    *packages : str
        The GPU packages the command needs.

    Returns
    -------
    str or None
        Why not, or None.
    """
    for name in packages:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"{name} is not installed ({exc}): {_HINTS.get(name, 'install it')}"
        if name == "cupy" and cupy_device_count() < 1:
            return "no CUDA device: cupy is installed but sees none (driver or device missing)"
        if name == "torch" and not torch_cuda_available():
            return "no CUDA device: torch is installed but torch.cuda.is_available() is False"
    return None


def require_gpu(*packages: str, what: str = "this command") -> None:
    """Raise :class:`GPUUnavailableError` saying :func:`gpu_missing`'s reason, if any.

    Parameters
    ----------
    *packages : str
        The GPU packages needed (``"cupy"``, ``"torch"``).
    what : str
        What needs them, for the message.
    """
    why = gpu_missing(*packages)
    if why is not None:
        raise GPUUnavailableError(f"{what} needs a CUDA GPU, and {why}")


class EntryPoint(Protocol):
    """A command's ``main(argv=None) -> exit status``."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def gpu_entry_point(prog: str) -> Callable[[EntryPoint], EntryPoint]:
    """Decorate the ``main(argv)`` of a GPU harness command: a missing GPU package or device
    (:class:`~gpucontrol.errors.PlantUnavailable`, :class:`GPUUnavailableError`) ends it
    with one line ``PROG: MESSAGE`` on stderr and exit status 3, as ``gpucontrol ... --plant
    gpu`` does, instead of a traceback.

    Parameters
    ----------
    prog : str
        The command's name, e.g. ``"python -m harness.hil.smid"``.

    Returns
    -------
    Callable
        The decorator.
    """
    def wrap(main: EntryPoint) -> EntryPoint:
        @functools.wraps(main)
        def run(argv: list[str] | None = None) -> int:
            try:
                return main(argv)
            except PlantUnavailable as exc:
                sys.stderr.write(f"{prog}: {exc}\n")
                return 3
        return run
    return wrap
