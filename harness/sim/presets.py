"""Named presets of the simulated plant and calibration files as presets.

* ``fig4`` and ``fig8``: the GPUColo paper's RTX 3090 (Figs. 4 and 8/9), constants fitted to its
  Fig. 4 (:func:`harness.sim.calibration.fit_fig4`).
* ``h100``: an NVIDIA H100 80GB HBM3, fitted by ``gpucontrol calibrate`` to the hardware runs
  in docs/results (``knobs``, ``spatial``, ``spatial_mps``); the calibration document ships with
  the package (``harness/data/h100_calibration.json``: fitted values, standard errors, the
  measured-vs-model table) and :data:`PRESETS` reads its overrides.

A calibration file (``kind`` :data:`CALIBRATION_KIND`) is a preset too: its base preset's
overrides, then its fitted ones. :func:`suggested_slo_ms` gives the SLO an experiment on a
preset runs at by default.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

from harness.sim.physics import ColocationParams

__all__ = ["CALIBRATION_KIND", "PRESETS", "SUGGESTED_SLO_MS", "base_preset_name",
           "preset_overrides", "shipped_calibration", "suggested_slo_ms"]

#: The ``kind`` field of a calibration file written by ``gpucontrol calibrate``.
CALIBRATION_KIND = "gpucontrol.plant-calibration"

#: The shipped calibration documents of the calibrated named presets (package data).
SHIPPED = {"h100": "h100_calibration.json"}

#: Named presets: overrides of :class:`ColocationParams`.
PRESETS: dict[str, dict[str, Any]] = {
    # GPUColo paper, Fig. 4: ResNet-50 inference (small batch) with the CUDA matmul training
    # emulator (iteration ~0.2 s), both at MPS 80 %.
    "fig4": {"batch": 5, "inference_mps_pct": 80.0, "train_work_s": 0.085, "noise_sigma": 0.03},
    # GPUColo paper, Figs. 8/9: ResNet-50 batch 105 (115 in the burst), inference MPS 100 %, Wide
    # ResNet-101 training (iteration 0.5-0.8 s when co-located at MPS 80-100 %).
    "fig8": {"batch": 105, "inference_mps_pct": 100.0, "train_work_s": 0.2, "noise_sigma": 0.02},
}

#: The SLO (ms, mean latency of batch 105) an experiment on a preset runs at by default.
#: fig8: the GPUColo paper's 90 ms. h100: 30 ms, inside the sleep-only range (18.1 ms alone,
#: 40.5 ms time-sliced unslept) where time slicing needs a real sleep (about 0.2 s per
#: iteration) and between the 75 % and 50 % partitions under MPS (33.9 / 24.7 ms), so every
#: backend has to work for it (docs/simulated_plant.md).
SUGGESTED_SLO_MS: dict[str, float] = {"fig8": 90.0, "h100": 30.0}


def shipped_calibration(name: str) -> dict[str, Any]:
    """The calibration document shipped for the named preset ``name`` (``"h100"``)."""
    if name not in SHIPPED:
        raise ValueError(f"preset {name!r} has no shipped calibration (those that do: "
                         f"{', '.join(sorted(SHIPPED))})")
    text = (resources.files("harness") / "data" / SHIPPED[name]).read_text("utf-8")
    return dict(json.loads(text))


def _load_shipped() -> None:
    for name in SHIPPED:
        doc = shipped_calibration(name)
        PRESETS[name] = {**PRESETS[doc["base_preset"]], **doc["overrides"]}


_load_shipped()


def _preset_error(preset: Any, why: str = "") -> ValueError:
    return ValueError(f"preset must be one of {sorted(PRESETS)} or the path of a "
                      f"calibration.json written by 'gpucontrol calibrate', got {preset!r}"
                      + (f" ({why})" if why else ""))


def _read_calibration(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"preset {str(path)!r}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != CALIBRATION_KIND:
        raise ValueError(f"preset {str(path)!r}: not a calibration written by 'gpucontrol "
                         f"calibrate' (its field 'kind' must be {CALIBRATION_KIND!r})")
    base = data.get("base_preset")
    if base not in PRESETS:
        raise ValueError(f"preset {str(path)!r}: field 'base_preset' must be one of "
                         f"{sorted(PRESETS)}, got {base!r}")
    over = data.get("overrides")
    if not isinstance(over, dict):
        raise ValueError(
            f"preset {str(path)!r}: field 'overrides' must be an object of "
            f"ColocationParams fields, got {over!r}")
    known = {f.name for f in fields(ColocationParams)}
    bad = sorted(set(over) - known)
    if bad:
        raise ValueError(f"preset {str(path)!r}: field 'overrides' names unknown plant "
                         f"parameter(s) {', '.join(bad)}")
    return data


def preset_overrides(preset: str | os.PathLike[str]) -> dict[str, Any]:
    """The :class:`ColocationParams` overrides of a named preset (``"fig4"``, ``"fig8"``,
    ``"h100"``) or of a calibration file written by ``gpucontrol calibrate`` (its base
    preset's overrides, then its fitted ones). Raises ValueError naming what is wrong."""
    if isinstance(preset, str) and preset in PRESETS:
        return dict(PRESETS[preset])
    if not isinstance(preset, (str, os.PathLike)) or not str(preset):
        raise _preset_error(preset)
    path = Path(preset)
    if not path.is_file():
        raise _preset_error(preset, "no such file" if path.suffix or os.sep in str(preset)
                            else "")
    data = _read_calibration(path)
    return {**PRESETS[data["base_preset"]], **data["overrides"]}


def base_preset_name(preset: str | os.PathLike[str]) -> str:
    """The named preset behind ``preset``: itself, or a calibration file's base preset."""
    if isinstance(preset, str) and preset in PRESETS:
        return preset
    preset_overrides(preset)  # validates
    return str(_read_calibration(Path(preset))["base_preset"])


def suggested_slo_ms(preset: str | os.PathLike[str]) -> float | None:
    """The SLO (ms) experiments on ``preset`` run at unless told: :data:`SUGGESTED_SLO_MS`
    of the preset (a calibration file: its ``suggested_slo_ms`` field, else its base
    preset's); None where none is suggested (``fig4``, whose batch of 5 is not the
    closed-loop experiments' workload)."""
    if isinstance(preset, str) and preset in PRESETS:
        return SUGGESTED_SLO_MS.get(preset)
    preset_overrides(preset)  # validates
    data = _read_calibration(Path(preset))
    v = data.get("suggested_slo_ms")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
        return float(v)
    return SUGGESTED_SLO_MS.get(str(data["base_preset"]))
