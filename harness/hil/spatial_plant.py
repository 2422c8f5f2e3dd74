"""GPUPlant with the restart-free spatial knob: the training on green-context partitions.

:class:`GreenGPUPlant` is :class:`~harness.hil.gpu_plant.GPUPlant` whose training runs the
emulator's ``cupy-green`` backend (:mod:`harness.hil.green_emulator`): the actuation's
``mps_pct`` is no longer an MPS restart but the commanded SM share, written into the hook file
next to the sleep (:meth:`gpucontrol.node.hooks.HookWriter.set_share`); the training switches
to that partition at its next iteration boundary. MPS stays available for the inference's own
percentage (``inference_mps_pct``), but is off by default (``mps_enabled=False``): how green
contexts combine with MPS is one of the things to measure, not assume.

The period's ``mps_pct`` reports the share in force; ``restarting`` is never set by the
training (there is no restart). ``switch_report()`` lists the switches from the training's
``--spatial-log`` with the delay from the command (the plant's publish time) to the first
iteration on the new partition.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from harness.hil._tail import CSVTail
from harness.hil.gpu_plant import GPUPlant, GPUPlantConfig
from harness.sim.protocol import PeriodResult

__all__ = ["DEFAULT_GREEN_SHARES", "TRAINING_BACKENDS", "GreenGPUPlant",
           "make_green_gpu_plant"]

DEFAULT_GREEN_SHARES = (25.0, 50.0, 75.0, 100.0)
TRAINING_BACKENDS = ("cupy-green", "numpy-green", "torch", "torch-dry-run")
#: The PyTorch training's CPU dry run: a tiny model, small images, the dry-run pool.
TORCH_DRY_RUN = ("--device", "cpu", "--model", "tiny", "--image-size", "32", "--batch-size",
                 "4", "--green-pool", "simulated")


class GreenGPUPlant(GPUPlant):
    """The GPU plant with green-context partitions as the training's share knob.

    Parameters
    ----------
    config : GPUPlantConfig, optional
        As :class:`GPUPlant` (``training_args`` get the green-context flags appended;
        ``mps_enabled`` defaults to False here).
    shares_pct : tuple of float
        The partitions the training creates up front, %.
    training_backend : str
        The training on partitions: ``"cupy-green"`` (the matmul emulator on the GPU),
        ``"numpy-green"`` (its CPU dry run), ``"torch"`` (the PyTorch ResNet-18,
        :mod:`harness.hil.torch_training`, on ``torch.cuda.green_contexts``) or
        ``"torch-dry-run"`` (a tiny PyTorch model on the CPU with the dry-run pool).
    **overrides : Any
        More :class:`GPUPlantConfig` fields.
    """

    def __init__(self, config: GPUPlantConfig | None = None, *,
                 shares_pct: tuple[float, ...] = DEFAULT_GREEN_SHARES,
                 training_backend: str = "cupy-green", **overrides: Any) -> None:
        cfg = config if config is not None else GPUPlantConfig(mps_enabled=False)
        for s in shares_pct:
            if not 0 < float(s) <= 100:
                raise ValueError(f"shares_pct must be in (0, 100], got {s!r}")
        self.shares_pct = tuple(float(s) for s in shares_pct)
        if training_backend not in TRAINING_BACKENDS:
            raise ValueError(f"training_backend must be one of {', '.join(TRAINING_BACKENDS)}, "
                             f"got {training_backend!r}")
        extra: tuple[str, ...] = (
            "--green-shares", ",".join(f"{s:g}" for s in self.shares_pct), "--spatial-log",
            "{workdir}/spatial-{pid}.csv")
        if training_backend.startswith("torch"):
            overrides = {"training": "torch", **overrides}
            if training_backend == "torch-dry-run":
                extra += TORCH_DRY_RUN
        else:
            extra = ("--backend", training_backend, *extra)
        cfg = dataclasses.replace(cfg, training_args=(*cfg.training_args, *extra), **overrides)
        super().__init__(cfg)
        self.share_pct: float = 100.0
        self.commands: list[tuple[float, float]] = []  # (unix time, share %)

    def _training_argv(self) -> list[str]:
        return [a.replace("{workdir}", str(self.workdir)) for a in super()._training_argv()]

    def _start(self) -> None:
        super()._start()
        self._switch_tail = CSVTail(self._path("spatial-*.csv"))
        self.switches: list[dict[str, Any]] = []

    def _apply(self, act: Any) -> None:
        import time

        self._apply_sleep(act)
        m = getattr(act, "mps_pct", None)
        if m is not None and math.isfinite(float(m)):
            pct = int(min(max(round(float(m)), 1), 100))
            if pct != self.share_pct:
                self._hook.set_share(None if pct >= 100 else pct)
                self.share_pct = float(pct)
                self.commands.append((time.time(), float(pct)))

    def _period(self, t_start: float, t_end: float) -> PeriodResult:
        res = super()._period(t_start, t_end)
        self.switches.extend(self._switch_tail.read())
        return dataclasses.replace(res, mps_pct=self.share_pct)

    def switch_report(self) -> list[dict[str, Any]]:
        """One row per command: when it was published, the first switch after it, and the
        delay (command to first iteration on the new partition, s; bounded by one
        iteration), plus the in-process switch cost ``switch_s``.

        Returns
        -------
        list[dict]
            Rows with ``t_cmd, share_pct, sm_count, delay_s, switch_s``.
        """
        self.switches.extend(self._switch_tail.read())
        out = []
        for t_cmd, pct in self.commands:
            after = [r for r in self.switches if (r.get("t_unix") or -1) >= t_cmd]
            first = min(after, key=lambda r: r["t_unix"]) if after else None
            out.append({"t_cmd": t_cmd, "share_pct": pct,
                        "sm_count": first.get("sm_count") if first else math.nan,
                        "delay_s": (first["t_unix"] - t_cmd) if first else math.nan,
                        "switch_s": first.get("switch_s") if first else math.nan})
        return out


def make_green_gpu_plant(preset: str = "h100", *, seed: int | None = None,
                         **overrides: Any) -> GreenGPUPlant:
    """The ``gpu-green`` entry of the plant registry: the GPU plant whose share knob is a
    green-context partition inside MPS (both processes MPS clients, the training on
    25/50/75/100 % partitions), set up by the named GPU preset with its batch as named (the
    H100 runs' workload: not resized to the paper's GPU unless ``size_inference_to_ms``
    says). Raises :class:`~gpucontrol.errors.PlantUnavailable` when no CUDA GPU is usable.

    Parameters
    ----------
    preset : str
        A GPU preset (:data:`harness.hil.gpu_plant.PRESETS`) or a calibration file's base.
    seed : int, optional
        Ignored (the hardware brings its own noise).
    **overrides : Any
        :class:`~harness.hil.gpu_plant.GPUPlantConfig` fields, and ``shares_pct`` /
        ``training_backend``.

    Returns
    -------
    GreenGPUPlant
        The plant (not started).
    """
    import harness.hil as hil
    from gpucontrol.errors import PlantUnavailable
    from harness.hil.gpu_plant import GPUPlant
    from harness.sim.simulated import base_preset_name

    name = base_preset_name(preset)
    if not (hil.torch_cuda_available() or hil.cupy_device_count() > 0):
        raise PlantUnavailable(
            "--plant gpu-green needs the GPU harness on a machine with a CUDA GPU, and none "
            "is usable here. Use --plant sim for the simulated plant.")
    shares = tuple(overrides.pop("shares_pct", DEFAULT_GREEN_SHARES))
    backend = overrides.pop("training_backend", "cupy-green")
    # the H100 study's plant: the batch as named (105, the measured table's), not resized
    cfg = GPUPlant.preset(name, **{"mps_enabled": True, "size_inference_to_ms": None,
                                   **overrides}).cfg
    return GreenGPUPlant(cfg, shares_pct=shares, training_backend=backend)
