"""IdData: validation, split, offsets, CSV round trip."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysid import IdData, _checks

finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=40)
@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=60),
       st.floats(0.01, 100.0), st.integers(0, 200))
def test_csv_round_trip_is_exact(tmp_path_factory, rows, period, mps):
    u, y = zip(*rows)
    d = IdData(u, y, period_s=period, meta={"mps_pct": mps, "plant": "sim"})
    path = tmp_path_factory.mktemp("csv") / "d.csv"
    d.to_csv(path)
    back = IdData.from_csv(path)
    np.testing.assert_array_equal(back.u, d.u)
    np.testing.assert_array_equal(back.y, d.y)
    assert back.period_s == d.period_s
    assert back.meta == d.meta


def test_from_plain_csv_with_named_columns(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("period,sleep_s,latency_ms\n0,0.1,9.0\n1,0.5,7.0\n")
    d = IdData.from_csv(p, u="sleep_s", y="latency_ms", period_s=4.0)
    assert d.u.tolist() == [0.1, 0.5] and d.y.tolist() == [9.0, 7.0]
    with pytest.raises(ValueError, match="period_s is not recorded"):
        IdData.from_csv(p, u="sleep_s", y="latency_ms")
    with pytest.raises(ValueError, match="no column 'nope'"):
        IdData.from_csv(p, u="nope", y="latency_ms", period_s=4.0)


@pytest.mark.parametrize("text, message", [
    # a data row longer than the header: the message joined a None key and raised TypeError
    ("a,latency_ms\n0.1,9.0,extra\n0.5,7.0\n",
     r"x\.csv: no column 'sleep_s' \(columns: 'a', 'latency_ms'\)$"),
    # a header without data rows said only "no data rows"
    ("a,latency_ms\n", r"no column 'sleep_s' \(columns: 'a', 'latency_ms'\)$"),
    # a stray space in the header shows in the quoted names
    ("sleep_s, latency_ms\n0.1,9.0\n",
     r"no column 'latency_ms' \(columns: 'sleep_s', ' latency_ms'\)$"),
    # a row short of the column: "float() argument must be a string or a real number"
    ("sleep_s,latency_ms\n0.1,9.0\n0.5\n", r"data row 2 has no value in column 'latency_ms'$"),
    ("sleep_s,latency_ms\n0.1,9.0\n0.5,abc\n",
     r"non-numeric value in column 'latency_ms', data row 2 \(could not convert"),
], ids=["row-longer-than-header", "header-only", "space-in-header", "short-row", "non-numeric"])
def test_from_csv_names_the_missing_column_and_the_columns_there_are(tmp_path, text, message):
    p = tmp_path / "x.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=message):
        IdData.from_csv(p, u="sleep_s", y="latency_ms", period_s=4.0)


@pytest.mark.parametrize("text, message", [
    # a duplicated name kept the last of the two columns, silently
    ("sleep_s,latency_ms,sleep_s\n0.1,9.0,0.7\n",
     r"x\.csv: column 'sleep_s' appears more than once in the header \(columns: 'sleep_s', "
     r"'latency_ms', 'sleep_s'\)$"),
    ("note,sleep_s,latency_ms,note\n,0.1,9.0,\n", r"column 'note' appears more than once"),
    # fields past the header were dropped: which column a value belongs to is unknown
    ("sleep_s,latency_ms\n0.1,9.0\n# a comment\n\n0.5,7.0,3.0\n",
     r"x\.csv: data row 2 has 3 fields, more than the header's 2$"),
    ("sleep_s,latency_ms\n0.1,9.0,,\n", r"data row 1 has 4 fields, more than the header's 2$"),
], ids=["duplicated-u", "duplicated-other", "long-row", "trailing-commas"])
def test_from_csv_refuses_an_ambiguous_table_naming_the_column_or_row(tmp_path, text, message):
    p = tmp_path / "x.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=message):
        IdData.from_csv(p, u="sleep_s", y="latency_ms", period_s=4.0)


def test_from_csv_skips_a_utf8_byte_order_mark(tmp_path):
    # a spreadsheet's UTF-8 export starts with a BOM: it stayed in the first column's name
    # ("no column 'sleep_s' (columns: '\ufeffsleep_s', ...)") and hid the # sysid.IdData line
    p = tmp_path / "x.csv"
    p.write_bytes(b"\xef\xbb\xbfsleep_s,latency_ms\n0.1,9.0\n0.5,7.0\n")
    d = IdData.from_csv(p, u="sleep_s", y="latency_ms", period_s=4.0)
    assert d.u.tolist() == [0.1, 0.5] and d.y.tolist() == [9.0, 7.0]
    rec = IdData([0.1, 0.5, 0.2], [9.0, 7.0, 8.0], period_s=2.5, meta={"mps_pct": 40})
    p.write_bytes(b"\xef\xbb\xbf" + rec.to_csv().encode("utf-8"))
    back = IdData.from_csv(p)
    assert back.period_s == 2.5 and back.meta == {"mps_pct": 40}
    assert back.u.tolist() == rec.u.tolist() and back.y.tolist() == rec.y.tolist()


def test_split_keeps_time_order():
    d = IdData(np.arange(10.0), np.arange(10.0) * 2, period_s=2.0)
    a, b = d.split(0.7)
    assert a.u.tolist() == list(range(7)) and b.u.tolist() == [7.0, 8.0, 9.0]
    assert a.period_s == b.period_s == 2.0
    with pytest.raises(ValueError, match="fraction_train must be in"):
        d.split(1.0)
    with pytest.raises(ValueError, match="too short to split"):
        IdData([1.0], [2.0]).split(0.5)


@pytest.mark.parametrize("method", ["mean", "first"])
def test_remove_offset(method):
    d = IdData([1.0, 2.0, 3.0], [10.0, 20.0, 60.0])
    c, (u0, y0) = d.remove_offset(method)
    np.testing.assert_allclose(c.u + u0, d.u, atol=0)
    np.testing.assert_allclose(c.y + y0, d.y, atol=0)
    assert c.meta["u_offset"] == u0 and c.meta["y_offset"] == y0
    if method == "mean":
        assert math.isclose(float(c.y.mean()), 0.0, abs_tol=1e-12)


def test_arrays_are_read_only_copies():
    u = np.array([1.0, 2.0])
    d = IdData(u, [3.0, 4.0])
    u[0] = 99.0
    assert d.u[0] == 1.0
    with pytest.raises(ValueError):
        d.u[0] = 5.0


@pytest.mark.parametrize("u, y, msg", [
    ([1.0, 2.0], [1.0], "mismatched lengths: 2 != 1"),
    ([1.0, float("nan")], [1.0, 2.0], "u contains NaN"),
    ([1.0, 2.0], [1.0, float("inf")], "y contains NaN or infinite"),
    ([], [], "u is too short"),
    ([[1.0, 2.0], [3.0, 4.0]], [1.0, 2.0], "one-dimensional"),
    (["a"], [1.0], "u must be a sequence of numbers"),
])
def test_bad_records(u, y, msg):
    with pytest.raises(ValueError, match=msg):
        IdData(u, y)


def test_bad_period_and_slices():
    with pytest.raises(ValueError, match="period_s must be > 0"):
        IdData([1.0], [1.0], period_s=0)
    with pytest.raises(ValueError, match="contiguous slices"):
        IdData([1.0, 2.0], [1.0, 2.0])[::2]


@pytest.mark.parametrize("header, msg", [
    ('# sysid.IdData {"period_s": 4.0, "meta": [1]}', "header must be a JSON object"),
    ('# sysid.IdData [4.0]', "header must be a JSON object"),
    ('# sysid.IdData {"period_s": 4.0,', "header line is not valid JSON"),
])
def test_from_csv_bad_header_names_the_file(tmp_path, header, msg):
    p = tmp_path / "bad.csv"
    p.write_text(header + "\nk,t,u,y\n0,0,0.1,90\n1,4,0.2,89\n", encoding="utf-8")
    with pytest.raises(ValueError, match=msg) as info:
        IdData.from_csv(p)
    assert "bad.csv" in str(info.value)


def test_from_csv_meta_must_be_a_mapping(tmp_path):
    p = tmp_path / "x.csv"
    IdData([0.1, 0.2], [90.0, 89.0], period_s=4.0).to_csv(p)
    with pytest.raises(ValueError, match="meta must be a mapping"):
        IdData.from_csv(p, meta=[1])


@pytest.mark.parametrize("u", [["1", "2"], [True, False]])
def test_non_numeric_records_are_refused(u):
    with pytest.raises(ValueError, match="u must be a sequence of numbers, got"):
        IdData(u, [1.0, 2.0])


@pytest.mark.parametrize("make, message", [
    (lambda v: IdData([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], period_s=v),
     r"^period_s must be a finite number .*got an int of about 10\*\*400$"),
    (lambda v: IdData([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).split(v),
     r"^fraction_train must be in \(0, 1\), got an int of about 10\*\*400$"),
    (lambda v: IdData([1.0, v, 3.0], [1.0, 2.0, 3.0]),
     r"^u contains a number past the float range"),
    (lambda v: _checks.finite("x", -v), r"^x must be a finite number .*about -10\*\*400$"),
    (lambda v: _checks.in_range("x", v, 0.0, math.inf), r"^x must be a finite number"),
    (lambda v: _checks.low_high(0.0, v), r"^high must be a finite number"),
    (lambda v: _checks.int_at_least("x", -v ** 13, 0), r"^x must be an integer >= 0, got an int "
                                                        r"of about -10\*\*5200$"),
    (lambda v: _checks.random_seed("seed", -v ** 13), r"^seed must be None or an integer >= 0"),
], ids=["positive", "in_range", "vector", "finite", "in_range_to_inf", "low_high",
        "int_at_least", "random_seed"])
def test_an_int_past_the_float_range_is_refused_naming_the_argument(make, message):
    # these raised a bare OverflowError from float() ("int too large to convert to float"),
    # naming nothing; past 4300 digits the message's repr itself raised ValueError
    with pytest.raises(ValueError, match=message) as caught:
        make(10 ** 400)
    assert type(caught.value) is ValueError
