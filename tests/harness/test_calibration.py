"""Calibrating the simulated plant: the general fit, facts from experiment records, the
``gpucontrol calibrate`` command, and calibration files as presets."""

import json
import math
import shutil

import numpy as np
import pytest

from harness.cli import main
from harness.experiments.common import make_plant
from harness.sim.simulated import (
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
     r"field 'base_preset' must be one of \['fig4', 'fig8', 'h100'\]"),
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
    with pytest.raises(ValueError, match=r"one of \['fig4', 'fig8', 'h100'\] or the path of a "
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


# ---- the general fit ----------------------------------------------------------------------------
def test_fit_fig4_is_the_general_fit_on_the_fig4_facts():
    from harness.sim.calibration import FIG4_FACTS, FIG4_FIT_FIELDS, Fact, fig4_params, fit_facts

    assert all(isinstance(f, Fact) and len(f) == 9 for f in FIG4_FACTS)
    fit = fit_facts(FIG4_FACTS, fig4_params(), fields=("inference_weight",), label="paper")
    assert set(fit.values) == {"inference_weight"} and "paper_latency_ms" in fit.rows[0]
    # fields no fact depends on are reported, not fitted
    mps_only = [f for f in FIG4_FACTS if not f.overrides]
    fit = fit_facts(mps_only, fig4_params(), fields=FIG4_FIT_FIELDS)
    assert set(fit.undetermined) == {"timeslice_inference_share", "timeslice_train_occupancy"}
    with pytest.raises(ValueError, match="fields must be a non-empty subset"):
        fit_facts(FIG4_FACTS, fig4_params(), fields=("batch",))


# ---- round trip: a perturbed plant's records -> calibrate -> the perturbed plant ----------------
PERTURBED = {"inference_weight": 2.2, "contention_exponent": 2.4,
             "interference_sqrt_image": 9.0, "timeslice_inference_share": 0.7,
             "train_work_s": 0.1, "saturation_per_sqrt_image": 0.11}


def expected_at(plant, fact):
    from dataclasses import replace

    p = SimulatedColocation(replace(plant.params, **fact["overrides"]))
    return (float(p.expected_latency_ms(fact["sleep_s"], fact["mps_pct"])),
            100.0 * float(p.expected_sm_share(fact["sleep_s"], fact["mps_pct"])))


@pytest.fixture(scope="module")
def perturbed_knobs(tmp_path_factory):
    """The knobs experiment on a fig4 plant with deliberately perturbed sharing constants."""
    from harness.experiments.knobs import knobs

    root = tmp_path_factory.mktemp("perturbed")
    truth = write_calibration(root / "perturbed.json", "fig4", **PERTURBED)
    knobs(preset=str(truth), duration_s=60.0, seed=1, out_dir=root / "results" / "knobs")
    return root, truth


def test_round_trip_recovers_the_perturbed_plant(perturbed_knobs, capsys):
    root, truth = perturbed_knobs
    out = root / "calibration"
    assert main(["calibrate", "--from", str(root / "results"), "--preset", "fig4",
                 "--out", str(out)]) == 0
    assert "calibrated" in capsys.readouterr().out
    for name in ("calibration.json", "calibration.md", "calibration.png"):
        assert (out / name).stat().st_size > 0
    doc = json.loads((out / "calibration.json").read_text())
    assert doc["kind"] == CALIBRATION_KIND and doc["base_preset"] == "fig4"
    assert len(doc["facts"]) == 6 and doc["sources"][0]["plant"] == "sim"
    time_sliced = [f for f in doc["facts"] if not f["overrides"]["mps_enabled"]]
    assert sorted(f["sleep_s"] for f in time_sliced) == pytest.approx([0.2, 0.8])  # "Sleep"

    true_plant = make_plant("sim", str(truth))
    base_plant = make_plant("sim", "fig4")
    fitted_plant = make_plant("sim", str(out / "calibration.json"))
    base_err, fit_err, sm_err = [], [], []
    for fact in doc["facts"]:
        lat, sm = expected_at(true_plant, fact)
        base_err.append(abs(expected_at(base_plant, fact)[0] / lat - 1))
        fit_lat, fit_sm = expected_at(fitted_plant, fact)
        fit_err.append(abs(fit_lat / lat - 1))
        sm_err.append(abs(fit_sm - sm))
    assert max(fit_err) < 0.02                 # within 2 % of the perturbed plant everywhere
    assert max(base_err) > 0.2                 # the unperturbed preset was off by > 20 %
    assert max(fit_err) < max(base_err) / 20
    assert max(sm_err) < 1.0                   # training SM share within 1 point
    for name, value in PERTURBED.items():      # and the constants themselves come back
        assert doc["overrides"][name] == pytest.approx(value, rel=0.1), name


def test_preset_is_inferred_from_the_records(perturbed_knobs, tmp_path):
    from harness.experiments.calibrate import run_calibration

    root, _ = perturbed_knobs
    doc, _files = run_calibration([root / "results" / "knobs" / "knobs.csv"], tmp_path,
                                  fields=("inference_weight", "contention_exponent"))
    assert doc["base_preset"] == "fig4" and set(doc["overrides"]) == {
        "inference_weight", "contention_exponent"}


def test_identify_records_are_binned_by_sleep(tmp_path):
    from harness.experiments.identify import identify
    from harness.sim.calibration import facts_from_records

    identify(mps_levels=(60.0, 100.0), periods=24, seed=2, out_dir=tmp_path / "identify")
    mf = facts_from_records([tmp_path], sleep_bin_s=0.2)
    assert {f.mps_pct for f in mf.facts} == {60.0, 100.0}
    assert all(f.overrides == {"mps_enabled": True, "batch": 105, "inference_mps_pct": 100.0}
               for f in mf.facts)
    assert all(math.isnan(f.sm_pct) for f in mf.facts)        # identify records no SM share
    truth = SimulatedColocation.preset("fig8")
    for f, d in zip(mf.facts, mf.details):
        assert d["periods"] >= 3 and d["sleep_max_s"] - d["sleep_min_s"] <= 0.2 + 1e-9
        assert f.latency_ms == pytest.approx(truth.expected_latency_ms(f.sleep_s, f.mps_pct),
                                             rel=0.03)


# ---- bad input ----------------------------------------------------------------------------------
def test_calibrate_names_what_is_wrong(perturbed_knobs, tmp_path, capsys):
    root, _ = perturbed_knobs
    results = str(root / "results")
    out = str(tmp_path / "out")

    def error(argv):
        try:
            rc = main(["calibrate", *argv, "--out", out])
        except SystemExit as exc:  # refused by the parser
            rc = exc.code
        assert rc == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        return err

    assert "no such file or folder" in error(["--from", str(tmp_path / "missing")])
    (tmp_path / "empty").mkdir()
    assert "no experiment records found" in error(["--from", str(tmp_path / "empty")])
    err = error(["--from", results, "--settle", "60"])
    assert "no usable periods" in err and "settle_periods=60" in err
    assert "--min-periods: must be in [1, 100000], got 0" in error(["--from", results,
                                                                    "--min-periods", "0"])
    assert "--sleep-bin: must be in (0, 10] s, got 0" in error(["--from", results,
                                                                "--sleep-bin", "0"])
    bad = tmp_path / "bad.csv"
    bad.write_text("latency_ms\n5.0\n")
    # the file is wrong whatever the preset: said before the preset is looked for
    assert "--from: source" in error(["--from", str(bad)])
    assert "sleep_s, mps_pct missing" in error(["--from", str(bad), "--preset", "fig4"])
    good = tmp_path / "good.csv"
    good.write_text("latency_ms,sleep_s,mps_pct\n" + "5.0,0.1,80\n" * 6)
    assert "no recorded preset" in error(["--from", str(good)])
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        main(["calibrate", "--from", results, "--preset", "fig5"])
    assert "one of ['fig4', 'fig8', 'h100']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["calibrate", "--from", results, "--fit", "batch"])
    assert "--fit takes ColocationParams fields" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["calibrate", "--out", out])          # --from is required
    assert "--from" in capsys.readouterr().err


