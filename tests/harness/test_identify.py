"""The identification study (GPUColo paper, Figs. 6/7) on the simulated plant and its command."""

import json
import math

import numpy as np
import pytest

from harness.experiments import identify as ident
from harness.results import read_csv


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("identify")
    res = ident.identify(mps_levels=(60, 80, 100), periods=60, seed=1, out_dir=out)
    return res, out


def test_writes_tidy_csv_png_and_meta(study):
    res, out = study
    names = {f.name for f in res.files}
    assert names == {"identify_periods.csv", "identify_summary.csv", "identify_summary.md",
                     "identify_meta.json", "identify_fig6.png", "identify_fig7.png",
                     "model.json"}
    rows = read_csv(out / "identify_periods.csv")
    assert len(rows) == 3 * 60  # one row per recorded period
    assert set(rows[0]) == set(ident.PERIOD_COLUMNS)
    assert {r["split"] for r in rows} == {"train", "validation"}
    summary = read_csv(out / "identify_summary.csv")
    assert [r["mps_pct"] for r in summary] == [60.0, 80.0, 100.0]


def test_model_json_is_what_the_daemon_reads(study):
    from gpucontrol.models import LatencyModelFamily
    from gpucontrol.node.daemon import load_model

    res, out = study
    model = load_model(out / "model.json")  # three levels: a family, gain-scheduled by MPS
    assert isinstance(model, LatencyModelFamily)
    one = ident.model_document(res.summary[-1:])
    assert one is not None and one["gain"] == res.summary[-1]["gain"]
    assert ident.model_document([{**res.summary[0], "gain": 1.0, "gain_ci_high": 2.0}]) is None
    # the excited sleep span goes with it: the daemon's gain schedule needs it
    from gpucontrol.node.model_file import load_sleep_span

    assert load_sleep_span(out / "model.json") == tuple(res.meta["sleep_range_s"])
    assert "sleep_span_s" not in one


def test_sleep_span_in_the_model_file_is_checked(tmp_path):
    from gpucontrol.node.model_file import load_sleep_span

    f = tmp_path / "m.json"
    f.write_text('{"gain": -10, "offset": 90}')
    assert load_sleep_span(f) is None                  # older files: no span, no schedule span
    f.write_text('{"gain": -10, "offset": 90, "sleep_span_s": [0, 0.03]}')
    assert load_sleep_span(f) == (0.0, 0.03)
    for bad in ('[0.5, 0.1]', '"x"', '[0, 1, 2]', '[-1, 1]'):
        f.write_text('{"gain": -10, "offset": 90, "sleep_span_s": ' + bad + "}")
        with pytest.raises(ValueError, match="sleep_span_s"):
            load_sleep_span(f)


def test_identified_gains_track_the_plant(study):
    res, _ = study
    for row in res.summary:
        assert row["gain"] < 0 and row["gain_ci_low"] < row["gain"] < row["gain_ci_high"]
        assert abs(row["gain_err_pct"]) < 30  # 60 noisy periods; the benchmark measures more
        assert row["r2"] > 0.5
    gains = [r["gain"] for r in res.summary]
    assert gains[0] > gains[1] > gains[2]  # more training MPS, steeper latency vs sleep


def test_envelope_and_design_verdict(study):
    res, _ = study
    m = res.meta
    assert m["envelope_levels"] == ["60", "80", "100"]
    lo, hi = m["envelope"]
    assert 0 < lo < 1 < hi < 2 and math.isclose(lo + hi, 2.0, rel_tol=1e-9)
    assert m["p_design_stable"] is True


