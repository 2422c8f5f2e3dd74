"""Sizing the hardware workload to the GPU (harness.hil.sizing): the plant measures its
inference alone and runs the batch that takes as long as the paper's RTX 3090 took; the H100's
knobs run (batch 5, 4 ms) did not load the GPU."""

import math

import pytest
from test_gpu_plant import cpu_config

from harness.hil.gpu_plant import GPUPlant
from harness.hil.sizing import batch_for, paper_alone_ms


def test_batch_for_solves_the_line_and_stays_in_range():
    assert batch_for(40.0, [(105, 20.0)]) == 210
    assert batch_for(40.0, [(105, 20.0), (210, 38.0)]) == 222  # 2 ms fixed, 18/105 per image
    assert batch_for(1e6, [(1, 1.0)]) == 4096 and batch_for(1e-3, [(5, 4.0)]) == 1
    with pytest.raises(ValueError, match="target_ms"):
        batch_for(math.nan, [(1, 1.0)])
    with pytest.raises(ValueError, match="points"):
        batch_for(10.0, [])


def test_paper_presets_size_the_batch_and_the_h100_preset_does_not():
    fig8 = GPUPlant.preset("fig8")
    assert fig8.cfg.size_inference_to_ms == pytest.approx(paper_alone_ms("fig8"))
    assert 70 < fig8.cfg.size_inference_to_ms < 75  # the 3090's ResNet-50 batch 105
    assert GPUPlant.preset("fig4").cfg.size_inference_to_ms == pytest.approx(
        paper_alone_ms("fig4", 5, 80.0))
    assert GPUPlant.preset("h100").cfg.size_inference_to_ms is None
    assert GPUPlant.preset("fig8", size_inference_to_ms=None).cfg.size_inference_to_ms is None
    with pytest.raises(ValueError, match="size_inference_to_ms"):
        GPUPlant.preset("fig8", size_inference_to_ms=-1.0)


@pytest.mark.slow
def test_plant_sizes_its_inference_alone_and_scales_later_batches(tmp_path):
    # the fake inference takes 20 ms * batch / 105 alone: 40 ms is batch 210
    with GPUPlant(cpu_config(tmp_path, size_inference_to_ms=40.0)) as plant:
        assert abs(plant.batch - 210) <= 8, plant.sizing
        s = plant.setup()
        assert s["sizing"]["preset_batch"] == 105 and s["batch"] == plant.batch
        assert s["training_calibration"]["matmuls"] >= 1
        scale = plant.batch_scale
        assert scale == pytest.approx(plant.batch / 105)
        plant.set_load(batch=115)  # the burst's batch, scaled like the preset's
        assert plant.batch == round(115 * scale)
        assert (tmp_path / "plant" / "batch").read_text().strip() == str(plant.batch)
