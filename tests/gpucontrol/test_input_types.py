"""Wrong types and values at the library's boundary: a clear error naming the parameter, or a
documented conversion -- never a silent change of meaning or an internal error."""

import math

import numpy as np
import pytest

from gpucontrol import (
    ConfigurationError,
    GainEstimator,
    LatencyModelFamily,
    LinearLatencyModel,
    Measurement,
    OperatingPoint,
    ShareKnob,
    SleepKnob,
    TwoTierController,
    _validate,
    check_envelope,
    design_p,
    design_pi,
    is_stable,
    jury,
    robustness_sweep,
    stable_gain_range,
)

M = LinearLatencyModel(-12.0, 95.0)


@pytest.mark.parametrize("m", [Measurement(mean=95), Measurement(mean=np.float32(95.0)),
                               Measurement(mean=95.0, p99=np.int64(100), count=np.int32(10)),
                               Measurement(95, count=10.0)])
def test_measurements_of_any_real_type_are_acted_on(m):
    assert type(m.mean_ms) is float and type(m.count) is int
    act = TwoTierController(M, slo_ms=90.0).update(m)
    assert act.reason == "inner" and act.sleep_s > 0


@pytest.mark.parametrize("kw, field", [({"mean": "95"}, "mean"),
                                       ({"mean": 95.0, "p99": "x"}, "p99"),
                                       ({"mean": 95.0, "count": "a"}, "count"),
                                       ({"mean": 95.0, "count": 2.5}, "count"),
                                       ({"mean": 95.0, "iteration_s": "x"}, "iteration_s"),
                                       ({"mean": 95.0, "restarting": "no"}, "restarting")])
def test_a_measurement_field_that_is_not_a_number_is_a_type_error(kw, field):
    with pytest.raises(TypeError, match=field):
        Measurement(**kw)


@pytest.mark.parametrize("kw, err, rule", [
    ({"mean": 95.0, "count": -3}, ConfigurationError, r"count must be >= 0"),
    ({"mean": 95.0, "count": True}, TypeError, "count"),
    ({"mean": True}, TypeError, "mean must be a number"),
])
def test_what_cannot_be_a_measurement_is_refused_naming_the_field_and_rule(kw, err, rule):
    with pytest.raises(err, match=rule):
        Measurement(**kw)


@pytest.mark.parametrize("bad, err, words", [
    (True, TypeError, "got bool True"),
    (np.bool_(False), TypeError, "got bool"),
    ({"latency": 95.0}, TypeError, "unknown key.*'latency'"),
    ({"men": 95.0, "count": 4}, TypeError, "unknown key.*'men'"),
    ({"p99": 120.0, "count": 4}, TypeError, "needs the period's mean"),
    ({"mean": "95"}, TypeError, "mean must be a number"),
    ({"mean": 95.0, "count": -3}, ConfigurationError, "count must be >= 0"),
    ({"mean": 95.0, "mean_ms": 95.0}, TypeError, "mean or mean_ms, not both"),
])
def test_update_refuses_what_is_not_a_measurement(bad, err, words):
    ctl = TwoTierController(M, slo_ms=90.0, sleep=SleepKnob(initial_s=0.3))
    with pytest.raises(err, match=words):
        ctl.update(bad)
    assert ctl.period == 0 and ctl.sleep_s == 0.3  # refused before anything moved


@pytest.mark.parametrize("mapping, mean", [({"mean": 95}, 95.0), ({"mean_ms": 95.0}, 95.0),
                                           ({"mean": 95, "p99": 120, "count": 40,
                                             "restarting": False, "iteration_s": 0.4}, 95.0)])
def test_a_mapping_with_the_documented_keys_is_that_measurement(mapping, mean):
    a = TwoTierController(M, slo_ms=90.0).update(mapping)
    b = TwoTierController(M, slo_ms=90.0).update(Measurement(**mapping))
    assert a == b and a.reason == "inner"
    assert Measurement(**mapping).mean_ms == mean


