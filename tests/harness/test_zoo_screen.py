"""The zoo screen (harness.experiments.zoo_screen, benchmarks/zoo_screen.py): the default's
target figures per plant and seed, judged at the worst seed with each seed's own bound, and
the comparison of two screens."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpucontrol.errors import ConfigurationError
from harness.experiments import zoo_screen as zs
from harness.experiments.zoo_control import run
from harness.sim import zoo

ROOT = Path(__file__).resolve().parents[2]


def _doc(**seeds):
    """A screen with one plant ("p") whose seeds have these figures (label -> figures)."""
    return {"seeds": len(seeds), "plants": {"p": dict(seeds)}}


def _cells(doc):
    return {c.target: c for c in zs.failing(doc)}


def test_figures_are_the_runs_of_the_target_table():
    """One plant and seed: each label is the zoo_control.run call the table makes (the
    trace's training and violations, the steady p99 run's changes after period 100 per 10
    of its 16 decision windows, the load step's whole-run violations)."""
    f = zs.figures("hyperbolic", 1)
    trace = run("hyperbolic", 1, zoo.load_trace(600, seed=1))
    assert {k: f["trace"][k] for k in ("training", "over", "changes")} == {
        "training": trace["efficiency"], "over": trace["over"], "changes": trace["changes"]}
    assert set(f["trace"]) == {"training", "over", "changes", "gains"}
    assert "gains" not in f["free"] and "gains" in f["steady"]
    p99 = run("hyperbolic", 1, np.ones(500), mode="p99")
    assert f["p99_steady"]["changes"] == p99["changes_late"] / 16 * 10
    step = run("hyperbolic", 1, np.r_[np.ones(100), np.full(200, 1.3)])
    assert f["step"]["over"] == step["over"]
    assert f["delayed"] is False and zs.figures("delayed", 0)["delayed"] is True
    assert set(f) == set(zs.RUNS) | {"delayed"}


def test_a_cell_fails_when_one_seed_misses_its_own_bound():
    good = {"training": 0.96, "over": 1.0, "changes": 0.0}
    late = {"training": 0.96, "over": 2.5, "changes": 0.625}      # 2.5 % over, 3 % allowed
    doc = _doc(**{"0": {"delayed": False, "trace": good},
                  "1": {"delayed": True, "trace": late}})
    c = _cells(doc)
    assert c["% over, trace"].ok and c["% over, trace"].worst == 2.5
    assert c["training, trace"].ok and c["training, trace"].mean == pytest.approx(0.96)
    doc["plants"]["p"]["1"]["delayed"] = False                    # now 2 % is the bound
    assert not _cells(doc)["% over, trace"].ok
    doc["plants"]["p"]["0"]["trace"] = {**good, "training": 0.949}
    c = _cells(doc)["training, trace"]
    assert not c.ok and c.worst == 0.949 and c.mean == pytest.approx((0.949 + 0.96) / 2)
    assert "% over, trace" in _cells(doc) and "p99 mode: % over, trace" not in _cells(doc)


def test_the_day_stretches_the_trace_runs_and_no_other(monkeypatch):
    """``day``: the trace's runs get a trace of that many periods (its one swing over them),
    the steady and load-step runs their own loads; a day under 100 periods is refused by name."""
    seen = {}

    def fake(name, seed, loads, **kw):
        seen[(kw.get("knob"), kw.get("mode"), kw.get("iteration"), len(loads))] = np.array(loads)
        n = len(loads)
        return {"efficiency": 1.0, "over": 0.0, "changes": 0.0, "changes_late": 0.0,
                "training": np.ones(n), "oracle": np.ones(n), "decisions": []}

    monkeypatch.setattr(zs, "run", fake)
    zs.figures("hyperbolic", 3, day=1200)
    lengths = sorted(k[-1] for k in seen)
    assert lengths == [300] + [500] * 3 + [1200] * 5, lengths      # step, steady x3, trace x5
    np.testing.assert_array_equal(seen[(None, None, None, 1200)], zoo.load_trace(1200, seed=3))
    with pytest.raises(ConfigurationError, match="day"):
        zs.figures("hyperbolic", 3, day=99)


def test_compare_says_when_the_screens_traces_differ():
    a = _doc(**{"0": {"delayed": False, "trace": {"training": 0.96, "over": 1.0, "changes": 4}}})
    b = {**a, "day": 21600}
    assert "the traces differ: a day of 600 periods -> 21600" in zs.compare(a, b)
    assert not any("traces differ" in x for x in zs.compare(a, {**a, "day": 600}))


def test_compare_names_the_cells_that_changed_verdict_and_every_figure_that_moved():
    a = _doc(**{"0": {"delayed": False, "trace": {"training": 0.96, "over": 1.0, "changes": 4},
                      "p99_steady": {"training": 0.9, "over": 0.0, "changes": 1.25}}})
    b = json.loads(json.dumps(a))
    b["plants"]["p"]["0"]["p99_steady"]["changes"] = 0.625           # fixed
    b["plants"]["p"]["0"]["trace"]["training"] = 0.94                # newly failing
    lines = zs.compare(a, b)
    assert lines[0] == "failing cells: 1 -> 1 (of 3)"
    text = "\n".join(lines)
    assert "newly failing: 1\n  training, trace | p: 0.960 (0.960) -> 0.940 (0.940)" in text
    assert ("no longer failing: 1\n  p99 mode: share changes per 10 windows, steady load | p: "
            "1.25 (1.25) -> 0.62 (0.62)") in text
    assert "moved: 2" in text
    assert zs.compare(a, a)[-1] == "moved: 0"


def test_the_command_compares_two_files_and_refuses_one_that_is_not_a_screen(tmp_path):
    a = _doc(**{"0": {"delayed": False, "step": {"training": 1, "over": 3.5, "changes": 0}}})
    (tmp_path / "a.json").write_text(json.dumps(a))
    a["plants"]["p"]["0"]["step"]["over"] = 2.0
    (tmp_path / "b.json").write_text(json.dumps(a))
    (tmp_path / "bad.json").write_text("[1, 2]")
    script = str(ROOT / "benchmarks" / "zoo_screen.py")
    r = subprocess.run([sys.executable, script, "--compare", str(tmp_path / "a.json"),
                        str(tmp_path / "b.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("failing cells: 1 -> 0 (of 1)\n")
    assert "% over after a load step | p: 3.50 (3.50) -> 2.00 (2.00)" in r.stdout
    for bad, why in (("bad.json", "is not a screen"), ("none.json", "cannot read a screen")):
        r = subprocess.run([sys.executable, script, "--compare", str(tmp_path / "a.json"),
                            str(tmp_path / bad)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "argument --compare:" in r.stderr and why in r.stderr
        assert "Traceback" not in r.stderr


def test_a_screen_of_one_seed_runs_and_judges_every_target(tmp_path):
    """The command end to end on one plant and seed: the JSON holds that seed's figures and
    the commit, and the summary counts the target cells it judged (13 without --fuzz)."""
    out, png = tmp_path / "s.json", tmp_path / "gains.png"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "zoo_screen.py"), "--seeds",
                        "1", "--plants", "mixture", "--jobs", "1", "--json", str(out),
                        "--plot", str(png)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert list(doc["plants"]) == ["mixture"] and list(doc["plants"]["mixture"]) == ["0"]
    assert len(doc["commit"]) == 40 and doc["seeds"] == 1 and doc["fuzz"] is False
    assert isinstance(doc["edited"], bool)
    assert " of 13 target cells fail at their worst seed" in r.stdout
    assert doc["plants"]["mixture"]["0"] == json.loads(json.dumps(zs.figures("mixture", 0)))
    assert "| run | change | n |" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_a_change_realises_what_the_training_after_it_shows():
    """The realised gain reads the training over the oracle's 15-35 periods after the change
    over the 20 before it; a change too near either end of the run has none."""
    ratio = np.r_[np.full(40, 0.8), np.full(60, 0.9)]
    assert zs.realised(ratio, 40) == pytest.approx(0.9 / 0.8 - 1)
    assert zs.realised(ratio, 19) is None and zs.realised(ratio, 66) is None
    assert zs.realised(ratio, 65) == pytest.approx(0.0)           # both windows at 0.9


def test_the_gains_a_screen_keeps_are_the_runs_share_changes():
    """Every share change of a run comes from one outer decision (run() keeps them); the
    screen's gains are its moves and explorations with both windows inside the run, each with
    the gain and price its decision printed, the first flagged."""
    r = run("queue", 6, np.ones(500), mode="p99")
    changes = [(k, d) for k, d in r["decisions"] if d.action != "stay"
               and d.best_pct != d.share_pct]
    assert len(changes) == r["changes"] > 0
    assert [k for k, _ in changes] == list(np.nonzero(r["records"].col("mps_changed"))[0])
    g = zs.figures("queue", 6)["p99_steady"]["gains"]
    kept = [d for k, d in changes if d.action in ("move", "explore") and 20 <= k <= 465]
    assert [(x["action"], x["predicted"], x["price"]) for x in g] == [
        (d.action, d.gain, d.cost) for d in kept]
    assert [x["first"] for x in g] == [d is changes[0][1] for d in kept]
    table = zs.gains({"plants": {"queue": {"6": {"p99_steady": {"gains": g}}}}})
    assert table[0].startswith("| run | change | n |") and len(table) == 2 + len(
        {"first" if x["first"] else x["action"] for x in g})


def test_the_gains_figure_says_when_a_run_has_no_change_and_counts_one_seed(tmp_path,
                                                                            monkeypatch):
    import harness.results

    figs = []
    monkeypatch.setattr(harness.results, "save_figure", lambda fig, path: figs.append(fig))
    one = {"action": "move", "first": True, "predicted": 0.1, "realised": 0.05, "price": 0.05}
    doc = {"seeds": 1, "plants": {"ours": {"0": {"trace": {"gains": [one]},
                                                 "steady": {"gains": []},
                                                 "p99_steady": {"gains": []}}}}}
    zs.plot_gains(doc, str(tmp_path / "g.png"))
    [fig] = figs
    texts = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    assert texts == [[], ["no change to show"], ["no change to show"]]
    assert f"on plant ours, 1 seed, a {zs.DAY}-period trace:" in fig._suptitle.get_text()


def test_the_gains_figure_names_the_plants_and_the_day(tmp_path, monkeypatch):
    """The title said "on the plant zoo" whichever plants ran, and no trace length."""
    import harness.results

    figs = []
    monkeypatch.setattr(harness.results, "save_figure", lambda fig, path: figs.append(fig))
    runs = {"trace": {"gains": []}, "steady": {"gains": []}, "p99_steady": {"gains": []}}
    doc = {"seeds": 2, "day": 100, "fuzz": True,
           "plants": {"queue": {"0": runs, "1": runs}, "h100": {"0": runs, "1": runs}}}
    zs.plot_gains(doc, str(tmp_path / "g.png"))
    [fig] = figs
    assert ("on plants queue, h100, 2 seeds, a 100-period trace, fuzzed readings:\n"
            in fig._suptitle.get_text())
