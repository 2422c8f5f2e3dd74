"""The plant registry: experiments name a plant (``sim``, ``gpu``, ...) and get it from here.

A registry entry is a factory path ``"module:function"`` imported only when that plant is
asked for, so the experiments never import the GPU harness (or any other plant's module) on
their own; a plant package registers itself by path, and code outside the project can add
its own plant with :func:`register_plant`. A factory is called as
``factory(preset, seed=seed, **overrides)`` and raises
:class:`~gpucontrol.errors.PlantUnavailable` when it cannot run on this machine.

>>> sorted(PLANTS)
['cpu', 'gpu', 'gpu-green', 'sim']
>>> make_plant("sim", "fig8").params.batch
105
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from gpucontrol.errors import PlantUnavailable

__all__ = ["PLANTS", "ExperimentFailed", "make_plant", "plant_factory", "register_plant"]


class ExperimentFailed(RuntimeError):
    """The plant ran, but the experiment could not reach its result for a reason outside the
    code (a live plant too disturbed to identify, say). Its message is one line: what
    happened and what to try. The ``gpucontrol`` command prints it with where the partial
    output is (the previous results stay as they were) and exits with status 1; a
    :class:`~gpucontrol.errors.PlantUnavailable` (the plant cannot run here at all) exits 3."""

#: Plant name -> ``"module:function"`` of its factory.
PLANTS: dict[str, str] = {
    "sim": "harness.sim.simulated:make_simulated_plant",
    "gpu": "harness.hil.gpu_plant:make_gpu_plant",
    # the GPU with green-context partitions inside MPS as the share knob (no restarts)
    "gpu-green": "harness.hil.spatial_plant:make_green_gpu_plant",
    "cpu": "harness.hil.cpu.plant:make_cpu_plant",
}

_HINTS = {"gpu": "--plant gpu needs the GPU harness (harness.hil), which is not importable here",
          "gpu-green": "--plant gpu-green needs the GPU harness (harness.hil), which is not "
                       "importable here"}


def register_plant(name: str, factory: str) -> None:
    """Add or replace the plant ``name`` with the factory at ``"module:function"``."""
    if not name or not isinstance(name, str):
        raise ValueError(f"plant name must be a non-empty string, got {name!r}")
    module, sep, attr = factory.partition(":")
    if not (module and sep and attr):
        raise ValueError(f"factory must be 'module:function', got {factory!r}")
    PLANTS[name] = factory


def plant_factory(kind: str) -> Callable[..., Any]:
    """The factory registered for ``kind`` (imported now)."""
    if kind not in PLANTS:
        raise ValueError(f"plant must be one of {', '.join(map(repr, sorted(PLANTS)))}, "
                         f"got {kind!r}")
    module, _, attr = PLANTS[kind].partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise _unavailable(kind, module, exc) from None


def _unavailable(kind: str, module: str, exc: ImportError) -> PlantUnavailable:
    hint = _HINTS.get(kind, f"plant {kind!r} needs {module}, which is not importable here")
    return PlantUnavailable(f"{hint} ({exc}). Use --plant sim for the simulated plant.")


def make_plant(kind: str = "sim", preset: str = "fig8", *, seed: int = 0,
               **overrides: Any) -> Any:
    """Build the plant ``kind`` with ``preset`` (a name, or the path of a calibration.json
    written by ``gpucontrol calibrate``). ``"sim"`` is
    :class:`~harness.sim.simulated.SimulatedColocation`; ``"gpu"`` is the GPU harness's
    ``GPUPlant`` with the same named preset, which needs a CUDA GPU and the ``gpu`` extra —
    without them this raises :class:`~gpucontrol.errors.PlantUnavailable` saying so. Close a
    plant with processes when done (:func:`harness.experiments.common.close_plant`).

    Parameters
    ----------
    kind : str
        A plant kind of the registry (``"sim"``, ``"gpu"``, ``"cpu"``: real inference and
        training processes on this machine's CPUs, :mod:`harness.hil.cpu`).
    preset : str
        A preset name or a calibration file.
    seed : int
        Seed of the plant's random generator.
    **overrides : Any
        Plant parameter overrides.

    Returns
    -------
    Any
        The plant (:class:`~harness.sim.protocol.Plant`).
    """
    factory = plant_factory(kind)
    try:
        return factory(preset, seed=seed, **overrides)
    except ImportError as exc:  # a package the plant imports on start-up is missing
        raise _unavailable(kind, PLANTS[kind].partition(":")[0], exc) from None