def test_a_mapping_of_a_period_without_requests_holds():
    act = TwoTierController(M, slo_ms=90.0, sleep=SleepKnob(initial_s=0.3)).update({"count": 0})
    assert act.reason == "hold: no requests this period" and act.sleep_s == 0.3


def test_a_p99_below_the_mean_is_kept_because_the_nodes_histogram_produces_one():
    """The node's Prometheus source interpolates the p99 inside its bucket while the mean is
    exact: two batches of 49.9 ms read as p99 49.6 ms. Refusing that would stop the daemon on
    a real scrape; the p99 loop uses the p99 it is given."""
    from gpucontrol.node.prom_source import histogram_quantile

    p99 = 1e3 * histogram_quantile(0.99, [(0.01, 0.0), (0.05, 2.0), (math.inf, 2.0)])
    assert p99 < 49.9
    m = Measurement(mean=49.9, p99=p99, count=2)
    assert m.p99_ms == p99
    start = SleepKnob(initial_s=0.3)      # inside the range: the inner loop acts on the error
    act = TwoTierController(M, slo_ms=45.0, mode="p99", sleep=start).update(m)
    ref = TwoTierController(M, slo_ms=45.0, mode="p99", sleep=start).update(
        Measurement(49.9, 49.9, 2))
    assert act.reason == "inner"
    assert act.error_ms - ref.error_ms == pytest.approx(49.9 - p99)  # the p99 it was given


def test_nan_and_negative_readings_are_still_held_not_refused():
    ctl = TwoTierController(M, slo_ms=90.0)
    assert ctl.update(Measurement(mean=math.nan)).reason == "hold: unusable latency"
    assert ctl.update(Measurement(mean=-1)).reason == "hold: unusable latency"


@pytest.mark.parametrize("make, name", [
    (lambda: LinearLatencyModel("-12", 95.0), "gain"),
    (lambda: LinearLatencyModel(-12.0, True), "offset"),
    (lambda: TwoTierController(M, slo_ms="90"), "slo_ms"),
    (lambda: TwoTierController(M, 90.0, adaptive="yes"), "adaptive"),
    (lambda: TwoTierController(M, 90.0, sleep="fast"), "sleep"),
    (lambda: ShareKnob(change_s=-1.0), "change_s"),
    (lambda: ShareKnob(granularity_pct=0.0), "granularity_pct"),
    (lambda: TwoTierController(M, 90.0, inner_period_s=1e-9), "inner_period_s"),
    (lambda: TwoTierController(M, 90.0, inner_period_s=1e12), "inner_period_s"),
    (lambda: OperatingPoint(float("nan"), M), "mps_pct"),
    (lambda: OperatingPoint(80.0, M, batch=-1), "batch"),
    (lambda: LatencyModelFamily((OperatingPoint(80, M), OperatingPoint(80.0, M))), "points"),
    (lambda: jury(["a"]), "coefficients"),
])
def test_bad_values_are_refused_naming_the_parameter(make, name):
    with pytest.raises(ConfigurationError, match=name):
        make()


def test_numpy_bools_and_plain_bools_are_flags():
    assert TwoTierController(M, 90.0, adaptive=np.bool_(True)).adaptive is True
    assert TwoTierController(M, 90.0).plausible_max_ms == 50.0 * 90.0   # glitches above


@pytest.mark.parametrize("make, name", [
    (lambda: design_p(None), "model"),
    (lambda: design_pi("x"), "model"),
    (lambda: stable_gain_range("x", M), "design"),
    (lambda: stable_gain_range(design_p(M), "x"), "model"),
    (lambda: is_stable([]), "design"),
    (lambda: robustness_sweep(None), "design"),
    (lambda: check_envelope(design_p(M), model=3.0), "model"),
    (lambda: LatencyModelFamily((M,)), "points"),
    (lambda: OperatingPoint(80.0, "model"), "model"),
])
def test_wrong_types_are_type_errors_naming_the_argument(make, name):
    with pytest.raises(TypeError, match=name):
        make()


