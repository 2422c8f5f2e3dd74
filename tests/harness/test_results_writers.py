"""harness.results: atomic CSV/JSON/Markdown/PNG writers."""

import json
import math
import os

import pytest

from harness.results import (
    atomic_write_text,
    markdown_table,
    read_csv,
    save_figure,
    write_csv,
    write_json,
    write_markdown_table,
)


def test_csv_round_trip_with_nan_bool_and_union_of_columns(tmp_path):
    rows = [{"a": 1.5, "b": True, "c": "x"}, {"a": math.nan, "b": False, "d": 3}]
    p = write_csv(rows, tmp_path / "sub" / "t.csv")
    text = p.read_text()
    assert text.splitlines()[0] == "a,b,c,d"
    back = read_csv(p)
    assert back[0] == {"a": 1.5, "b": 1.0, "c": "x", "d": pytest.approx(math.nan, nan_ok=True)}
    assert math.isnan(back[1]["a"]) and back[1]["b"] == 0.0 and back[1]["d"] == 3.0


def test_csv_writes_numpy_scalars_as_plain_numbers(tmp_path):
    import numpy as np

    p = write_csv([{"a": np.float64(-2.0060521234), "b": np.float32(0.5), "c": np.int64(7)}],
                  tmp_path / "np.csv")
    assert p.read_text().splitlines()[1] == "-2.0060521234,0.5,7"
    assert read_csv(p) == [{"a": -2.0060521234, "b": 0.5, "c": 7.0}]


def test_csv_floats_keep_every_digit_and_any_nan_is_an_empty_cell(tmp_path):
    """No rounding to 6 decimals (4e-7 was written as 0.0, 1.23456789e-5 as 1.2e-05); a
    float32 is its own shortest text; a numpy float32 NaN is an empty cell like any NaN."""
    import numpy as np

    vals = {"tiny": 4e-7, "small": 1.23456789e-5, "big": 123456.789012345,
            "f32": np.float32(0.1), "nan32": np.float32(np.nan), "nan64": np.float64(np.nan),
            "flag": np.bool_(True)}
    p = write_csv([vals], tmp_path / "f.csv")
    assert p.read_text().splitlines()[1] == "4e-07,1.23456789e-05,123456.789012345,0.1,,,1"
    back = read_csv(p)[0]
    assert (back["tiny"], back["small"], back["big"]) == (4e-7, 1.23456789e-5,
                                                          123456.789012345)
    assert math.isnan(back["nan32"]) and math.isnan(back["nan64"])


def test_json_numpy_arrays_become_lists_with_nan_as_null(tmp_path):
    np = pytest.importorskip("numpy")
    p = write_json({"y": np.array([1, math.nan]), "m": np.eye(2, dtype=np.float32)},
                   tmp_path / "a.json")
    assert json.loads(p.read_text()) == {"y": [1.0, None], "m": [[1.0, 0.0], [0.0, 1.0]]}


def test_csv_selected_columns(tmp_path):
    p = write_csv([{"a": 1, "b": 2}], tmp_path / "t.csv", columns=["b"])
    assert p.read_text() == "b\n2\n"


def test_json_nan_becomes_null_and_numpy_scalars_work(tmp_path):
    np = pytest.importorskip("numpy")
    p = write_json({"x": math.nan, "y": np.float64(2.5), "z": [np.int64(3), math.inf]},
                   tmp_path / "m.json")
    assert json.loads(p.read_text()) == {"x": None, "y": 2.5, "z": [3, None]}


def test_markdown_table():
    t = markdown_table([{"n": "a", "v": 1.23456, "ok": True}], ["n", "v", "ok"], digits=2)
    assert t.splitlines()[2] == "| a | 1.23 | yes |"
    assert "| n | v | ok |" in t


def test_atomic_write_leaves_no_temp_files_and_replaces(tmp_path):
    p = tmp_path / "f.txt"
    atomic_write_text(p, "one")
    atomic_write_text(p, "two")
    assert p.read_text() == "two"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_failed_write_keeps_the_old_file(tmp_path):
    p = tmp_path / "f.csv"
    write_csv([{"a": 1}], p)

    class Boom:
        def items(self):
            raise RuntimeError("boom")

        def get(self, *a):
            raise RuntimeError("boom")

        def __iter__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_csv([Boom()], p)
    assert p.read_text() == "a\n1\n"
    assert os.listdir(tmp_path) == ["f.csv"]


def test_markdown_file_and_png(tmp_path):
    p = write_markdown_table([{"a": 1}], ["a"], tmp_path / "t.md", title="T")
    assert p.read_text().startswith("# T\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    png = save_figure(fig, tmp_path / "f.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_result_files_honour_the_umask(tmp_path):
    import os
    import stat

    from harness.results import atomic_write_text

    old = os.umask(0o027)
    try:
        p = atomic_write_text(tmp_path / "a.txt", "x")
        assert stat.S_IMODE(p.stat().st_mode) == 0o640
        os.umask(0o002)
        assert stat.S_IMODE(atomic_write_text(tmp_path / "b.txt", "x").stat().st_mode) == 0o664
        os.chmod(p, 0o600)  # an existing file keeps its mode
        assert stat.S_IMODE(atomic_write_text(p, "y").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_read_csv_names_a_row_with_the_wrong_field_count(tmp_path):
    import pytest

    from harness.results import read_csv

    f = tmp_path / "x.csv"
    f.write_text("a,b\n1,2\n3\n")
    with pytest.raises(ValueError, match=r"x.csv: line 3 has 1 fields, the header 2"):
        read_csv(f)
    f.write_text("a,b\n1,2,3\n")
    with pytest.raises(ValueError, match="line 2 has 3 fields"):
        read_csv(f)
