"""Trace loaders: openb mapping rules, PAI format, bad input accounting, synthetic generator."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from harness.cluster.synthetic import SyntheticConfig, inference_burst, synthetic, with_ratio
from harness.cluster.traces import (
    DAY,
    INFERENCE,
    OPENB_COLUMNS,
    OPENB_PODS,
    PAI_COLUMNS,
    TRAINING,
    load_gpu_mix,
    load_openb,
    load_pai,
    pai_kind,
)


def write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        if header:
            w.writerow(header)
        w.writerows(rows)
    return path


def openb_row(name, num_gpu=1, milli=500, qos="LS", phase="Running", created=0, deleted=100,
              sched=0):
    return [name, 1000, 1024, num_gpu, milli, "", qos, phase, created, deleted, sched]


# ---- openb -----------------------------------------------------------------------------------
def test_vendored_openb_every_row_accounted():
    t = load_openb(OPENB_PODS)
    rep = t.report
    assert rep.rows == 8152
    assert rep.kept_rows + rep.n_filtered + rep.n_malformed == rep.rows
    assert rep.filtered["no GPU (num_gpu=0)"] == 1088
    assert rep.n_malformed == 0
    # multi-GPU pods are split: more per-GPU tasks than kept rows
    assert rep.tasks == len(t) > rep.kept_rows
    assert np.all((t.demand > 0) & (t.demand <= 1))
    assert t.arrival.min() == 0 and np.all(np.diff(t.arrival) >= 0)


def test_openb_mapping_rules(tmp_path):
    rows = [openb_row("ls", qos="LS", milli=460),
            openb_row("be", qos="BE", milli=810),
            openb_row("g", qos="Guaranteed", milli=1000),
            openb_row("burst-train", qos="Burstable", milli=1000, deleted=7200),
            openb_row("burst-inf", qos="Burstable", milli=300, deleted=7200),
            openb_row("multi", num_gpu=4, milli=1000, qos="BE", sched=50, deleted=150),
            openb_row("nogpu", num_gpu=0, milli=0),
            openb_row("failed", phase="Failed"),
            openb_row("pending", phase="Pending", sched="", deleted="")]
    t = load_openb(write(tmp_path / "p.csv", OPENB_COLUMNS, rows))
    rep = t.report
    assert rep.kept_rows == 6 and rep.tasks == 9
    assert rep.filtered == {"no GPU (num_gpu=0)": 1, "failed": 1, "never scheduled": 1}
    kinds = sorted(zip(t.arrival.tolist(), t.demand.tolist(), t.kind.tolist()))
    assert kinds.count((50, 1.0, TRAINING)) == 4          # 4-GPU pod split per GPU
    assert (0, 0.46, INFERENCE) in kinds                   # LS, gpu_milli / 1000
    assert (0, 0.81, TRAINING) in kinds                    # BE
    assert (0, 0.3, INFERENCE) in kinds                    # Burstable, small
    assert sum(1 for a, d, k in kinds if a == 0 and d == 1.0 and k == TRAINING) == 1
    # memory model: training 24 GB per share, inference 8 GB
    m = dict(zip(zip(t.demand.round(2).tolist(), t.kind.tolist()), t.mem_gb.tolist()))
    assert m[(0.81, TRAINING)] == pytest.approx(0.81 * 24)
    assert m[(0.46, INFERENCE)] == pytest.approx(0.46 * 8)


def test_openb_malformed_rows_are_counted_not_dropped(tmp_path):
    rows = [openb_row("ok"),
            openb_row("bad-num", milli="abc"),
            openb_row("bad-qos", qos="Gold"),
            openb_row("bad-range", milli=1500),
            openb_row("backwards", sched=200, deleted=100),
            ["short", "row"]]
    t = load_openb(write(tmp_path / "p.csv", OPENB_COLUMNS, rows))
    rep = t.report
    assert rep.kept_rows == 1 and rep.n_malformed == 5
    assert rep.malformed == {"non-integer number": 1, "unknown qos": 1, "value out of range": 1,
                             "deletion before scheduling": 1, "wrong field count": 1}
    assert "MALFORMED 5" in rep.summary()
    assert rep.malformed_lines == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("drop,add", [("gpu_milli", None), (None, "extra"), ("qos", "QoS")])
def test_openb_header_errors_name_the_columns(tmp_path, drop, add):
    header = [c for c in OPENB_COLUMNS if c != drop] + ([add] if add else [])
    path = write(tmp_path / "p.csv", header, [])
    with pytest.raises(ValueError) as e:
        load_openb(path)
    msg = str(e.value)
    if drop:
        assert f"missing column(s): {drop}" in msg
    if add:
        assert f"unknown column(s): {add}" in msg


def test_node_list_mix():
    mix = load_gpu_mix()
    assert mix["T4"] == 842 and sum(mix.values()) > 6000


# ---- PAI ---------------------------------------------------------------------------------------
PAI_ROWS = [
    # job, task, inst, status, start, end, cpu, mem, gpu, type
    ["j1", "worker", 1, "Terminated", 1000, 5000, 600, 40, 50, "V100"],        # split 2 (mem)
    ["j2", "tensorflow", 2, "Terminated", 1100, 9000, 600, 20, 100, "P100"],   # training, 2 inst
    ["j3", "worker", 1, "Terminated", 1200, 90000, 600, 70, 250, "V100"],      # split 3 (gpu)
    ["j4", "train_x", 1, "Terminated", 1300, 1400, 100, 1, 10, "T4"],          # marked training
    ["j5", "infer", 1, "Terminated", 1300, 99400, 100, 64, 100, "T4"],         # marked inference
    ["j6", "worker", 1, "Failed", 1000, 2000, 600, 4, 50, "V100"],             # filtered
    ["j7", "worker", 1, "Terminated", 1000, 2000, 600, 4, 0, "V100"],          # zero gpu
    ["j8", "worker", 1, "Running", 1000, "", 600, 4, 50, "V100"],              # no end
    ["j9", "worker", 1, "Terminated", 1000, 2000, 600, 4, "lots", "V100"],     # malformed
    ["j10", "worker", 1, "Terminated", 3000, 2000, 600, 4, 50, "V100"],        # malformed
]


@pytest.mark.parametrize("header", [True, False])
def test_pai_loader(tmp_path, header):
    t = load_pai(write(tmp_path / "pai.csv", PAI_COLUMNS if header else None, PAI_ROWS))
    rep = t.report
    assert rep.rows == 10 and rep.kept_rows == 5
    assert rep.filtered == {"failed": 1, "zero GPU, memory or instances": 1,
                            "not terminated / no times": 1}
    assert rep.malformed == {"non-numeric field": 1, "end before start": 1}
    # j1 2 (40 GB) + j2 2 instances + j3 ceil(250 %/100 %) = 3 + j4 1 + j5 2 (64 GB)
    assert len(t) == 2 + 2 + 3 + 1 + 2
    j1 = t.work == 4000
    assert j1.sum() == 2 and np.allclose(t.demand[j1], 0.25) and np.allclose(t.mem_gb[j1], 20)
    assert t.arrival.min() == 0
    assert np.all(t.demand <= 1.0 + 1e-12) and np.all(t.mem_gb <= 32.0 + 1e-9)
    j3 = t.work == 88800
    assert j3.sum() == 3 and np.allclose(t.demand[j3], 2.5 / 3) and np.allclose(
        t.mem_gb[j3], 70 / 3)
    j5 = t.work == 98100
    assert j5.sum() == 2 and np.all(t.kind[j5] == INFERENCE) and np.allclose(t.mem_gb[j5], 32)
    assert t.kind[t.work == 100][0] == TRAINING          # "train" in task_name


def test_pai_header_errors(tmp_path):
    bad = [*list(PAI_COLUMNS[:-1]), "gpu_model"]
    with pytest.raises(ValueError, match=r"missing column\(s\): gpu_type.*unknown column\(s\): "
                                         r"gpu_model"):
        load_pai(write(tmp_path / "pai.csv", bad, PAI_ROWS[:1]))
    with pytest.raises(ValueError, match="headerless pai_task_table has 10"):
        load_pai(write(tmp_path / "pai2.csv", None, [r[:8] for r in PAI_ROWS[:1]]))


@pytest.mark.parametrize("util,mem,length,kind", [
    (1.0, 30.0, 7200, TRAINING), (0.25, 2.0, 600, INFERENCE), (0.6, 2.0, 600, INFERENCE),
    (0.6, 10.0, 600, TRAINING), (0.1, 2.0, 9000, INFERENCE)])
def test_pai_kind_rule(util, mem, length, kind):
    assert pai_kind("worker", util, mem, length) == kind


# ---- synthetic and scenarios -------------------------------------------------------------------
def test_synthetic_is_seeded_and_has_the_paper_ratio():
    a = synthetic(days=4, target_gpus=200, seed=3)
    b = synthetic(days=4, target_gpus=200, seed=3)
    c = synthetic(days=4, target_gpus=200, seed=4)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.work, b.work)
    assert not np.array_equal(a.arrival, c.arrival)
    # job ratio 3:1 (multi-GPU training jobs are split, so count single-GPU tasks)
    n_inf = a.counts()["inference"]
    n_train_jobs = np.sum((a.kind == TRAINING) & (a.demand < 1)) + len(np.unique(
        a.arrival[(a.kind == TRAINING) & (a.demand == 1)]))
    assert 2.4 < n_inf / n_train_jobs < 3.6
    assert a.arrival.max() < 4 * DAY
    # mean busy GPUs under one-job-per-GPU is close to the target
    busy = a.work.sum() / (4 * DAY)
    assert 100 < busy < 300


def test_synthetic_config_validation():
    with pytest.raises(ValueError, match="days"):
        SyntheticConfig(days=0)
    with pytest.raises(ValueError, match="inf_demand_mean"):
        SyntheticConfig(inf_demand_mean=1.5)


def test_inference_burst_duplicates_days_20_to_40():
    t = synthetic(days=57, target_gpus=30, seed=1)
    b = inference_burst(t)
    win = (t.arrival >= 20 * DAY) & (t.arrival < 40 * DAY)
    n_dup = int(np.sum(win & (t.kind == INFERENCE)))
    assert len(b) == len(t) + n_dup
    assert b.counts()["training"] == t.counts()["training"]


@pytest.mark.parametrize("ratio", [1.0, 5.0])
def test_with_ratio(ratio):
    t = synthetic(days=10, target_gpus=100, seed=2)
    r = with_ratio(t, ratio)
    c = r.counts()
    assert c["inference"] / c["training"] == pytest.approx(ratio, rel=0.15)


@pytest.mark.parametrize("field,value", [
    ("days", float("inf")), ("days", "3"), ("target_gpus", float("nan")),
    ("inf_log_sigma", -1.0), ("train_log_sigma", float("inf")), ("inf_median_s", float("inf")),
    ("seed", -1), ("seed", 1.5), ("inference_to_training", float("inf"))])
def test_synthetic_config_refuses_bad_fields(field, value):
    # each was taken (an infinite log-sigma or median made a trace) or failed inside numpy
    # with a message that named no field
    with pytest.raises((TypeError, ValueError), match=f"{field} must be"):
        SyntheticConfig(**{field: value})


@pytest.mark.parametrize("start,end", [(float("nan"), 3.0), (5.0, 2.0), (-1.0, 3.0),
                                       (0.0, float("inf")), (3.0, 3.0)])
def test_inference_burst_refuses_bad_days(start, end):
    t = synthetic(days=1, target_gpus=5, seed=1)
    with pytest.raises(ValueError, match=r"start_day|end_day"):
        inference_burst(t, start, end)


@pytest.mark.parametrize("start,days", [(-1.0, 3.0), (0.0, 0.0), (0.0, -1.0),
                                        (float("nan"), 3.0), (0.0, float("nan"))])
def test_window_refuses_bad_days(start, days):
    t = synthetic(days=1, target_gpus=5, seed=1)
    with pytest.raises(ValueError, match=r"window (start_day|days) must be"):
        t.window(start, days)


def test_a_row_asking_for_too_many_gpus_is_malformed(tmp_path):
    # num_gpu 1e9 (or a PAI row of 1e9 instances) made a billion per-GPU tasks: the load
    # never ended; such a row is counted as malformed, the others are kept
    from harness.cluster.traces import MAX_TASKS_PER_ROW
    t = load_openb(write(tmp_path / "p.csv", OPENB_COLUMNS,
                         [openb_row("ok"), openb_row("huge", num_gpu="1e9"),
                          openb_row("max", num_gpu=MAX_TASKS_PER_ROW)]))
    reason = f"more than {MAX_TASKS_PER_ROW} per-GPU tasks"
    assert t.report.malformed == {reason: 1} and len(t) == 1 + MAX_TASKS_PER_ROW
    rows = [["j1", "worker", 1, "Terminated", 1000, 5000, 600, 4, 50, "V100"],
            ["j2", "worker", 10 ** 9, "Terminated", 1000, 5000, 600, 4, 50, "V100"],
            ["j3", "worker", 2, "Terminated", 1000, 5000, 600, 4, 1e12, "V100"]]
    p = load_pai(write(tmp_path / "pai.csv", PAI_COLUMNS, rows))
    assert p.report.malformed == {reason: 2} and len(p) == 1


@pytest.mark.parametrize("loader", [load_openb, load_pai, load_gpu_mix])
def test_a_file_that_is_not_text_is_refused_naming_it(tmp_path, loader):
    # the bare UnicodeDecodeError named a byte, not the file
    f = tmp_path / "binary.csv"
    f.write_bytes(b"name,cpu_milli\n\xff\xfe\x00\x01,1\n")
    with pytest.raises(ValueError, match=r"binary\.csv: not a UTF-8 text CSV file"):
        loader(f)
