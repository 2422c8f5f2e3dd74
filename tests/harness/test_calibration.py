"""Calibrating the simulated plant: the general fit, facts from experiment records, the
``gpucontrol calibrate`` command, and calibration files as presets."""

import json

import pytest

from harness.cli import main
from harness.experiments.common import make_plant
from harness.simulated import (
    CALIBRATION_KIND,
    PRESETS,
    SimulatedColocation,
    base_preset_name,
    preset_overrides,
)


def write_calibration(path, base="fig4", **overrides):
    path.write_text(json.dumps({"kind": CALIBRATION_KIND, "base_preset": base,
                                "overrides": overrides}))
    return path


# ---- calibration files as presets ---------------------------------------------------------------
def test_named_presets_are_unchanged():
    for name in PRESETS:
        assert preset_overrides(name) == PRESETS[name]
        assert base_preset_name(name) == name
    a = make_plant("sim", "fig8").describe()
    b = SimulatedColocation.preset().describe()
    assert a == b


def test_a_calibration_file_is_a_preset(tmp_path):
    f = write_calibration(tmp_path / "calibration.json", "fig4", inference_weight=2.5,
                          train_work_s=0.1)
    p = make_plant("sim", str(f), seed=3, noise_sigma=0.0)
    assert p.params.batch == 5 and p.params.inference_weight == 2.5
    assert p.params.train_work_s == 0.1 and p.params.noise_sigma == 0.0
    assert SimulatedColocation.preset(f, noise_sigma=0.0).params == p.params  # a Path too
    assert base_preset_name(str(f)) == "fig4"


@pytest.mark.parametrize("content, match", [
    ("not json", "not a readable JSON file"),
    (json.dumps({"base_preset": "fig4", "overrides": {}}), "field 'kind'"),
    (json.dumps({"kind": CALIBRATION_KIND, "base_preset": "fig9", "overrides": {}}),
     r"field 'base_preset' must be one of \['fig4', 'fig8'\]"),
    (json.dumps({"kind": CALIBRATION_KIND, "base_preset": "fig4", "overrides": [1]}),
     "field 'overrides' must be an object"),
    (json.dumps({"kind": CALIBRATION_KIND, "base_preset": "fig4",
                 "overrides": {"warp_speed": 1}}), "unknown plant parameter"),
])
def test_bad_calibration_files_are_named(tmp_path, content, match):
    f = tmp_path / "c.json"
    f.write_text(content)
    with pytest.raises(ValueError, match=match):
        make_plant("sim", str(f))


def test_bad_fitted_values_are_caught_by_the_parameters(tmp_path):
    f = write_calibration(tmp_path / "c.json", inference_weight=-1.0)
    with pytest.raises(ValueError, match=r"inference_weight must be a number in \(0.0"):
        make_plant("sim", str(f))


def test_unknown_preset_names_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"one of \['fig4', 'fig8'\] or the path of a "
                                         r"calibration.json.*'fig5'"):
        make_plant("sim", "fig5")
    with pytest.raises(ValueError, match="no such file"):
        make_plant("sim", str(tmp_path / "missing.json"))


def test_experiments_run_on_a_calibrated_preset(tmp_path, capsys):
    f = write_calibration(tmp_path / "c.json", "fig8", inference_weight=2.0)
    assert main(["burst", "--preset", str(f), "--duration", "24", "--burst", "8,16",
                 "--controllers", "two-tier", "--out", str(tmp_path), "--no-progress"]) == 0
    meta = json.loads((tmp_path / "burst" / "burst_meta.json").read_text())
    assert meta["preset"] == str(f) and meta["plant_params"]["inference_weight"] == 2.0
    assert meta["mps_enabled"] is True
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["burst", "--preset", str(tmp_path / "nope.json")])
    assert "no such file" in capsys.readouterr().err
