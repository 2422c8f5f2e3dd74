"""The daemon's model file refuses a key its format does not define, at every level (a
misspelt ``sleep_span`` used to drop the gain schedule's span unseen, a ``"bogus": 1`` passed),
naming the key and the keys allowed there; every model file this project writes or has
committed still loads."""

import json
import random
import subprocess
from pathlib import Path

import pytest

from gpucontrol import (
    LatencyModelFamily,
    LinearLatencyModel,
    Measurement,
    ShareKnob,
    SleepKnob,
    ThroughputOuter,
    TwoTierController,
)
from gpucontrol.errors import ConfigurationError
from gpucontrol.model_form import FAMILY_KEYS, LEVEL_KEYS, POINT_KEYS
from gpucontrol.node.model_file import load_model

ROOT = Path(__file__).resolve().parents[3]
ROW = {"mps_pct": 50.0, "gain": -8.0, "offset": 75.0}


def _load(tmp_path, doc):
    f = tmp_path / "model.json"
    f.write_text(json.dumps(doc))
    return load_model(f)


@pytest.mark.parametrize("doc, key, allowed", [
    ({"gain": -12.0, "offset": 95.0, "bogus": 1}, "'bogus'", LEVEL_KEYS),
    ({"gain": -12.0, "offset": 95.0, "iteration_s": 0.2, "sleep_span": [0, 1]},
     "'sleep_span' (did you mean 'sleep_span_s'?)", LEVEL_KEYS),
    ({"points": [ROW], "sleep_span": [0, 1]}, "'sleep_span' (did you mean 'sleep_span_s'?)",
     FAMILY_KEYS),
])
def test_an_unknown_top_level_key_is_refused(tmp_path, doc, key, allowed):
    with pytest.raises(ConfigurationError) as e:
        _load(tmp_path, doc)
    msg = str(e.value)
    assert msg.startswith(f"model: unknown key {key}")
    assert f"the keys are {', '.join(allowed)}" in msg


@pytest.mark.parametrize("doc", [{"points": [ROW, {**ROW, "mps_pct": 80.0, "gian": -3.0}]},
                                 [ROW, {**ROW, "mps_pct": 80.0, "gian": -3.0}]])
def test_an_unknown_key_inside_a_point_is_refused(tmp_path, doc):
    with pytest.raises(ConfigurationError,
                       match=r"^model points\[1\]: unknown key 'gian' \(did you mean 'gain'\?\)"
                             r"; the keys are " + ", ".join(POINT_KEYS)):
        _load(tmp_path, doc)
    with pytest.raises(ConfigurationError, match="unknown key 'gian'"):
        LatencyModelFamily.from_json(json.dumps(doc))


