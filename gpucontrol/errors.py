"""Every exception the project raises on purpose, in one place.

Each is a subclass of a built-in exception, so callers that catch ``ValueError`` or
``RuntimeError`` keep working:

- :class:`ConfigurationError` (``ValueError``): a parameter outside its allowed range; the
  message names the field and the range.
- :class:`TargetRefused` (``ValueError``): a process the node agent must not signal.
- :class:`ControlLoopError` (``RuntimeError``): the daemon's control loop failed after set-up
  (a bug, not a setting); the original exception is its ``__cause__``.
- :class:`MPSError` (``RuntimeError``) and :class:`MPSUnavailable`: the MPS control daemon
  failed, or is not installed.
- :class:`PlantUnavailable` (``RuntimeError``): a plant cannot be built on this machine (for
  example ``--plant gpu`` without a GPU); :class:`GPUUnavailableError` is the GPU harness's case.

>>> from gpucontrol.errors import ConfigurationError
>>> issubclass(ConfigurationError, ValueError)
True
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "ControlLoopError",
    "GPUUnavailableError",
    "MPSError",
    "MPSUnavailable",
    "PlantUnavailable",
    "TargetRefused",
]


class ConfigurationError(ValueError):
    """A parameter is outside its allowed range; the message names the field and the range."""


class TargetRefused(ValueError):
    """The process may not be paused or signalled (PID 1, a kernel thread, ourselves, another
    user's process, or one that is gone)."""


class ControlLoopError(RuntimeError):
    """The daemon's control loop raised after set-up; the daemon resumed everything and
    stopped. Never a configuration error: the original exception is the ``__cause__``."""


class MPSError(RuntimeError):
    """An ``nvidia-cuda-mps-control`` command failed."""


class MPSUnavailable(MPSError):
    """MPS is not usable here (binary missing, or the control daemon did not start)."""


class PlantUnavailable(RuntimeError):
    """The requested plant cannot be built here (e.g. ``--plant gpu`` without the GPU harness)."""


class GPUUnavailableError(PlantUnavailable):
    """A GPU package (cupy, torch) or a CUDA device that the GPU harness needs is missing."""