def test_a_flat_fit_gives_no_gain_and_no_model():
    from sysid import fit_static

    u = np.random.default_rng(0).uniform(0.0, 1.0, 50)
    flat = fit_static(u, np.full(50, 90.0))
    assert flat.gain == 0.0 and flat.ci95[0] == (0.0, 0.0) and flat.r2 == 1.0
    with pytest.raises(ConfigurationError, match="confidence interval"):
        LinearLatencyModel.from_fit(flat)
    noisy = fit_static(u, 90.0 + np.random.default_rng(1).normal(0.0, 1.0, 50))
    assert noisy.ci95[0][0] < 0.0 < noisy.ci95[0][1]
    with pytest.raises(ConfigurationError, match="confidence interval"):
        LinearLatencyModel.from_fit(noisy)
    good = fit_static(u, 95.0 - 12.0 * u + np.random.default_rng(2).normal(0.0, 1.0, 50))
    assert LinearLatencyModel.from_fit(good).gain == pytest.approx(-12.0, abs=2.0)


# ------------------------------------------------------------------ analysis edges
def test_a_slow_loops_settling_time_is_not_cut_at_the_horizon():
    p = design_p(M)
    slow = p.settling_periods(0.005)
    assert 700 < slow < 900  # (1 - 0.005)**k < 0.02: k = 781
    assert robustness_sweep(p, ratios=[0.005], horizon=1).rows[0].settling_periods == slow
    assert robustness_sweep(p, ratios=[0.1], horizon=1).rows[0].settling_periods == \
        p.settling_periods(0.1) == 38.0
    assert check_envelope(p, M, (0.005, 1.0)).worst_settling_periods == slow
    with pytest.raises(ConfigurationError, match="horizon"):
        robustness_sweep(p, horizon=0)
    with pytest.raises(TypeError, match="ratios"):
        robustness_sweep(p, ratios=1.0)


def test_an_envelope_is_a_pair_and_its_verdict_reads_right():
    p = design_p(M)
    with pytest.raises(ConfigurationError, match="pair"):
        check_envelope(p, M, (0.5, 1.0, 9.0))
    bad = check_envelope(p, M, (0.5, 2.5))
    assert not bad.stable and "UNSTABLE" in str(bad) and "not within" in str(bad)


def test_p99_mode_refuses_a_bare_number_instead_of_holding_forever():
    ctl = TwoTierController(M, 90.0, mode="p99")
    with pytest.raises(TypeError, match="p99"):
        ctl.update(120.0)
    assert ctl.update(Measurement(mean=80.0, p99=120.0, count=10)).sleep_s > 0


def test_a_pi_design_is_rescheduled_whole_at_a_new_level():
    fam = LatencyModelFamily((OperatingPoint(50, LinearLatencyModel(-6.0, 70.0)),
                              OperatingPoint(100, LinearLatencyModel(-12.0, 95.0))))
    pi = design_pi(fam.at(100), settling_periods=10, max_overshoot=0.3)
    ctl = TwoTierController(fam, 90.0, design=pi, outer="paper")
    ctl._schedule(50.0)
    assert ctl.inner.kp * -6.0 == pytest.approx(pi.kp * -12.0)
    assert ctl.inner.ki * -6.0 == pytest.approx(pi.ki * -12.0)


def test_a_family_of_several_batches_is_refused_and_unbatched_rows_are_preferred():
    b8, b32 = LinearLatencyModel(-8.0, 80.0), LinearLatencyModel(-40.0, 120.0)
    two = LatencyModelFamily((OperatingPoint(100, b8, batch=8), OperatingPoint(100, b32, batch=32)))
    with pytest.raises(ConfigurationError, match="batches 8, 32"):
        TwoTierController(two, 90.0)
    mixed = LatencyModelFamily((OperatingPoint(40, LinearLatencyModel(-4.0, 60.0)),
                                OperatingPoint(80, LinearLatencyModel(-8.0, 80.0)),
                                OperatingPoint(60, b32, batch=32)))
    assert mixed.at(60).gain == pytest.approx(-6.0)
    assert mixed.at(60, batch=32).gain == -40.0


