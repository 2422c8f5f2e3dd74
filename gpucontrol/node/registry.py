"""The registries of the daemon's knobs: each setting's value -> the class that does it.

A knob is an object with ``start``, ``apply`` and ``close``
(:class:`gpucontrol.node.knobs.Knob`): the sleep methods (``--sleep-method``), the spatial
share backends (``--share-backend``) and the latency sources (``--latency-source``). Adding
one is one new class and one line here. The classes are named ``"module:Class"`` and imported
on first use, so the configuration (which takes its allowed values from these tables) imports
no knob.

Examples
--------
>>> sorted(SHARE_BACKENDS)
['cpu', 'green-context', 'mps', 'none']
>>> knob_class(SLEEP_METHODS, "hook").__name__
'HookSleep'
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["LATENCY_SOURCES", "SHARE_BACKENDS", "SLEEP_METHODS", "knob_class"]

#: ``--sleep-method``: how the training is paused.
SLEEP_METHODS: Mapping[str, str] = {
    "auto": "gpucontrol.node.sleeping:AutoSleep",
    "signal": "gpucontrol.node.sleeping:SignalSleep",
    "cgroup": "gpucontrol.node.sleeping:CgroupSleep",
    "hook": "gpucontrol.node.sleeping:HookSleep",
}

#: ``--share-backend``: what moves the training's spatial share.
SHARE_BACKENDS: Mapping[str, str] = {
    "mps": "gpucontrol.node.share:MPSRestartShare",
    "cpu": "gpucontrol.node.share:CPUQuotaShare",
    "green-context": "gpucontrol.node.share:GreenContextShare",
    "none": "gpucontrol.node.share:NoShare",
}

#: ``--latency-source``: where the inference's latency comes from.
LATENCY_SOURCES: Mapping[str, str] = {
    "socket": "gpucontrol.node.sources:SocketSource",
    "prometheus": "gpucontrol.node.sources:ScrapeSource",
}


def knob_class(table: Mapping[str, str], name: str) -> Any:
    """The class a registry names for ``name``.

    Parameters
    ----------
    table : mapping
        One of the registries above.
    name : str
        The setting's value.

    Returns
    -------
    type
        The knob class.
    """
    module, _, attr = table[name].partition(":")
    return getattr(importlib.import_module(module), attr)
