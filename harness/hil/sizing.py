"""Size the hardware workload to the GPU it runs on, as the GPUColo paper's was to its RTX 3090.

The paper's presets name an inference batch (5 for Fig. 4, 105 for Figs. 8/9) that loads an RTX
3090; on an H100 the same batch finishes 4x sooner (ResNet-50 batch 105 alone: 18.1 ms against
72 ms), and batch 5 (4 ms) leaves the GPU idle between launches, so neither knob shows its
effect. The rule here keeps what the control loop sees the same on any GPU:

* **inference alone** takes what it took on the 3090 (the simulated plant's paper preset gives
  that time, :func:`paper_alone_ms`): the plant measures the inference alone at two batches on
  the idle GPU and picks the batch the straight line through them puts at that time
  (:func:`batch_for`); every batch the experiment asks for (the burst's 115) is scaled by the
  same factor;
* **training alone** takes 0.2 s per iteration: the emulator already sizes its matmul count
  to ``target_iter_s`` on the idle GPU (and the PyTorch training its passes per iteration).

So the period (4 s) holds as many inference batches and training iterations as on the paper's
testbed. The choice is recorded (:meth:`harness.hil.gpu_plant.GPUPlant.setup`, the experiments'
``plant_setup`` meta). The simulated plant keeps the paper's presets.

>>> batch_for(72.0, [(105, 18.1), (420, 70.0)])
432
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["PAPER_GPU", "batch_for", "paper_alone_ms", "size_inference"]

PAPER_GPU = "RTX 3090 (the GPUColo paper's testbed, through the simulated plant's preset)"
BATCH_RANGE = (1, 4096)


def paper_alone_ms(preset: str, batch: int | None = None,
                   inference_mps_pct: float | None = None) -> float:
    """Inference latency alone (no training) on the paper's GPU, from the simulated preset.

    Parameters
    ----------
    preset : str
        ``"fig4"`` or ``"fig8"``.
    batch : int, optional
        Batch (default: the preset's).
    inference_mps_pct : float, optional
        The inference's MPS share (default: the preset's).

    Returns
    -------
    float
        Milliseconds per batch.

    >>> round(paper_alone_ms("fig8"), 1), round(paper_alone_ms("fig4"), 2)
    (72.2, 5.31)
    """
    from harness.sim.simulated import SimulatedColocation

    p = SimulatedColocation.preset(preset).params
    b = p.batch if batch is None else int(batch)
    ci = p.inference_mps_pct if inference_mps_pct is None else float(inference_mps_pct)
    return float(p.idle_latency_ms(b, ci))


def batch_for(target_ms: float, points: Sequence[tuple[float, float]]) -> int:
    """The batch whose latency the line through the measured ``(batch, ms)`` points puts at
    ``target_ms`` (one point: proportional), within [1, 4096].

    Parameters
    ----------
    target_ms : float
        The latency to reach, ms (> 0).
    points : sequence of (batch, ms)
        Measured latency per batch (the last two are used).

    Returns
    -------
    int
        The batch.
    """
    if not (math.isfinite(target_ms) and target_ms > 0):
        raise ValueError(f"target_ms must be a finite number > 0, got {target_ms!r}")
    pts = [(float(b), float(ms)) for b, ms in points if math.isfinite(float(ms)) and ms > 0]
    if not pts:
        raise ValueError("points must hold at least one measured (batch, ms) pair")
    if len(pts) == 1 or pts[-1][0] == pts[-2][0]:
        b = pts[-1][0] * target_ms / pts[-1][1]
    else:
        (b0, l0), (b1, l1) = pts[-2], pts[-1]
        slope = (l1 - l0) / (b1 - b0)
        b = b1 * target_ms / l1 if slope <= 0 else b1 + (target_ms - l1) / slope
    return int(min(max(round(b), BATCH_RANGE[0]), BATCH_RANGE[1]))


def _alone_ms(plant: Any, tail: Any, batch: int, n: int = 8) -> float:
    """Median wall latency of ``n`` batches of size ``batch`` (the inference alone)."""
    import statistics

    lats: list[float] = []
    deadline = time.monotonic() + plant.cfg.start_timeout_s
    while len(lats) < n + 1 and time.monotonic() < deadline:
        lats += [r["wall_ms"] for r in tail.read() if r.get("batch_size") == batch
                 and isinstance(r.get("wall_ms"), float)]
        time.sleep(0.02)
    if len(lats) < 2:
        raise RuntimeError(f"the inference logged no batch of {batch} within "
                           f"{plant.cfg.start_timeout_s:g} s while being sized")
    return float(statistics.median(lats[1:]))  # the first may have started at the old size


def size_inference(plant: Any, target_ms: float) -> dict[str, Any]:
    """Measure a started GPU plant's inference alone and set the batch that takes
    ``target_ms`` (the inference must be running and the training not yet started).

    Sets ``plant.batch``, ``plant.batch_scale`` (what :meth:`~harness.hil.gpu_plant.GPUPlant.
    set_load` multiplies later batches by) and ``plant.sizing`` (the record).

    Parameters
    ----------
    plant : GPUPlant
        The plant, inside its start-up.
    target_ms : float
        The latency alone to reach, ms.

    Returns
    -------
    dict
        The record.
    """
    from harness.hil._tail import CSVTail
    from harness.results import write_int

    tail = CSVTail(plant._path("inference-*.csv"))
    b0 = plant.cfg.batch
    points = [(b0, _alone_ms(plant, tail, b0))]
    b1 = batch_for(target_ms, points)
    if b1 != b0:
        write_int(plant._path("batch"), b1)
        points.append((b1, _alone_ms(plant, tail, b1)))
    b = batch_for(target_ms, points)
    write_int(plant._path("batch"), b)
    plant.batch, plant.batch_scale = b, b / b0
    plant.sizing = {"rule": "inference alone as on the reference GPU", "reference": PAPER_GPU,
                    "reference_alone_ms": target_ms, "preset_batch": b0, "batch": b,
                    "batch_scale": plant.batch_scale,
                    "measured_alone_ms": [[bb, round(ms, 3)] for bb, ms in points],
                    "training_target_iter_s": plant.cfg.target_iter_s}
    sys.stderr.write(f"[gpu plant] sized: inference batch {b0} -> {b} (alone "
                     f"{points[0][1]:.1f} ms at {b0}; reference {target_ms:.1f} ms)\n")
    return plant.sizing
