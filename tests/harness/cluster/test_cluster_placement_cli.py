"""Placement policies and the ``gpucontrol cluster`` command."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from harness.cli import main
from harness.cluster.figures import saved
from harness.cluster.placement import KacePredictor, choose, observed_features, pair_design
from harness.cluster.synthetic import synthetic
from harness.cluster.traces import PAI_COLUMNS


def test_kace_regression_predicts_pair_slowdown():
    t = synthetic(days=2, target_gpus=100, seed=1)
    feats = observed_features(t.demand, t.beta, t.sigma, t.mem_gb, seed=0)
    k = KacePredictor.train(feats, t.demand, t.beta, t.sigma, 0.5, n_pairs=300)
    assert k.r2 > 0.8
    # the per-GPU aggregate score equals the sum of the pair predictions
    rng = np.random.default_rng(0)
    x, ys = rng.integers(0, len(t), 1)[0], rng.integers(0, len(t), 3)
    pairs = pair_design(np.repeat(feats[[x]], 3, axis=0), feats[ys]) @ k.coef
    score = k.gpu_scores(feats[x], np.array([3.0]), feats[ys].sum(axis=0)[None, :])
    assert score[0] == pytest.approx(pairs.sum(), rel=1e-9)


def test_choose_first_fit_kace_mudi():
    order = np.array([5, 2, 9, 1])
    cand = np.array([0, 1, 2])
    assert choose("first-fit", cand, order) == 1
    fx = np.array([0.3, 0.2, 1.0, 0.1])
    # Mudi, training job: GPU whose inference is least sensitive; GPU 2 hosts no inference
    n_inf = np.array([1.0, 2.0, 0.0, 0.0])
    sig_inf = np.array([1.4, 1.2, 0.0, 0.0])     # means 1.4 and 0.6
    assert choose("mudi", cand, order, fx=fx, kind=1, n_inf=n_inf, sig_inf=sig_inf) == 1
    # Mudi, inference job: smallest pressure from co-runners
    press = np.array([0.5, 0.3, 0.1, 0.0])
    assert choose("mudi", cand, order, fx=fx, kind=0, press=press) == 2
    with pytest.raises(ValueError, match="unknown placement"):
        choose("random", cand, order, fx=fx)


def test_saved():
    assert saved(3059, 766) == pytest.approx(0.7496, abs=1e-4)


def test_cli_cluster_synthetic(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["cluster", "--trace", "synthetic", "--days", "1", "--scale", "15", "--policy",
               "all", "--placement", "first-fit,mudi", "--no-burst", "--ratios", "1,3",
               "--out", str(out), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "GPUColo (first-fit): saves" in text and "paper 74.9 %" in text
    for f in ("summary.csv", "daily.csv", "fig12_gpus.png", "fig13a_violation.png",
              "ratio.csv", "fig13b_ratio.png"):
        assert (out / f).stat().st_size > 0
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["policy"] for r in rows} == {"nocolo", "separate", "simple", "conservative",
                                           "gslice", "gpucolo"}
    assert len(rows) == 11          # No Co-location once, others per placement


def test_cli_cluster_pai_file_and_errors(tmp_path, capsys):
    path = tmp_path / "pai.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(PAI_COLUMNS)
        for i in range(30):
            w.writerow([f"j{i}", "worker", 1, "Terminated", 100 * i, 100 * i + 900 + 37 * i,
                        100, 4 + i % 20, [25, 50, 100, 150][i % 4], "V100"])
        w.writerow(["bad", "worker", 1, "Terminated", "x", 5, 1, 1, 1, "T4"])
    rc = main(["cluster", "--trace", "pai", str(path), "--policy", "gslice,gpucolo",
               "--out", str(tmp_path / "o"), "--no-progress", "--no-burst"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "MALFORMED 1" in text
    bad = tmp_path / "bad.csv"
    bad.write_text("job_name,task,inst_num\n")
    assert main(["cluster", "--trace", "pai", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "missing column(s): task_name" in err and "unknown column(s): task" in err
    assert main(["cluster", "--trace", "pai"]) == 2
    assert main(["cluster", "--trace", "synthetic", "--policy", "best"]) == 2


def test_cluster_figures_one_colour_per_policy_and_only_the_simulated_days(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import harness.cluster.figures as figs
    from harness.cluster.engine import SimConfig, Simulation

    t = synthetic(days=3, target_gpus=20, seed=0)
    res = [Simulation(t, SimConfig(policy=p, placement=pl)).run()
           for p in ("nocolo", "gslice", "gpucolo") for pl in ("first-fit", "mudi")
           if not (p == "nocolo" and pl == "mudi")]
    drawn = []
    orig = figs.save_figure
    figs.save_figure = lambda fig, path, **kw: drawn.append(fig) or path
    try:
        figs.plot_fig12(res, tmp_path / "a.png", burst=(20, 40))
        figs.plot_fig13a(res, tmp_path / "b.png", burst=(20, 40))
    finally:
        figs.save_figure = orig
    for fig in drawn:
        ax = fig.axes[0]
        colour = {}
        for line in ax.get_lines():
            pol = line.get_label().split(" (")[0]
            assert colour.setdefault(pol, line.get_color()) == line.get_color()
        assert ax.get_xlim()[1] <= 3  # a 3-day run plots 3 days, not the day-40 burst
    c12 = {ln.get_label().split(" (")[0]: ln.get_color() for ln in drawn[0].axes[0].get_lines()}
    c13 = {ln.get_label().split(" (")[0]: ln.get_color() for ln in drawn[1].axes[0].get_lines()}
    assert all(c12[k] == v for k, v in c13.items())


def test_the_long_run_note_counts_the_ratio_sweep(capsys, monkeypatch):
    """The up-front estimate of a long synthetic run counts Fig 13b's runs (GSLICE and GPUColo
    at each ratio) as well as the policy table's: the documented scale-3000 command with
    ``--ratios 1,2,3,4,5`` runs 14 simulations, not 4."""
    import harness.cli.cluster as cl

    seen: list[tuple[float, int]] = []

    def stop(gpu_days: float, runs: int) -> None:
        seen.append((gpu_days, runs))
        raise SystemExit(0)

    monkeypatch.setattr(cl, "_warn_if_long", stop)
    for extra, runs in (([], 4), (["--ratios", "1,2,3,4,5"], 14)):
        with pytest.raises(SystemExit):
            main(["cluster", "--trace", "synthetic", "--days", "57", "--scale", "3000", *extra])
        assert seen[-1] == (57 * 3000, runs)


def test_a_line_identical_to_an_earlier_placement_says_so(tmp_path):
    # with --placement all, Separate under Mudi-style placement gives exactly first-fit's
    # GPUs per day (its training placement falls back to first-fit and Separate's count
    # follows the training GPUs): its line was hidden under first-fit's without a word
    import dataclasses

    import matplotlib

    matplotlib.use("Agg")
    import harness.cluster.figures as figs
    from harness.cluster.engine import SimConfig, Simulation

    t = synthetic(days=2, target_gpus=20, seed=0)
    ff = Simulation(t, SimConfig(policy="separate")).run()
    kace = Simulation(t, SimConfig(policy="separate", placement="kace")).run()
    same = dataclasses.replace(ff, placement="mudi")
    other = dataclasses.replace(ff, placement="kace",
                                daily_gpus=ff.daily_gpus + 1, violated=kace.violated)
    drawn = []
    orig = figs.save_figure
    figs.save_figure = lambda fig, path, **kw: drawn.append(fig) or path
    try:
        figs.plot_fig12([ff, other, same], tmp_path / "a.png", burst=None)
        figs.plot_fig13a([ff, other, same], tmp_path / "b.png", burst=None)
    finally:
        figs.save_figure = orig
    for fig in drawn:
        labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
        assert "same as" not in labels[0] + labels[1], labels
        assert "(same as first-fit)" in labels[2], labels


def test_ratios_need_both_kinds_of_task(tmp_path, capsys):
    # a training-only trace ran the Fig 13b sweep unchanged at every "ratio" and wrote it
    path = tmp_path / "pai.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(PAI_COLUMNS)
        w.writerow(["j1", "train", 2, "Terminated", 1000, 5000, 600, 4, 50, "V100"])
    out = tmp_path / "o"
    assert main(["cluster", "--trace", "pai", str(path), "--no-burst", "--ratios", "1,2",
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--ratios needs a trace with both inference and " \
        "training tasks; this one has 0 inference and 2 training" in err
    assert not out.exists()