def test_robustness_plot_shades_each_unstable_run_and_refuses_an_empty_table():
    import matplotlib

    matplotlib.use("Agg")
    from gpucontrol import robustness_plot

    p = design_p(M)
    fig = robustness_plot(robustness_sweep(p, ratios=[1e-14, 0.5, 1.0, 1.5, 2.5]))
    ax = fig.axes[0]
    spans = list(ax.patches)
    assert len(spans) == 2  # ratio ~0 and 2.5 unstable, the stable ones between unshaded
    labels = ax.get_legend_handles_labels()[1] + [t.get_text() for t in ax.get_legend().texts]
    assert "settling periods" in labels
    from gpucontrol.stability import RobustnessTable

    with pytest.raises(ConfigurationError, match="no rows"):
        robustness_plot(RobustnessTable(()))


@pytest.mark.parametrize("ratios", [[], (), np.array([]), iter([])])
def test_a_sweep_over_no_gain_ratios_is_refused_not_an_empty_table(ratios):
    with pytest.raises(ConfigurationError, match="ratios must hold at least one"):
        robustness_sweep(design_p(M), M, ratios)


@pytest.mark.parametrize("make, err, name", [
    (lambda: TwoTierController(M, 90.0, share=ShareKnob(levels_pct="50")), ConfigurationError,
     "levels_pct"),
    (lambda: TwoTierController(M, 90.0, design="0.5"), ConfigurationError, "design"),
    (lambda: TwoTierController(M, 90.0, adaptive=GainEstimator(-12.0, forgetting=5.0)),
     ConfigurationError, "forgetting"),
    (lambda: design_p(M).poles_at(float("nan")), ConfigurationError, "gain_ratio"),
    (lambda: is_stable(design_p(M), float("nan")), ConfigurationError, "gain_ratio"),
    (lambda: LatencyModelFamily((OperatingPoint(50, M),)).gain_ratios(3), TypeError, "nominal"),
    (lambda: LatencyModelFamily.from_json('[{"x": 1}]'), ConfigurationError, "mps_pct"),
    (lambda: LatencyModelFamily.from_json("{not json"), ConfigurationError, "family JSON"),
    (lambda: LatencyModelFamily(OperatingPoint(50, M)), TypeError, "points"),
    (lambda: LatencyModelFamily((OperatingPoint(50, M),)).at(float("nan")), ConfigurationError,
     "mps_pct"),
])
def test_more_bad_arguments_name_themselves(make, err, name):
    with pytest.raises(err, match=name):
        make()


@pytest.mark.parametrize("make", [
    lambda: ShareKnob(levels_pct=()),
    lambda: ShareKnob(levels_pct=[]),
    lambda: ShareKnob.green(()),
    lambda: ShareKnob(levels_pct=np.array([])),
])
def test_empty_share_levels_are_refused_not_widened_to_any_share(make):
    # an empty tuple of partitions used to become None: any MPS share, and for green() a
    # restart-free one, which the backend does not offer
    with pytest.raises(ConfigurationError, match="levels_pct must hold at least one share"):
        make()


def test_share_levels_take_a_numpy_array_as_green_does():
    levels = np.array([75.0, 25.0, 50.0])
    assert ShareKnob(levels_pct=levels).levels_pct == (25.0, 50.0, 75.0)
    assert ShareKnob.green(levels).levels_pct == (25.0, 50.0, 75.0)