def test_calibrate_names_the_flag_of_a_bad_source_and_leaves_out_alone(perturbed_knobs,
                                                                        tmp_path, capsys):
    """A bad source is refused in one line naming its flag (--from or --check), before
    anything is fitted or written: a previous calibration in --out stays as it was."""
    root, _ = perturbed_knobs
    results = root / "results"
    out = tmp_path / "out"
    out.mkdir()
    (out / "calibration.json").write_text("previous")
    cut = tmp_path / "cut"
    shutil.copytree(next(p.parent for p in results.rglob("knobs.csv")), cut)
    text = (cut / "knobs.csv").read_text()
    (cut / "knobs.csv").write_text(text[:text.rindex(",")])        # cut mid-line
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.csv").write_text("")
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "calibration.json").write_text("{}")      # an output, not records
    cases = [(["--from", str(cut)], "--from: ", "has "),
             (["--from", str(results), "--check", str(cut)], "--check: ", "has "),
             (["--from", str(results), "--check", str(tmp_path / "empty")], "--check: ",
              "no experiment records found"),
             (["--from", str(tmp_path / "a.csv")], "--from: ", "no periods in it"),
             (["--from", str(tmp_path / "cal")], "--from: ", "no experiment records found")]
    for argv, flag, why in cases:
        assert main(["calibrate", *argv, "--preset", "fig4", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"gpucontrol calibrate: error: {flag}"), err
        assert why in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["calibration.json"]
    assert (out / "calibration.json").read_text() == "previous"


def test_calibrate_refuses_records_given_twice(perturbed_knobs, tmp_path, capsys):
    """A folder and its subfolder (or a --check that was fitted too) hold the same records:
    counted twice they shrank nothing but the standard errors (0.0007 -> 0.0005 for one
    identify record read twice), so they are refused, naming both."""
    root, _ = perturbed_knobs
    results = root / "results"
    csv = next(results.rglob("knobs.csv"))
    out = tmp_path / "out"
    for argv, flag in [(["--from", str(results), "--from", str(csv.parent)], "--from"),
                       (["--from", str(results), "--check", str(csv)], "--check")]:
        assert main(["calibrate", *argv, "--preset", "fig4", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"gpucontrol calibrate: error: {flag}: "), err
        assert f"already read from --from {results}" in err and len(err.splitlines()) == 1
    assert not out.exists()


# ---- SLOs stated for the RTX 3090, moved to another GPU's latency range --------------------------
def test_relative_slo_lands_at_the_same_place_in_a_faster_gpus_range(tmp_path, capsys):
    from harness.experiments.burst import burst
    from harness.experiments.common import latency_range_ms, scale_slo
    from harness.experiments.slo_sweep import slo_sweep

    fig8 = SimulatedColocation.preset("fig8")
    assert scale_slo(90.0, fig8, 105) == pytest.approx(90.0, abs=1e-9)
    # a GPU about three times faster at the inference than the RTX 3090 preset
    f = write_calibration(tmp_path / "fast.json", "fig8", compute_ms_per_image=0.2)
    fast = make_plant("sim", str(f))
    lo0, hi0 = latency_range_ms(fig8, 105)
    lo, hi = latency_range_ms(fast, 105)
    assert hi < 0.6 * hi0
    slo = scale_slo(90.0, fast, 105)
    assert lo < slo < hi
    assert (slo - lo) / (hi - lo) == pytest.approx((90.0 - lo0) / (hi0 - lo0))
    with pytest.raises(ValueError, match="slo_ms must be a positive number"):
        scale_slo(-1.0, fast, 105)

    # the fixed 90 ms is out of reach there: the controller sits at full training, far below it
    kw = {"preset": str(f), "duration_s": 160, "burst_s": (1000.0, 1001.0),
          "controllers": "two-tier"}
    fixed = burst(**kw)
    rel = burst(relative_slo=True, **kw)
    assert rel.meta["slo_ms"] == pytest.approx(slo) and rel.meta["slo_given_ms"] == 90.0
    assert fixed.meta["slo_ms"] == 90.0 and fixed.meta["relative_slo"] is False
    lat_fixed = fixed.records.col("latency_ms")[-10:].mean()
    lat_rel = rel.records.col("latency_ms")[-10:].mean()
    assert lat_fixed < 0.8 * 90.0
    assert lat_rel == pytest.approx(slo, rel=0.03)

    sw = slo_sweep(preset=str(f), slos=(75, 95), duration_s=40, warmup_s=8,
                   controllers="two-tier", relative_slo=True)
    assert sw.meta["slos_given"] == [75.0, 95.0]
    assert sw.meta["slos"] == pytest.approx([scale_slo(75, fast, 105), scale_slo(95, fast, 105)])
    assert sorted({r["slo_ms"] for r in sw.summary}) == pytest.approx(sw.meta["slos"])

    assert main(["burst", "--preset", str(f), "--relative-slo", "--duration", "8",
                 "--controllers", "two-tier", "--out", str(tmp_path), "--no-progress"]) == 0
    assert f"-> {slo:.1f} ms on {f}" in capsys.readouterr().out


def test_constants_the_data_cannot_pin_are_flagged(tmp_path, capsys):
    from harness.experiments.calibrate import unpinned

    doc = {"fitted": {"a": {"value": 0.0388, "stderr": 0.3184}, "b": {"value": 2.0,
                                                                      "stderr": 0.1},
                      "c": {"value": 1.0, "stderr": float("nan")}}}
    assert unpinned(doc) == ["a", "c"]  # c: no standard error at all (too few facts)
    # the knobs records alone (one batch size) leave the saturation constant loose
    assert main(["knobs", "--out", str(tmp_path), "--no-progress"]) == 0
    assert main(["calibrate", "--from", str(tmp_path / "knobs"),
                 "--out", str(tmp_path / "cal")]) == 0
    err = capsys.readouterr().err
    assert "is not pinned by these data" in err
    md = (tmp_path / "cal" / "calibration.md").read_text()
    assert "**Warning**: the data cannot pin" in md and "not pinned by these data |" in md


def test_an_underdetermined_fit_warns_for_every_constant(tmp_path, capsys):
    """Two facts (one MPS level, two sleep bins), six constants: no standard error at all;
    each constant gets its warning on stderr and in calibration.md (it used to pass in
    silence, every std. error shown as a dash)."""
    assert main(["identify", "--plant", "sim", "--mps", "80", "--periods", "20",
                 "--sleep", "0.1,0.2", "--out", str(tmp_path), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["calibrate", "--from", str(tmp_path / "identify"), "--preset", "fig8",
                 "--out", str(tmp_path / "cal")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    doc = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert doc["fit"]["residuals"] < doc["fit"]["fields"] == 6
    assert len(err) == 6
    for name, line in zip(doc["fitted"], err):
        assert line.startswith(f"gpucontrol: note: calibrate: {name} = ")
        assert "(no standard error) is not pinned by these data: 2 measured quantities for " \
               "6 fitted constants" in line
    md = (tmp_path / "cal" / "calibration.md").read_text()
    assert "**Warning**: the data cannot pin" in md and md.count("(no standard error)") == 6


@pytest.mark.parametrize("column, value, text", [
    ("mps_pct", "500", "mps_pct is 500, outside its range [1, 100]"),
    ("sleep_s", "-3", "sleep_s is -3, outside its range [0, inf)"),
    ("sleep_s", "inf", "sleep_s is inf, outside its range [0, inf)"),
    ("latency_ms", "-1", "latency_ms is -1, outside its range [0, inf)"),
    ("training_sm_share", "1.5", "training_sm_share is 1.5, outside its range [0, 1]; "
                                 "--sm-weight 0 leaves the SM share out of the fit"),
    ("batch", "0", "batch is 0, outside its range [1, 4096]"),
])
def test_out_of_range_records_are_refused(tmp_path, capsys, column, value, text):
    """A record with a value no experiment writes is refused, naming the file, line, column
    and range (an MPS of 500 % and a sleep of -3 s gave a calibration with an inference
    weight 11 times the base)."""
    cols = ["t_start_s", "latency_ms", "mps_pct", "sleep_s", "training_sm_share", "batch"]
    good = {"latency_ms": "90", "mps_pct": "80", "sleep_s": "0.5", "training_sm_share": "0.3",
            "batch": "105"}
    rows = [{**good, "t_start_s": str(4 * k)} for k in range(4)]
    rows[2][column] = value
    f = tmp_path / "x.csv"
    f.write_text(",".join(cols) + "\n" + "".join(",".join(r[c] for c in cols) + "\n"
                                                for r in rows))
    out = tmp_path / "out"
    assert main(["calibrate", "--from", str(f), "--preset", "fig8", "--settle", "0",
                 "--min-periods", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gpucontrol calibrate: error: --from: source {str(f)!r}: line 4: {text}"
    assert not out.exists()


def test_the_fit_is_shown_per_source_and_mixed_simulated_presets_are_named(tmp_path, capsys):
    """An overall RMS that improves can hide a source fitted worse than the preset did: the
    report and the figure give each source's RMS, and records of another simulated preset
    (knobs runs fig4) are named as the cause."""
    from harness.cli import main
    from harness.experiments.calibrate import per_source

    res = tmp_path / "results"
    assert main(["knobs", "--duration", "30", "--out", str(res), "--no-progress"]) == 0
    assert main(["identify", "--mps", "100", "--periods", "20", "--out", str(res),
                 "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "cal"
    assert main(["calibrate", "--from", str(res / "knobs"), "--from", str(res / "identify"),
                 "--preset", "fig8", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    doc = json.loads((out / "calibration.json").read_text())
    rows = per_source(doc)
    assert [r["preset"] for r in rows] == ["fig4", "fig8"]
    for r in rows:
        errs = [f["latency_err_pct"] for f in doc["facts"] if f["source"] == r["source"]]
        assert r["facts"] == len(errs) > 0
        assert r["latency_rms"] == pytest.approx(float(np.sqrt(np.mean(np.square(errs)))))
    md = (out / "calibration.md").read_text()
    assert [r["ran_on"] for r in rows] == ["simulated fig4", "simulated fig8"]
    assert "## Fit per source" in md and "| ran on |" in md and "| simulated fig4 |" in md
    # hardware records say so, not "None" (the H100 sources have no preset of their own)
    hw = {"sources": [{"path": "a.csv", "plant": "gpu", "preset": None},
                      {"path": "b.csv", "plant": "gpu", "preset": "fig4"}], "facts": []}
    assert [r["ran_on"] for r in per_source(hw)] == ["GPU", "GPU, set up as fig4"]
    knobs_csv = str(res / "knobs" / "knobs.csv")
    assert f"**Warning**: {knobs_csv} (fig4) ran on another simulated preset than `fig8`" in md
    assert f"calibrate: {knobs_csv} (fig4) ran on another simulated preset than fig8" in cap.err
    # (one preset's own records, no warning: the README's example, tests/docs)


def test_calibration_figure_text_covers_no_marker_and_no_other_text(tmp_path, monkeypatch,
                                                                    capsys):
    """The title ran over the first rows, their labels and the top legend (tight_layout left
    it no room); each source's label sat on its first fact's markers, and the legends on the
    rows under them. The labels now have blank rows of their own, the legends sit above the
    panels and the title has a strip above them."""
    import sys

    from harness.cli import main

    res = tmp_path / "results"
    # a tall figure (~100 facts): the title's place, 2 % of the height down, grows with it
    assert main(["burst", "--out", str(res), "--no-progress"]) == 0
    assert main(["identify", "--out", str(res), "--no-progress"]) == 0
    out = tmp_path / "cal"
    assert main(["calibrate", "--from", str(res), "--preset", "fig8", "--out", str(out)]) == 0
    capsys.readouterr()
    mod = sys.modules["harness.experiments.calibrate"]
    figs = []
    monkeypatch.setattr(mod, "save_figure", lambda fig, path: figs.append(fig) or path)
    mod.plot_calibration(json.loads((out / "calibration.json").read_text()), "unused.png")
    fig = figs[0]
    r = fig.canvas.get_renderer()

    def overlap(a, b):
        return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1

    def markers(ax):
        return [xy for ln in ax.get_lines() for xy in ax.transData.transform(ln.get_xydata())
                if np.isfinite(xy).all()]

    title = fig._suptitle.get_window_extent(r)
    assert not overlap(title, fig.axes[0].get_window_extent(r))
    legends = [a.get_legend().get_window_extent(r) for a in fig.axes if a.get_legend()]
    assert len(legends) == len(fig.axes)
    ticks = [t.get_window_extent(r) for t in fig.axes[0].get_yticklabels()]
    for box in [a.get_window_extent(r) for a in fig.axes] + legends + ticks:
        assert not overlap(title, box)
    for leg in legends:
        assert not any(overlap(leg, a.get_window_extent(r)) for a in fig.axes)
    labels = [t.get_window_extent(r) for t in fig.axes[0].texts]
    assert len(labels) == 2  # one per source
    assert fig.get_size_inches()[1] > 20
    for box in labels:
        assert not any(box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1
                       for x, y in markers(fig.axes[0]))
