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

The node imports the control core (:mod:`gpucontrol`) and never the harness or sysid. Importing
this package loads nothing beyond the standard library.
"""