@pytest.mark.parametrize("kwargs, message", [
    # a number or an array is not a yes or no: np.float64(1.0) was taken as True, an array
    # raised numpy's "truth value ... is ambiguous" naming nothing
    ({"adaptive": np.float64(1.0)}, r"adaptive must be True, False or a GainEstimator"),
    ({"adaptive": np.int64(0)}, r"adaptive must be True, False or a GainEstimator"),
    ({"adaptive": np.array([1, 2])}, r"adaptive must be True, False or a GainEstimator"),
    # an array of names: numpy's ambiguity error before
    ({"outer": np.array(["paper", "none"])}, r"outer must be one of 'throughput'"),
    ({"mode": np.array(["mean", "p99"])}, r"mode must be one of 'mean', 'p99'"),
    # the class instead of an instance: the message says an instance is taken
    ({"outer": GainEstimator}, r"or a ThroughputOuter or OuterMPSOptimizer instance"),
    # the argument is sleep=, and a pair is taken too
    ({"sleep": np.array([0.0, 1.0])}, r"sleep must be a SleepKnob or a \(low, high\) pair"),
    ({"sleep": (0.0, 5000.0)}, r"sleep must satisfy 0 <= low < high <= 3600"),
    ({"sleep": (0.0, math.nan)}, r"sleep\[1\] must be a finite number"),
    # a detune out of range names design=, the argument given
    ({"design": 3.0}, r"design \(the P loop's detune\) must be in \(0, 2\)"),
    ({"design": -0.5}, r"design \(the P loop's detune\) must be in \(0, 2\)"),
])
def test_controller_arguments_are_refused_naming_the_argument_and_its_range(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        TwoTierController(M, 90.0, **kwargs)


def test_controller_flags_and_names_still_taken():
    assert TwoTierController(M, 90.0, adaptive=np.bool_(False)).adaptive is False
    assert TwoTierController(M, 90.0, adaptive=None).adaptive is False
    assert TwoTierController(M, 90.0, outer=np.str_("paper")).outer_strategy == "paper"
    assert TwoTierController(M, 90.0, design=np.float64(0.5)).design.kp == pytest.approx(
        0.5 / M.gain)
    assert TwoTierController(M, 90.0, sleep=[0.0, 2.0]).sleep_knob.bounds_s == (0.0, 2.0)


BIG = 10 ** 400   # an int past the float range: float(BIG) raises OverflowError


@pytest.mark.parametrize("check, message", [
    (lambda v: _validate.finite("x", v), r"^x must be a finite number .*got an int of about "),
    (lambda v: _validate.positive("x", v), r"^x must be a finite number .*got an int of about "),
    (lambda v: _validate.in_range("x", v, 0.0, 1.0), r"^x must be in \[0, 1\], got an int of "),
    (lambda v: _validate.in_range("x", abs(v), 0.0, math.inf), r"^x must be a finite number"),
    (lambda v: _validate.in_range("x", -abs(v), 0.0, math.inf), r"^x must be in \[0, inf\]"),
    (lambda v: _validate.bounds("x", (0.0, v), 0.0, 1.0), r"^x\[1\] must be a finite number"),
], ids=["finite", "positive", "in_range", "in_range_to_inf", "below_range_to_inf", "bounds"])
@pytest.mark.parametrize("value", [BIG, -BIG, 10 ** 5000], ids=["1e400", "-1e400", "1e5000"])
def test_an_int_past_the_float_range_is_refused_naming_the_field(check, message, value):
    # these raised a bare OverflowError from float() ("int too large to convert to float"),
    # naming nothing; 10 ** 5000 would also fail in the message's repr (past 4300 digits)
    with pytest.raises(ConfigurationError, match=message):
        check(value)


def test_an_int_past_the_float_range_at_the_public_api():
    with pytest.raises(ConfigurationError, match=r"^period_s must be a finite number"):
        design_p(M, period_s=BIG)
    with pytest.raises(ConfigurationError, match=r"must be in \(0, 2\), got an int of about "
                                                 r"10\*\*400$"):
        design_p(M, detune=BIG)
    with pytest.raises(ConfigurationError, match=r"^gain must be"):
        LinearLatencyModel(gain=-BIG, offset=95.0)
    with pytest.raises(ConfigurationError, match=r"^x must be an integer >= 0, got an int of "
                                                 r"about -10\*\*5000$"):
        _validate.int_at_least("x", -10 ** 5000, 0)
    # ordinary ints still come back as floats, compared exactly at the ends
    assert _validate.in_range("x", 1, 0.0, 1.0) == 1.0
    assert type(_validate.in_range("x", np.int64(3), 0.0, math.inf)) is float
