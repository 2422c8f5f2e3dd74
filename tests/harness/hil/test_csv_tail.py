"""The training's per-iteration CSV log read while it is written and after the run: a line cut
mid-write is never read as data (a half number such as ``12.3`` of ``12.34`` read as the
iteration's time is a slower training), and where the cut is final it is said."""

import shutil
import warnings
from pathlib import Path

import pytest

from harness.hil._accounting import TrainingAccount
from harness.hil._tail import CSVTail, first_and_last_rows

ROOT = Path(__file__).resolve().parents[3]
RUN = ROOT / "docs/results/h200/after_fixes/daemon_slo22_sleep/runs/sleep"
HEADER = "iteration,t_unix,iter_s,sleep_s,sm_fraction\n"


def _work(rows):
    """Training work in [100, 102] s of these rows (iterations of 0.5 s from t = 100)."""
    acc = TrainingAccount()
    acc.add(rows)
    return acc.period(100.0, 102.0, estimate=False).work_s


def test_a_last_line_without_its_newline_waits(tmp_path):
    log = tmp_path / "training-7.csv"
    log.write_text(HEADER + "0,100.0,0.5,0,1\n1,100.5,0.5,0,1\n2,101.0,12.3")  # of 12.34...
    tail = CSVTail(tmp_path / "training-*.csv")
    rows = tail.read()
    assert [r["iteration"] for r in rows] == [0, 1] and tail.incomplete() == [str(log)]
    assert _work(rows) == pytest.approx(1.0)
    first, last = first_and_last_rows(log)
    assert (first["iteration"], last["iteration"]) == (0, 1)
    with log.open("a") as f:
        f.write("4,0,1\n")  # the writer goes on: the row is whole now, read once
    rows = tail.read()
    assert [(r["iteration"], r["iter_s"]) for r in rows] == [(2, 12.34)]
    assert tail.incomplete() == []


@pytest.mark.parametrize("cut", ["2,101.0,12.3\n", "2,101.0,12.33,101.5,0.5,0,1\n"])
def test_a_complete_line_with_another_field_count_is_not_data(tmp_path, cut):
    """A line cut off and then ended by a newline (fewer fields), or continued by the next
    row (more): skipped and counted, with one warning naming the file and the line."""
    log = tmp_path / "training-7.csv"
    log.write_text(HEADER + "0,100.0,0.5,0,1\n1,100.5,0.5,0,1\n" + cut + "3,101.5,0.5,0,1\n")
    tail = CSVTail(tmp_path / "training-*.csv")
    with pytest.warns(RuntimeWarning, match=r"training-7.csv: line 4 has \d fields, the header "
                                            r"5: not read as data"):
        rows = tail.read()
    assert [r["iteration"] for r in rows] == [0, 1, 3]
    assert tail.malformed == {str(log): 1}
    assert _work(rows) == pytest.approx(1.5)
    log.write_text(HEADER + "0,100.0,0.5,0,1\n" + cut)
    first, last = first_and_last_rows(log)
    assert first == last and last["iteration"] == 0


def test_a_finished_run_whose_training_log_ends_mid_line_says_so(tmp_path):
    """After the run the cut is final: read_periods counts the whole rows and says which file
    ends mid-line; the periods read as if the cut line were absent."""
    from harness.hil.daemon_run import read_periods

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    for d in (whole, cut):
        shutil.copytree(RUN, d)
    (log,) = cut.glob("training-*.csv")
    text = log.read_bytes()
    last = text.rstrip(b"\r\n").rfind(b"\n") + 1  # the start of the last row
    (whole / log.name).write_bytes(text[:last])
    log.write_bytes(text[:last] + text[last:][:len(text[last:]) // 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = read_periods("sleep", whole, 4.0)
    with pytest.warns(RuntimeWarning, match=f"{log.name}: the last line has no newline"):
        got = read_periods("sleep", cut, 4.0)
    assert got == expected