def test_command_prints_gain_offset_r2(tmp_path, capsys):
    from harness.cli import main

    rc = main(["identify", "--out", str(tmp_path), "--mps", "80,100", "--periods", "30",
               "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "gain (ms/s)" in text and "offset (ms)" in text and "R² held-out" in text
    assert "Gain envelope" in text
    assert (tmp_path / "identify" / "identify_fig6.png").stat().st_size > 10_000


def test_unavailable_plant_exits_3(monkeypatch, tmp_path, capsys):
    from gpucontrol.errors import PlantUnavailable
    from harness.cli import main

    def no_gpu(*a, **k):
        raise PlantUnavailable("no CUDA device here")

    monkeypatch.setattr(ident, "make_plant", no_gpu)
    assert main(["identify", "--plant", "gpu", "--out", str(tmp_path)]) == 3
    assert "no CUDA device here" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, msg", [
    ({"sleep_range": (0.5, 0.2)}, "sleep_range"),
    ({"periods": 5}, "periods must be"),
    ({"mps_levels": (0, 50)}, "mps_levels"),
])
def test_bad_arguments(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        ident.identify(**kwargs)


def test_r2_below_the_bar_never_prints_as_the_bar():
    from harness.experiments.identify import R2_BAR, _below

    assert _below(0.7899) == "0.7899" and float(_below(0.7899)) < R2_BAR
    assert _below(0.737) == "0.74"
    assert _below(0.78999999) != "0.79"


def test_model_json_carries_the_training_rate_curve(study):
    """The identification records the training's iteration time per level, from the
    iterations counted (within 3 % of the simulator's own), and the daemon's model reads it."""
    from gpucontrol.node.model_file import load_model

    res, out = study
    for row in res.summary:
        assert row["iteration_s"] == pytest.approx(row["true_iteration_s"], rel=0.03)
    model = load_model(out / "model.json")
    assert [p.iteration_s for p in model.points] == pytest.approx(
        [r["iteration_s"] for r in res.summary if r["gain_ci_high"] < 0])
    assert model.sleep_span_s == tuple(res.meta["sleep_range_s"])
    one = ident.model_document(res.summary[-1:], sleep_span_s=(0.0, 1.0))
    f = out.parent / "one.json"
    f.write_text(json.dumps(one))
    fam = load_model(f)       # one level with its iteration time: a one-point family
    assert fam.iteration_s(100.0) == pytest.approx(res.summary[-1]["iteration_s"])
    assert fam.points[0].fit_error == pytest.approx(res.summary[-1]["fit_error"])


def test_model_json_carries_each_levels_misfit(study):
    """Each level's residual as a fraction of its mean latency goes to model.json, where the
    outer loop's prior reads it."""
    from gpucontrol.node.model_file import load_model

    res, out = study
    model = load_model(out / "model.json")
    rows = {r["mps_pct"]: r for r in res.summary}
    for p in model.points:
        r = rows[p.mps_pct]
        assert 0 < p.fit_error < 1 and p.fit_error == pytest.approx(r["fit_error"])
        assert r["rmse_ms"] == pytest.approx(p.fit_error * np.mean(
            [x["latency_ms"] for x in res.records
             if x["mps_pct"] == p.mps_pct and x["split"] == "train"]), rel=1e-6)


class _CPUShareRecorder:
    """The simulated plant seen as one whose share is a CPU quota (as the CPU plant's)."""

    share_name = "CPU share"

    def __init__(self):
        from harness.sim.simulated import SimulatedColocation

        self._plant = SimulatedColocation.preset("fig8", seed=3)

    def __getattr__(self, name):
        return getattr(self._plant, name)


def test_a_cpu_share_is_named_so_and_the_fitted_line_carries_its_units(tmp_path, monkeypatch):
    """The CPU plant's identification figure said "MPS 100%", and its legend "-1.0 s + 77.1"
    read as seconds: figures and report now name the plant's own share, and the line reads
    ``latency = -1.0 ms/s × sleep + 77.1 ms``."""
    seen = []

    def capture(fig, path):
        ax = fig.axes[0]
        legend = ax.get_legend() or fig.legends[0]   # (fig7's stands above its panels)
        seen.append((ax.get_title(), [t.get_text() for t in legend.texts]))
        return path

    from harness.experiments import identify_figures as figs

    monkeypatch.setattr(figs, "save_figure", capture)
    res = ident.identify(plant=_CPUShareRecorder(), mps_levels=(100,), periods=20, seed=1,
                         out_dir=tmp_path)
    assert res.meta["share_name"] == "CPU share"
    (title6, legend6), (title7, _) = seen
    assert "CPU share" in title6 and "MPS" not in title6
    assert "dotted" in title6  # the simulated plant has a noise-free curve to dot
    row = res.summary[0]
    assert legend6 == [f"CPU share 100%: latency = {row['gain']:.1f} ms/s × sleep + "
                       f"{row['offset']:.1f} ms (R² {row['r2']:.2f})"]
    assert title7.startswith("CPU share 100%: held-out R²")
    text = ident.format_summary(res)
    assert "| CPU share % |" in text and "MPS" not in text
    assert figs._line({"gain": -1.0, "offset": -77.1, "r2": 0.5}) == \
        "-1.0 ms/s × sleep - 77.1 ms (R² 0.50)"


def _zoo_identification(name):
    from harness.sim import zoo

    plant = zoo.make_plant(name, seed=0, noise_seed=100, identified=True)
    return ident.identify(plant=plant, mps_levels=(25.0, 50.0, 75.0, 100.0),
                          sleep_range=(0.0, 1.0), periods=40, warmup=3, seed=0)


def test_a_time_sliced_level_is_told_from_an_additive_one():
    """On the H100-calibrated plant the latency at full share falls from 192 to 22 ms over
    sleeps of 0..1 s, hyperbolic in the training's duty (time slicing): the bent law fits it
    where the line misses by tens of percent, and the report says so instead of blaming the
    knob. On a plant whose latency is linear in the duty no level bends."""
    res = _zoo_identification("h100")
    top = next(r for r in res.summary if r["mps_pct"] == 100.0)
    assert top["bend"] > 0.8 and top["fit_error"] > 0.3
    assert top["bend_fit_error"] < 0.1 * top["fit_error"]
    lines = [x for x in ident.format_summary(res).splitlines() if x.startswith("MPS 100%")]
    assert any("hyperbolic in the training's duty" in x and "B = 0.9" in x for x in lines)
    assert not any("barely acts" in x for x in lines), lines
    # model.json keeps the bent law at the time-sliced level only
    fam = ident.family_of(res, every_level=True)
    assert fam.bent_law_at(100.0)[2] == pytest.approx(top["bend"])
    assert fam.bent_law_at(25.0) is None
    flat = _zoo_identification("hyperbolic")
    assert all(r["bend"] < 0.1 for r in flat.summary)
    assert all(p.bent_law is None for p in ident.family_of(flat, every_level=True).points)
    assert "hyperbolic in the training's duty" not in ident.format_summary(flat)
    assert set(ident.BENT) <= set(ident.SUMMARY_COLUMNS)


class _Readings:
    """A plant whose latency is a line in the sleep (slope per MPS level), with readings
    dropped or held flat where asked."""

    def __init__(self, flat_at=(), keep=1.0):
        self.flat_at, self.keep = flat_at, keep
        self.rng = np.random.default_rng(0)

    def step(self, act, period_s):
        if self.rng.uniform() >= self.keep:
            return math.nan
        if act.mps_pct in self.flat_at:
            return 50.0              # the sleep does not move it, to the last digit
        return 80.0 - 0.2 * act.mps_pct * act.sleep_s + self.rng.normal(0.0, 0.3)


def test_a_level_the_sleep_does_not_move_is_reported_not_fatal(tmp_path):
    """A level whose latency is flat used to end the whole identification ("validation
    output is constant") and lose the other levels' model: its row now says it (gain 0, no
    held-out R²) and model.json is made from the others."""
    res = ident.identify(plant=_Readings(flat_at=(40.0,)), mps_levels=(40, 80, 100),
                         periods=40, out_dir=tmp_path)
    flat = res.summary[0]
    assert flat["gain"] == 0.0 and math.isnan(flat["r2_validation"])
    assert math.isnan(flat["fit_pct_validation"])
    model = json.loads((tmp_path / "model.json").read_text())
    assert [p["mps_pct"] for p in model["points"]] == [80.0, 100.0]
    text = ident.format_summary(res)
    assert "| 40.00 | 0.00 |" in text
    assert ("\nMPS 40%: the latency did not move over the sleep range (50.00 ms in every "
            "period): no gain to fit, so no R² held out; the level is left out of model.json"
            in text)


@pytest.mark.parametrize("keep, msg", [
    # it said "u is too short: 2 sample(s), need at least 3" (the split), naming no level
    (0.05, r"^MPS 40%: the plant gave a latency in only \d of 100 periods \(\d+ without one\), "
           r"too few to fit and hold out 3 each at train_fraction 0.6"),
    # it said "u is too short: 0 sample(s), need at least 1"
    (0.0, r"^MPS 40%: the plant returned no finite mean latency in any of the 100 period\(s\)"),
])
def test_a_level_with_too_few_readings_is_named(keep, msg):
    with pytest.raises(ValueError, match=msg):
        ident.identify(plant=_Readings(keep=keep), mps_levels=(40, 80), periods=100)
