"""The GPU plant's per-period training work and SM share from the iteration log, with
iterations that straddle period boundaries (the H100 knobs run read up to 130 % of the SMs:
whole iterations were credited to the period they end in)."""

import csv
import math
import types

import pytest

from harness.hil._accounting import TrainingAccount
from harness.hil._tail import CSVTail
from harness.hil.gpu_plant import GPUPlant
from harness.hil.training_emulator import LOG_FIELDS


def bare_plant(tmp_path):
    """A GPUPlant with its log tails set up and no process started (what _period reads)."""
    p = GPUPlant(workdir=str(tmp_path))
    p.workdir = tmp_path
    (tmp_path / "inference-1.csv").write_text("batch,t_unix,batch_size,gpu_ms,wall_ms\n")
    p._inf_tail = CSVTail(tmp_path / "inference-*.csv")
    p._train_tail = CSVTail(tmp_path / "training-*.csv")
    p._actuator = types.SimpleNamespace(mps_pct=100.0)
    p.mps_enabled, p.t0 = True, 0.0
    return p


def iterations(iter_s, sleep_s, until, frac=1.0):
    """Back-to-back iterations from t=0: (row, time the row is written)."""
    t, i, out = 0.0, 0, []
    while t < until:
        row = dict.fromkeys(LOG_FIELDS, "")
        row.update(iteration=i, t_unix=t, iter_s=iter_s, sleep_s=sleep_s, sm_fraction=frac)
        out.append((row, t + iter_s + sleep_s))
        t += iter_s + sleep_s
        i += 1
    return out


def run_periods(plant, tmp_path, rows, period_s, n):
    path = tmp_path / "training-7.csv"
    with open(path, "w", newline="") as f:
        csv.DictWriter(f, LOG_FIELDS).writeheader()
    written, res = 0, []
    for k in range(n):
        t0, t1 = k * period_s, (k + 1) * period_s
        with open(path, "a", newline="") as f:  # the rows the training has written by t1
            w = csv.DictWriter(f, LOG_FIELDS)
            while written < len(rows) and rows[written][1] <= t1:
                w.writerow(rows[written][0])
                written += 1
        res.append(plant._period(t0, t1))
    return res


@pytest.mark.parametrize("iter_s, sleep_s, period_s", [(0.6, 0.0, 1.0), (0.2, 0.0, 1.0),
                                                       (1.3, 0.0, 1.0), (0.2, 0.5, 1.0)])
def test_no_period_holds_more_training_than_its_length(tmp_path, iter_s, sleep_s, period_s):
    plant = bare_plant(tmp_path)
    n = 12
    res = run_periods(plant, tmp_path, iterations(iter_s, sleep_s, n * period_s + 5), period_s, n)
    duty = iter_s / (iter_s + sleep_s)
    for r in res[1:]:
        assert r.training_sm_share <= 1.0 + 1e-9, [x.training_sm_share for x in res]
        # one iteration's boundary error at most: the in-progress estimate
        assert r.training_sm_share == pytest.approx(duty, abs=0.21 if sleep_s else 1e-6)
    total = sum(r.training_iterations for r in res)
    assert total == pytest.approx(n * period_s / (iter_s + sleep_s), abs=1.0)
    assert all(math.isclose(r.iteration_s, iter_s) or math.isnan(r.iteration_s) for r in res)


def test_account_never_credits_an_iteration_twice():
    acc = TrainingAccount()
    row = {"_file": "a", "t_unix": 0.0, "iter_s": 1.5, "sleep_s": 0.0, "sm_fraction": 0.5}
    acc.add([{**row, "iter_s": 0.5}])  # [0, 0.5]; the next starts at 0.5 (estimated)
    p1 = acc.period(0.0, 1.0)
    assert p1.work_s == pytest.approx(1.0) and p1.estimated_s == pytest.approx(0.5)
    assert p1.sm_share(1.0) == pytest.approx(0.5)
    acc.add([{**row, "t_unix": 0.5}])  # the real one: [0.5, 2.0]
    p2 = acc.period(1.0, 2.0)
    assert p2.work_s == pytest.approx(1.0)  # its part after 1.0 only, plus the next estimate 0
    assert p2.iterations == pytest.approx(1.0 / 1.5)
    assert acc.period(2.0, 3.0, estimate=False).work_s == 0.0
    assert TrainingAccount().period(0, 1).sm_share(1.0) == 0.0
