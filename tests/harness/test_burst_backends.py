"""The backend comparison through ``burst``: each controller on the plant with the backend it
drives (the baselines registry), the preset's suggested SLO, ``--backend``."""

import numpy as np
import pytest

from harness.cli import main
from harness.experiments.burst import burst
from harness.experiments.common import CONTROLLER_NAMES, resolve_names
from harness.sim import baselines as B


@pytest.fixture(scope="module")
def comparison():
    return burst(preset="h100", controllers="sleep-no-mps,two-tier,green", duration_s=120,
                 burst_s=(40.0, 80.0))


def test_each_controller_runs_the_backend_it_drives(comparison):
    res = comparison
    assert res.meta["slo_ms"] == 30.0                      # the h100 preset's suggested SLO
    assert res.meta["backends"] == {"Sleep, no MPS": "sleep",
                                    "GPUColo two-tier": "mps-restart",
                                    "Green context + MPS": "green-context+mps"}
    rows = {r["controller"]: r for r in res.summary}
    assert rows["Sleep, no MPS"]["training_vs_sleep"] == pytest.approx(1.0)
    for name in ("GPUColo two-tier", "Green context + MPS"):
        r = rows[name]
        assert r["training_vs_sleep"] == pytest.approx(
            r["training_throughput"] / rows["Sleep, no MPS"]["training_throughput"])
    green = [r["mps_pct"] for r in res.records if r["controller"] == "Green context + MPS"]
    assert set(green) <= {25.0, 50.0, 75.0, 100.0}         # the partitions are its levels
    assert {r["mps_pct"] for r in res.records if r["controller"] == "Sleep, no MPS"} == {100.0}
    for r in res.summary:                                  # all near the SLO by the end
        lat = np.array([x["latency_ms"] for x in res.records
                        if x["controller"] == r["controller"]][-5:])
        assert np.all(lat < 1.15 * 30.0), r["controller"]


def test_the_comparison_controllers_are_named_not_default():
    assert "Sleep, no MPS" not in CONTROLLER_NAMES and "Green context + MPS" not in \
        CONTROLLER_NAMES
    assert resolve_names("green, time-sliced") == ["Green context + MPS", "Sleep, no MPS"]
    entry = {b.name: b for b in B.BASELINES}
    assert entry["Green context + MPS"].backend == "green-context+mps"
    assert entry["Sleep, no MPS"].backend == "sleep" and entry["GPUColo two-tier"].backend is None


def test_backend_option_and_its_errors(tmp_path, capsys):
    res = burst(preset="h100", backend="green-context", controllers="default", duration_s=40,
                burst_s=(10.0, 30.0))
    assert res.summary[0]["backend"] == "green-context"
    # time-sliced: the latency cannot go below the time slice's share whatever the partition
    assert res.summary[0]["mean_latency_ms"] > 25.0
    with pytest.raises(ValueError, match="cannot switch to"):
        burst(plant="gpu", preset="h100", controllers="green", duration_s=8)
    assert main(["burst", "--plant", "gpu", "--backend", "sleep", "--duration", "8",
                 "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backend is for --plant sim" in err[0]
    with pytest.raises(SystemExit):
        main(["burst", "--backend", "mig", "--out", str(tmp_path)])
    assert "invalid choice: 'mig'" in capsys.readouterr().err


def test_the_cli_backend_names_are_the_plants():
    from harness.cli.experiments import BACKEND_NAMES
    from harness.sim.physics import BACKENDS

    assert tuple(BACKENDS) == BACKEND_NAMES
