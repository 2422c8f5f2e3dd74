"""gpucontrol.node: the per-GPU node agent — everything that runs beside the training on a node.

- :mod:`gpucontrol.node.daemon`: monitor → :class:`~gpucontrol.TwoTierController` → actuators,
  with a write-ahead state file and a guardian (``python -m gpucontrol.daemon``).
- :mod:`gpucontrol.node.monitor`: per-period latency statistics from a Unix datagram socket.
- :mod:`gpucontrol.node.client`: :func:`report_latency`, the non-blocking client an inference
  service calls.
- :mod:`gpucontrol.node.hooks`: the cooperative sleep for an instrumented training loop (also
  importable as :mod:`gpucontrol.hooks`).
- :mod:`gpucontrol.node.guardian`: the stdlib-only process that resumes the training if the
  daemon dies.
- :mod:`gpucontrol.node.actuators`: the sleep knob (signals, cgroup freezer) and the MPS
  active-thread percentage.

- :mod:`gpucontrol.node.config`: :class:`DaemonConfig`, the daemon's typed settings;
  :mod:`gpucontrol.node.cli`: its command line; :mod:`gpucontrol.node.metrics`: its
  Prometheus metrics and health endpoints.
- :mod:`gpucontrol.node.health` (the loop's heartbeat), :mod:`gpucontrol.node.notify`
  (systemd's ``sd_notify``), :mod:`gpucontrol.node.logsink` (the non-blocking log).

The node imports the control core (:mod:`gpucontrol`) and never the harness or sysid. The names
below are loaded on first use, so importing this package adds nothing to the control core.

Examples
--------
>>> from gpucontrol.node import DaemonConfig
>>> DaemonConfig(training_cmd="python train.py", fixed_sleep=0.2).closed_loop
False
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpucontrol.node.client import report_latency
    from gpucontrol.node.config import DaemonConfig
    from gpucontrol.node.daemon import Daemon, load_model
    from gpucontrol.node.hooks import after_iteration, iteration

__all__ = ["Daemon", "DaemonConfig", "after_iteration", "iteration", "load_model",
           "report_latency"]

_WHERE = {"Daemon": "daemon", "DaemonConfig": "config", "load_model": "daemon",
          "report_latency": "client", "after_iteration": "hooks", "iteration": "hooks"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"gpucontrol.node.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'gpucontrol.node' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
