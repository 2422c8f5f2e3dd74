"""The daemon's configuration file: one TOML file per GPU (``--config``), flags as overrides.

Every key is a :class:`~gpucontrol.node.config.DaemonConfig` field: the command-line flag
without its dashes, ``-`` written ``_`` (``--slo-ms`` is ``slo_ms``), and the repeatable
flags as lists (``training_pids = [4242]``, ``allowed_uids = [1000]``, ``green_shares = [25,
50, 75]``). The file is flat (no tables); a relative path in it is relative to the file's
directory. A flag given on the command line wins over the file; one that names the training
(``--training-pid``, ``--training-pid-file``, ``--training-cmd``) replaces the file's.
``deploy/systemd/gpu0.toml.example`` and the ConfigMap of ``deploy/kubernetes/daemonset.yaml``
are the documented examples.

TOML is read with the standard library's :mod:`tomllib` (Python 3.11+) or, on 3.10, the
``tomli`` package it came from (a dependency there only).

Examples
--------
>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> path = os.path.join(d, "gpu0.toml")
>>> with open(path, "w") as f:
...     _ = f.write('slo_ms = 90.0\\nmodel = "model.json"\\ntraining_pids = [4242]\\n')
>>> kw = read_config_file(path, fields={"slo_ms", "model", "training_pids"},
...                       path_fields={"model"})
>>> kw["slo_ms"], kw["model"] == os.path.join(d, "model.json"), kw["training_pids"]
(90.0, True, [4242])
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from gpucontrol.errors import ConfigurationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["TRAINING_KEYS", "merge", "read_config_file"]

#: The keys that name the training: given on the command line, one replaces the file's.
TRAINING_KEYS = ("training_pids", "training_cmd", "training_pid_file")
#: The longest configuration file read, bytes.
MAX_FILE = 1 << 20


def read_config_file(path: str | os.PathLike[str], *, fields: Iterable[str],
                     path_fields: Iterable[str] = ()) -> dict[str, Any]:
    """Read a configuration file into :class:`DaemonConfig` keyword arguments.

    Parameters
    ----------
    path : str or os.PathLike
        The TOML file.
    fields : iterable of str
        The keys allowed (:class:`DaemonConfig`'s fields).
    path_fields : iterable of str
        The keys holding a path, made absolute against the file's directory.

    Returns
    -------
    dict
        Key -> value, as the file gives them (the values are checked by DaemonConfig).

    Raises
    ------
    ConfigurationError
        The file cannot be read, is not TOML, holds a table, or a key that is no setting
        (the message names ``--config``, the file and the key, with the nearest setting).
    """
    allowed, paths = set(fields), set(path_fields)
    shown = os.fspath(path)
    try:
        with open(shown, "rb") as f:
            raw = f.read(MAX_FILE + 1)
    except OSError as exc:
        raise ConfigurationError(f"--config {shown}: cannot read it ({exc.strerror})") from None
    if len(raw) > MAX_FILE:
        raise ConfigurationError(f"--config {shown}: longer than {MAX_FILE} bytes")
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"--config {shown}: not a TOML file ({exc})") from None
    base = os.path.dirname(os.path.abspath(shown))
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            raise ConfigurationError(f"--config {shown}: [{key}] is a table; the file is flat "
                                     "(one key per setting)")
        if key not in allowed:
            near = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigurationError(f"--config {shown}: {key!r} is not a setting{hint}; the "
                                     "keys are the flags without '--', '-' written '_'")
        if key in paths and isinstance(value, str) and value and not os.path.isabs(value):
            value = os.path.join(base, value)
        out[key] = value
    return out


def merge(file_kw: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    """The file's settings overridden by the flags given (a training named by a flag
    replaces the file's, whichever key names it).

    Parameters
    ----------
    file_kw : mapping
        What :func:`read_config_file` read.
    flags : mapping
        The settings given on the command line.

    Returns
    -------
    dict
        The merged keyword arguments.

    Examples
    --------
    >>> merge({"training_pid_file": "/run/t.pid", "slo_ms": 90.0}, {"training_pids": (7,)})
    {'slo_ms': 90.0, 'training_pids': (7,)}
    """
    out = dict(file_kw)
    if any(k in flags for k in TRAINING_KEYS):
        for k in TRAINING_KEYS:
            out.pop(k, None)
    out.update(flags)
    return out
