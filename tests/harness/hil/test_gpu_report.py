"""README drafts for hardware result folders, built from results the simulated plant wrote
in the same layout (the report reads files only, so the plant behind them does not matter)."""

import json

import pytest

from harness.experiments.burst import burst
from harness.experiments.identify import identify
from harness.experiments.knobs import knobs
from harness.hil.readme import draft_readme, draft_readmes, main
from harness.results import write_csv

GPU = {"python": "3.12.3", "mps_control": None, "torch": "2.11.0",
       "gpu": {"name": "NVIDIA H100 80GB HBM3", "multiprocessor_count": 132,
               "driver": "580.159.04", "cuda_driver_api": 13000, "cuda_runtime": 13000,
               "cupy": "14.2.0"}}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    knobs(duration_s=30, change_s=(10, 20), out_dir=root / "knobs")
    identify(periods=20, mps_levels=(40, 100), out_dir=root / "identify")
    burst(duration_s=40, burst_s=(12, 28), controllers="gslice,ours", out_dir=root / "burst")
    mps = root / "mps_restart"
    write_csv([{"mode": m, "mps_pct": p, "latency_ms": 30 + p / 10, "p99_ms": 35 + p / 10,
                "training_sm_share": p / 250, "training_throughput": p / 20}
               for m in ("cold", "shadow") for p in (100, 60, 20)], mps / "levels.csv")
    write_csv([{"mode": "cold", "old_pct": 100, "new_pct": 60, "ok": True, "downtime_s": 3.1,
                "gap_s": 2.9, "total_s": 3.5},
               {"mode": "cold", "old_pct": 60, "new_pct": 20, "ok": True, "downtime_s": 3.3,
                "gap_s": 3.1, "total_s": 3.6},
               {"mode": "shadow", "old_pct": 100, "new_pct": 60, "ok": True, "downtime_s": 0.1,
                "gap_s": 0.21, "total_s": 3.4},
               {"mode": "shadow", "old_pct": 60, "new_pct": 20, "ok": False, "downtime_s": 9.0,
                "gap_s": 9.0, "total_s": 9.0}], mps / "restarts.csv")
    tests = root / "gpu_tests"
    tests.mkdir()
    (tests / "junit.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="3" failures="1" errors="0" skipped="1">'
        '<testcase name="test_a"/><testcase name="test_b"><failure message="assert 0.4 &gt;= 0.9'
        '">x</failure></testcase><testcase name="test_c"><skipped message="no MPS"/></testcase>'
        '</testsuite></testsuites>')
    for d in ("knobs", "identify", "burst", "mps_restart", "gpu_tests"):
        (root / d / "gpu.json").write_text(json.dumps(GPU))
    (root / "burst" / "COMMAND.txt").write_text(
        "# burst: Fig 8\n# started 2026-11-21 10:00:00 (UTC), 570.0 s, status timed out "
        "(limit 570 s)\n# git commit abc\n# exit codes: -\n"
        "python -m harness.cli burst --plant gpu --relative-slo\n")
    (root / "identify" / "README.md").write_text("written by a person\n")
    return root


def test_drafts_compare_with_paper_and_simulated_plant(results):
    files = draft_readmes(results)
    names = sorted(str(f.relative_to(results)) for f in files)
    assert names == ["burst/README.md", "gpu_tests/README.md", "identify/README.draft.md",
                     "knobs/README.md", "mps_restart/README.md"]
    # a README a person wrote is kept
    assert (results / "identify" / "README.md").read_text() == "written by a person\n"

    k = (results / "knobs" / "README.md").read_text()
    assert "NVIDIA H100 80GB HBM3" in k and "132 SMs" in k and "driver 580.159.04" in k
    assert "MPS was unavailable" in k  # gpu.json found no MPS control binary
    assert "| MPS | before |" in k and "sim ms" in k and "latency after/before, sim" in k
    # the paper's MPS run: 5.62 / 15.1 ms after/before
    assert f"{5.62 / 15.1:.3f}" in k

    m = (results / "mps_restart" / "README.md").read_text()
    assert "| cold | 2 | 3.000 |" in m       # median of 2.9 and 3.1
    assert "| shadow | 1 | 0.210 |" in m     # the failed restart is not counted
    assert "goal < 0.5 s: met" in m and "38.15 %" in m

    i = (results / "identify" / "README.draft.md").read_text()
    assert "sim gain ms/s" in i and "gain / sim" in i and "Shape: gain at MPS 100 %" in i

    b = (results / "burst" / "README.md").read_text()
    assert "status **timed out (limit 570 s)**" in b
    assert "python -m harness.cli burst --plant gpu --relative-slo" in b
    assert "1.515×" in b and "SLO: 90.0 ms" in b

    t = (results / "gpu_tests" / "README.md").read_text()
    assert "3 tests, 1 failures, 0 errors, 1 skipped" in t
    assert "- failure: `test_b` assert 0.4 >= 0.9" in t

    # a second run leaves the READMEs it wrote alone and refreshes the drafts
    again = draft_readmes(results)
    assert sorted(str(f.relative_to(results)) for f in again) == [
        "burst/README.draft.md", "gpu_tests/README.draft.md", "identify/README.draft.md",
        "knobs/README.draft.md", "mps_restart/README.draft.md"]


def test_bad_input(tmp_path, capsys):
    with pytest.raises(ValueError, match="root must be a results folder"):
        draft_readmes(tmp_path / "missing")
    with pytest.raises(ValueError, match="folder must be one of"):
        draft_readme(tmp_path / "elsewhere")
    assert main([str(tmp_path)]) == 1
    assert "no result folders" in capsys.readouterr().err
