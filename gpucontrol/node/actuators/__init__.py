"""Actuators: the two knobs (sleep and MPS share) applied to real processes.

The knobs are those of the GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-B.

* sleep: :class:`SignalDutyCycler` (SIGSTOP/SIGCONT via pidfds), :class:`CgroupFreezer`
  (cgroup v2 ``cgroup.freeze``), :func:`choose_sleep_actuator`; the cooperative hook is in
  :mod:`gpucontrol.node.hooks`.
* MPS: :class:`MPSControl` (the nvidia-cuda-mps-control client) and :class:`MPSActuator`
  (restart with a new active-thread percentage, optional shadow pre-start).

No GPU package is imported here.
"""

from gpucontrol.node.actuators.mps import (
                    MPSActuator,
                    MPSControl,
                    MPSError,
                    MPSUnavailable,
                    RestartResult,
)
from gpucontrol.node.actuators.procs import ProcessHandle, TargetRefused, check_target
from gpucontrol.node.actuators.sleep import (
                    CgroupFreezer,
                    DutyCycler,
                    DutyStats,
                    SignalDutyCycler,
                    choose_sleep_actuator,
                    freezable_cgroup_for,
)

__all__ = [
                    "CgroupFreezer",
                    "DutyCycler",
                    "DutyStats",
                    "MPSActuator",
                    "MPSControl",
                    "MPSError",
                    "MPSUnavailable",
                    "ProcessHandle",
                    "RestartResult",
                    "SignalDutyCycler",
                    "TargetRefused",
                    "check_target",
                    "choose_sleep_actuator",
                    "freezable_cgroup_for",
]
