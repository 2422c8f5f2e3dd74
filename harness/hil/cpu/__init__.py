"""The CPU plant: real inference and training processes sharing this machine's CPUs.

A closed loop without a GPU: the node agent's own actuators (SIGSTOP/SIGCONT, the cgroup CPU
share) and latency reader (a Prometheus histogram) on processes nobody here wrote the
equations of.

- :mod:`harness.hil.cpu.workload` -- the MLP (numpy; PyTorch on the CPU when importable).
- :mod:`harness.hil.cpu.inference` -- ``python -m harness.hil.cpu.inference``: batches at a
  fixed rate, a ``prometheus_client`` latency histogram, optional ``report_latency``.
- :mod:`harness.hil.cpu.training` -- ``python -m harness.hil.cpu.training``: forward,
  backward, SGD step, a DataLoader-style worker child.
- :mod:`harness.hil.cpu.plant` -- :class:`CPUPlant`, the registry's ``cpu`` plant.
"""

from harness.hil.cpu.plant import CPUPlant, CPUPlantConfig, make_cpu_plant

__all__ = ["CPUPlant", "CPUPlantConfig", "make_cpu_plant"]
