"""MPS control-daemon lifecycle for hardware experiments, in a private directory.

The client is :class:`gpucontrol.node.actuators.mps.MPSControl` (one client for the whole project):
it starts ``nvidia-cuda-mps-control -d`` with ``CUDA_MPS_PIPE_DIRECTORY`` and
``CUDA_MPS_LOG_DIRECTORY`` under a fresh private temporary directory, never the system's.
:func:`mps_session` wraps it for an experiment: ``quit`` is always sent in a ``finally`` block
(also when start-up fails half-way), and when the binary is missing or the daemon will not
start it prints a clear message and yields None, so the caller falls back to sleep-only
control.

Nothing here changes the compute mode, clocks, power limits or MIG, and nothing resets the GPU.

Examples
--------
>>> with mps_session(binary="/nonexistent/nvidia-cuda-mps-control", stream=None) as mps:
...     print(mps)
None
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from gpucontrol.node.actuators.mps import DEFAULT_BINARY, MPSControl, MPSError, MPSUnavailable

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
PCT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"

__all__ = [
    "LOG_ENV",
    "PCT_ENV",
    "PIPE_ENV",
    "MPSControl",
    "MPSError",
    "MPSUnavailable",
    "client_env",
    "mps_session",
    "validate_pct",
]


def validate_pct(pct: float) -> float:
    """An MPS active-thread percentage in [1, 100] (the GPUColo paper, Sec. VI, limits it to
    1-100 %)."""
    v = float(pct)
    if not (1.0 <= v <= 100.0):
        raise ValueError(f"mps_pct must be in [1, 100], got {pct!r}")
    return v


def client_env(mps: MPSControl | None, mps_pct: float | None = None,
               base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a process that joins ``mps`` (None: no MPS) with an optional cap.

    Without a daemon the MPS variables are removed, so the process can never join some other
    (system) MPS daemon by accident.

    Parameters
    ----------
    mps : MPSControl or None
        The private daemon to join (None: no MPS).
    mps_pct : float or None
        The process's active-thread percentage cap, % (None: no cap).
    base : Mapping[str, str] or None
        The environment to start from (None: ``os.environ``).

    Returns
    -------
    dict[str, str]
        The environment.

    >>> env = client_env(None, 30, base={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "5", "X": "1"})
    >>> env
    {'X': '1'}
    """
    env = dict(os.environ if base is None else base)
    for k in (PIPE_ENV, LOG_ENV, PCT_ENV):
        env.pop(k, None)
    if mps is None:
        return env
    env.update(mps.env())
    if mps_pct is not None:
        env[PCT_ENV] = f"{validate_pct(mps_pct):g}"
    return env


def _quit(mps: MPSControl, stream: TextIO | None) -> None:
    pipe = mps.pipe_dir
    try:
        mps.quit()
    except (MPSError, OSError) as exc:
        if stream is not None:
            print(f"warning: 'quit' to the private MPS daemon failed ({exc}); stop it with: "
                  f"echo quit | {PIPE_ENV}={pipe} {mps.binary}", file=stream)


@contextlib.contextmanager
def mps_session(enabled: bool = True, *, binary: str = DEFAULT_BINARY,
                stream: TextIO | None = sys.stderr,
                **kw: Any) -> Iterator[MPSControl | None]:
    """A private MPS control daemon for the duration of the block, or None (sleep-only).

    Yields None, after printing why to ``stream``, when ``enabled`` is false, the binary is
    missing, or the daemon does not come up. ``quit`` is sent on exit whatever happened.

    Parameters
    ----------
    enabled : bool
        False: yield None at once.
    binary : str
        The ``nvidia-cuda-mps-control`` binary.
    stream : TextIO or None
        Where the reasons for a fallback are written (None: nowhere).
    **kw : Any
        More arguments of :class:`MPSControl` (e.g. ``timeout_s``).

    Returns
    -------
    Iterator[MPSControl or None]
        A context manager yielding the running daemon, or None.
    """
    if not enabled:
        yield None
        return
    mps = MPSControl(binary, **kw)
    if not mps.available():
        if stream is not None:
            print(f"MPS unavailable: {binary} was not found on this machine.\n"
                  "-> continuing with sleep-only control (the MPS knob is disabled).",
                  file=stream)
        yield None
        return
    try:
        try:
            mps.start()
        except (MPSError, OSError) as exc:
            if stream is not None:
                print(f"MPS unavailable: the private control daemon did not start ({exc}).\n"
                      "-> continuing with sleep-only control (the MPS knob is disabled).",
                      file=stream)
            yield None
            return
        yield mps
    finally:
        _quit(mps, stream)
