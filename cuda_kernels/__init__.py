"""CUDA C sources the GPU harness compiles at run time (with ``cupy.RawModule``).

The ``.cu`` files ship inside the wheel as package data, so they are found from a normal
install as well as from the source tree.

>>> source_path("smid.cu").name
'smid.cu'
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["KERNELS_DIR", "source_path"]

#: The folder holding the ``.cu`` sources (this package's own folder).
KERNELS_DIR = Path(__file__).resolve().parent


def source_path(name: str) -> Path:
    """The path of the kernel source ``name`` (e.g. ``"smid.cu"``).

    Parameters
    ----------
    name : str
        File name of a source in this folder.

    Returns
    -------
    pathlib.Path
        Its path; raises ``FileNotFoundError`` if there is no such source.
    """
    p = KERNELS_DIR / name
    if not p.is_file():
        raise FileNotFoundError(f"no CUDA source {name!r} in {KERNELS_DIR}")
    return p
