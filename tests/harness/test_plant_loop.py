"""harness.sim.protocol: the Plant protocol, PeriodResult, Scenario and run_loop."""

import math

import numpy as np
import pytest

from gpucontrol import LinearLatencyModel, ShareKnob, TwoTierController
from gpucontrol.controllers import as_measurement
from harness.sim.baselines import FixedAllocation
from harness.sim.protocol import (
    LoadEvent,
    PeriodResult,
    PlantActuation,
    Records,
    Scenario,
    free_resize_of,
    inference_mps_of,
    run_loop,
)
from harness.sim.simulated import SimulatedColocation

COLUMNS = {"period", "t_start_s", "t_end_s", "controller", "slo_ms", "batch", "sleep_s",
           "mps_pct", "inference_mps_pct", "latency_ms", "p99_ms", "count",
           "inference_throughput", "training_throughput", "training_iterations",
           "training_sm_share", "restarting", "inference_restarting", "next_sleep_s",
           "next_mps_pct", "mps_changed", "saturated", "gain_estimate", "reason"}


def test_run_loop_records_one_row_per_period():
    ctl = FixedAllocation(0.5, 80.0, slo_ms=90.0)
    rec = run_loop(ctl, SimulatedColocation.preset("fig8"), 12)
    assert isinstance(rec, Records) and isinstance(rec, list) and len(rec) == 12
    assert set(rec.columns()) >= COLUMNS
    assert rec.col("period").tolist() == list(range(12))
    assert np.allclose(rec.col("t_end_s"), 4.0 * np.arange(1, 13))
    assert set(rec.col("sleep_s")) == {0.5} and set(rec.col("mps_pct")) == {80.0}
    assert rec[0]["controller"] == "Open" and rec[0]["slo_ms"] == 90.0
    assert np.all(rec.col("inference_throughput") > 0)


def test_records_are_pandas_friendly():
    pd = pytest.importorskip("pandas")
    rec = run_loop(FixedAllocation(0.5, 80.0), SimulatedColocation.preset("fig8"), 3)
    df = pd.DataFrame(rec)
    assert len(df) == 3 and "latency_ms" in df


def test_closed_loop_reaches_the_slo():
    ctl = TwoTierController(LinearLatencyModel(-19.0, 102.0), 90.0, outer="none",
                            share=ShareKnob(initial_pct=80.0))
    rec = run_loop(ctl, SimulatedColocation.preset("fig8", seed=1), 30)
    assert np.mean(rec.col("latency_ms")[-10:]) == pytest.approx(90.0, abs=1.0)
    assert rec[-1]["controller"] == "TwoTierController"


def test_scenario_events_apply_at_the_first_boundary_at_or_after_their_time():
    sc = Scenario.of(LoadEvent.at(0, batch=105), LoadEvent.at(10, batch=115),
                     LoadEvent.at(16, batch=105))
    rec = run_loop(FixedAllocation(0.5, 80.0), SimulatedColocation.preset("fig8"), 6, sc)
    # periods start at 0, 4, 8, 12, 16, 20: 115 from 12 s, back at 16 s
    assert rec.col("batch").tolist() == [105, 105, 105, 115, 105, 105]
    assert sc.load_at(12.0) == {"batch": 115}
    assert [p[:2] for p in sc.phases(24)] == [(0.0, 10.0), (10.0, 16.0), (16.0, 24.0)]


def test_period_length_defaults_to_the_controller_and_can_be_set():
    ctl = FixedAllocation(0.5, 80.0, inner_period_s=2.0)
    assert run_loop(ctl, SimulatedColocation.preset("fig8"), 2)[-1]["t_end_s"] == 4.0
    assert run_loop(ctl, SimulatedColocation.preset("fig8"), 2,
                    period_s=1.0)[-1]["t_end_s"] == 2.0


def test_extra_columns_label_and_progress_hook():
    seen = []
    rec = run_loop(FixedAllocation(0.5, 80.0), SimulatedColocation.preset("fig8"), 3,
                   label="mine", extra={"slo_ms": 85.0, "tag": "x"}, on_period=seen.append)
    assert seen == [0, 1, 2]
    assert rec[0]["controller"] == "mine" and rec[0]["slo_ms"] == 85.0 and rec[0]["tag"] == "x"


@pytest.mark.parametrize("periods", [0, -1, 2.5])
def test_run_loop_rejects_bad_period_counts(periods):
    with pytest.raises(ValueError, match="periods"):
        run_loop(FixedAllocation(), SimulatedColocation.preset("fig8"), periods)


def test_period_result_is_a_controller_measurement():
    r = PeriodResult(mean_ms=91.0, p99_ms=99.0, count=40, period_s=4.0, inference_images=400,
                     training_iterations=2.0, restarting=True)
    m = as_measurement(r)
    assert (m.mean_ms, m.p99_ms, m.count, m.restarting) == (91.0, 99.0, 40, True)
    assert r.inference_throughput == 100.0 and r.training_throughput == 0.5


def test_controller_holds_while_training_restarts():
    ctl = TwoTierController(LinearLatencyModel(-19.0, 102.0), 90.0)
    r = PeriodResult(mean_ms=80.0, p99_ms=85.0, count=40, restarting=True)
    act = ctl.update(r)
    assert "restarting" in act.reason and act.sleep_s == ctl.initial_actuation().sleep_s


def test_plant_actuation_extras():
    a = PlantActuation(0.1, 30.0, inference_mps_pct=70.0, free_resize=True)
    assert inference_mps_of(a) == 70.0 and free_resize_of(a)
    from gpucontrol import Actuation

    b = Actuation(0.1, 30.0)
    assert inference_mps_of(b) is None and not free_resize_of(b)


def test_load_event_validation():
    with pytest.raises(ValueError, match="time_s"):
        LoadEvent.at(-1, batch=3)
    with pytest.raises(ValueError, match="at least one change"):
        LoadEvent.at(1)


def test_records_col_handles_missing_and_bool():
    rec = Records([{"a": True, "b": 1.5}, {"a": False}])
    assert rec.col("a").tolist() == [1.0, 0.0]
    assert math.isnan(rec.col("b")[1])
    assert len(rec.where(lambda r: r["a"])) == 1


def test_records_col_of_an_unknown_column_names_the_columns():
    """It returned an array of NaN, hiding a misspelt column name."""
    rec = Records([{"a": 1.0, "b": 2.0}, {"a": 3.0}])
    with pytest.raises(KeyError, match="no column 'nope'; the records have a, b"):
        rec.col("nope")
    assert Records().col("nope").size == 0  # no rows, nothing to name


@pytest.mark.parametrize("kw, error, text", [
    ({"periods": math.nan}, ValueError, "periods must be an integer in [1, inf), got nan"),
    ({"periods": 2.5}, ValueError, "periods must be an integer in [1, inf), got 2.5"),
    ({"periods": 0}, ValueError, "periods must be an integer in [1, inf), got 0"),
    ({"periods": "3"}, TypeError, "periods must be an integer in [1, inf), got '3'"),
    ({"periods": 3, "period_s": -4.0}, ValueError,
     "period_s must be a number in (0, inf), got -4.0"),
])
def test_run_loop_refuses_bad_periods(kw, error, text):
    """run_loop(periods=nan) said "cannot convert float NaN to integer"."""
    ctl = FixedAllocation(0.1, 80.0)
    with pytest.raises(error) as exc:
        run_loop(ctl, SimulatedColocation.preset("fig8"), **kw)
    assert str(exc.value) == text