def test_every_committed_model_file_still_loads():
    """Every model.json under git (docs/results: older runs without iteration times, runs
    with ``source`` notes, identified ones with duty and bent laws), and the copies of the
    models in the results' meta.json."""
    files = subprocess.run(["git", "ls-files", "*model.json", "*meta.json"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    loaded = 0
    for name in files:
        doc = json.loads((ROOT / name).read_text())
        docs = doc.get("models", {}).values() if name.endswith("meta.json") else [doc]
        for d in docs:
            fam = LatencyModelFamily.from_document(d)
            assert fam.points, name
            loaded += 1
        if name.endswith("model.json"):
            assert isinstance(load_model(ROOT / name), LatencyModelFamily)
    assert loaded >= 10


def test_a_one_level_file_as_identify_writes_it_loads_with_its_notes(tmp_path):
    """One level: the row's keys, r2 and r2_validation (notes) and the family's keys beside
    them. The daemon reads it as the harness does (``LatencyModelFamily.from_document``): as
    one row under "points", its duty and bent laws included. It used to drop them, so the
    same file gave the daemon and the harness two different controllers."""
    one = {"gain": -10.0, "offset": 30.0, "mps_pct": 100.0, "r2": 0.8, "r2_validation": 0.7,
           "iteration_s": 0.5, "idle_ms": 20.0, "duty_gain_ms": 12.0, "fit_error": 0.05,
           "bent_law": [20.0, 5.0, 0.4], "sleep_span_s": [0.0, 1.0], "source": "a test"}
    fam = _load(tmp_path, one)
    p = fam.points[0]
    assert (p.mps_pct, p.iteration_s, p.fit_error) == (100.0, 0.5, 0.05)
    assert (p.duty_law, p.bent_law) == ((20.0, 12.0), (20.0, 5.0, 0.4))
    assert fam.sleep_span_s == (0.0, 1.0)
    assert fam == LatencyModelFamily.from_document(one)
    row = {k: v for k, v in one.items() if k not in ("r2", "r2_validation", "sleep_span_s",
                                                      "source")}
    assert fam == _load(tmp_path, {"points": [row], "sleep_span_s": [0.0, 1.0]})
    bare = _load(tmp_path, {"gain": -10.0, "offset": 30.0, "r2": 0.8, "mps_pct": 100.0})
    assert bare == LinearLatencyModel(-10.0, 30.0)


def _actuations(fam, quantum):
    """The sleeps of the default loop held on one level, over a noisy stream with a step."""
    ctl = TwoTierController(fam, 26.0, outer=ThroughputOuter(),
                            share=ShareKnob(levels_pct=(100.0,), change_s=0.0, initial_pct=100.0),
                            sleep=SleepKnob((0.0, 0.5), run_quantum_s=quantum))
    rng = random.Random(1)
    out = []
    for k in range(600):
        x = 26.0 + rng.gauss(0, 1.5) + (2.0 if (k // 150) % 2 else 0.0)
        out.append(ctl.update(Measurement(x, x * 1.3, 20, iteration_s=0.05)).sleep_s)
    return out


def test_a_one_level_files_duty_law_moves_the_loop_only_where_the_loop_reads_it(tmp_path):
    """A duty cycler's fixed run quantum sets the duty's time constant, so the loop reads the
    line as a duty law at that quantum and a measured duty or bent law is not used: the CPU
    plant's daemon (``--sleep-method signal --run-quantum-s q``) runs the same loop whether the
    file's laws are read or not. With the training's iteration time (the hook) the measured
    law is the loop's model, and the sleeps differ."""
    one = {"gain": -10.0, "offset": 30.0, "iteration_s": 0.05, "idle_ms": 21.0,
           "duty_gain_ms": 12.0, "bent_law": [20.0, 5.0, 0.4], "sleep_span_s": [0.0, 0.5]}
    read = _load(tmp_path, one)
    line = _load(tmp_path, {k: one[k] for k in ("gain", "offset", "iteration_s",
                                                "sleep_span_s")})
    assert read.points[0].duty_law and not line.points[0].duty_law
    assert _actuations(read, 0.02) == _actuations(line, 0.02)
    assert _actuations(read, None) != _actuations(line, None)


@pytest.mark.parametrize("doc", [{"gain": -10.0, "offset": 30.0, "sleep_span_s": 5},
                                 {"points": [ROW], "sleep_span_s": 5}])
def test_a_span_that_is_not_a_pair_is_named(tmp_path, doc):
    with pytest.raises(ConfigurationError, match=r"^sleep_span_s must be a \(low, high\) pair"):
        _load(tmp_path, doc)


@pytest.mark.parametrize("doc, message", [
    # a row missing a key its form needs: named with the row, not "family must be a list..."
    ({"points": [ROW, {"mps_pct": 80.0, "gain": -3.0}]},
     r"^model points\[1\]: missing key\(s\) offset \(every row needs mps_pct, gain, offset\)$"),
    ([ROW, {"gain": -3.0, "offset": 70.0}], r"^model points\[1\]: missing key\(s\) mps_pct "),
    # half a duty law: idle_ms alone used to be dropped unseen, duty_gain_ms alone a KeyError
    ({"points": [{**ROW, "iteration_s": 0.5, "idle_ms": 60.0}]},
     r"^model points\[0\]: idle_ms without duty_gain_ms; the duty law c \+ A d needs both"),
    ({"points": [{**ROW, "iteration_s": 0.5, "duty_gain_ms": 9.0}]},
     r"^model points\[0\]: duty_gain_ms without idle_ms"),
    ({"gain": -10.0, "offset": 30.0, "iteration_s": 0.5, "idle_ms": 20.0},
     r"^model: idle_ms without duty_gain_ms"),
    # a bad value: named with its row
    ({"points": [ROW, {**ROW, "mps_pct": 80.0, "gain": 2.0}]},
     r"^model points\[1\]: gain must be < 0"),
    ({"points": [ROW, {**ROW, "mps_pct": 180.0}]},
     r"^model points\[1\]: mps_pct must be in \(0, 100\]"),
    ({"points": [ROW, 7]}, r"^model points\[1\] must be an object with mps_pct, gain, offset"),
    ({"points": {"a": ROW}}, r"points is a dict, not a list of rows"),
])
def test_a_bad_row_is_refused_naming_the_row_and_the_key(tmp_path, doc, message):
    with pytest.raises(ConfigurationError, match=message):
        _load(tmp_path, doc)
