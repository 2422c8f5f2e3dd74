import math

import control
import numpy as np
import pytest

from gpucontrol import LinearLatencyModel, design_p, design_pi
from gpucontrol.design import pole_spec

MODEL = LinearLatencyModel(gain=-12.0, offset=95.0)


def test_p_gain_is_inverse_model_gain():
    p = design_p(MODEL)
    assert p.kp == pytest.approx(1.0 / MODEL.gain, abs=1e-15)
    assert p.ki == 0.0


@pytest.mark.parametrize("g", [0.1, 0.5, 1.0, 1.5, 1.9, 2.5])
def test_p_closed_loop_pole_is_one_minus_g(g):
    p = design_p(MODEL)
    np.testing.assert_allclose(p.poles_at(g), [1.0 - g], atol=1e-12)
    cl = p.closed_loop(gain_ratio=g)
    np.testing.assert_allclose(control.poles(cl), [1.0 - g], atol=1e-10)


def test_deadbeat_at_nominal_gain():
    p = design_p(MODEL)
    info = control.step_info(p.closed_loop())
    assert info["SteadyStateValue"] == pytest.approx(1.0, abs=1e-12)
    assert info["Overshoot"] == pytest.approx(0.0, abs=1e-9)
    assert info["SettlingTime"] == pytest.approx(p.period_s, abs=1e-12)  # one period
    assert p.settling_periods() == 1.0


@pytest.mark.parametrize("detune", [0.3, 0.6, 1.0, 1.4])
def test_detuned_pole(detune):
    p = design_p(MODEL, detune=detune)
    np.testing.assert_allclose(p.poles, [1.0 - detune], atol=1e-12)


def test_closed_loop_matches_python_control_feedback_and_is_type_one():
    p = design_p(MODEL, detune=0.7)
    manual = control.feedback(p.controller_tf() * MODEL.to_tf(p.period_s), 1)
    t = np.arange(0, 30) * p.period_s
    _, y1 = control.step_response(p.closed_loop(), t)
    _, y2 = control.step_response(manual, t)
    np.testing.assert_allclose(y1, y2, atol=1e-12)
    assert control.dcgain(p.closed_loop()) == pytest.approx(1.0, abs=1e-12)


def test_delay_appears_in_characteristic_polynomial():
    p = design_p(MODEL)
    np.testing.assert_allclose(p.characteristic_polynomial(0.5, 1), [1.0, -1.0, 0.5], atol=1e-12)
    cl = p.closed_loop(0.5, delay_periods=1)
    np.testing.assert_allclose(sorted(np.abs(control.poles(cl))), [math.sqrt(0.5)] * 2, atol=1e-9)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_python_control_tools_work_on_designs():
    p = design_p(MODEL, detune=0.8)
    _, pm, *_ = control.stability_margins(p.loop_tf())
    # L(z) = 0.8/(z - 1): |L| = 1 at w = 2 asin(0.4); arg L = -(90 deg + w/2)
    w = 2 * math.asin(0.4)
    assert pm == pytest.approx(90.0 - math.degrees(w) / 2, abs=1e-6)
    # (python-control misses the phase crossover at the Nyquist frequency and reports an
    #  infinite gain margin; stable_gain_range gives the true upper ratio 2/0.8 = 2.5.)
    rl = control.root_locus_map(p.loop_tf(), gains=[0.5, 1.0])
    assert rl is not None


@pytest.mark.parametrize("settling,overshoot", [(10, 0.3), (4, 0.5), (25, 0.2)])
def test_pi_meets_its_spec(settling, overshoot):
    pi = design_pi(MODEL, settling_periods=settling, max_overshoot=overshoot)
    assert np.all(np.abs(pi.poles) < 1.0)
    info = control.step_info(pi.closed_loop(), SettlingTimeThreshold=0.02)
    assert info["Overshoot"] <= overshoot * 100 + 1e-6
    assert info["SteadyStateValue"] == pytest.approx(1.0, abs=1e-9)
    assert pi.settling_periods() <= settling


def test_pi_placed_poles_are_the_closed_loop_poles():
    pi = design_pi(MODEL, 10, 0.3)
    np.testing.assert_allclose(sorted(pi.poles, key=lambda z: z.imag),
                               sorted(pi.poles_placed, key=lambda z: z.imag), atol=1e-9)
    np.testing.assert_allclose(sorted(control.poles(pi.closed_loop()), key=lambda z: z.imag),
                               sorted(pi.poles_placed, key=lambda z: z.imag), atol=1e-8)


def test_pi_rejects_ramp_load_while_p_lags():
    """A type-2 loop (PI on the increment) tracks a ramp; P keeps a constant lag."""
    p, pi = design_p(MODEL), design_pi(MODEL, 10, 0.3)
    t = np.arange(0, 200) * p.period_s
    for design, lag in ((p, True), (pi, False)):
        err = control.feedback(1, design.loop_tf())  # e/r
        _, e = control.forced_response(err, t, np.arange(200, dtype=float))  # r(k) = k
        if lag:
            assert abs(e[-1]) > 0.5
        else:
            assert abs(e[-1]) < 1e-6


def test_pi_impossible_spec_is_refused():
    with pytest.raises(ValueError, match="max_overshoot"):
        design_pi(MODEL, settling_periods=4, max_overshoot=0.05)


@pytest.mark.parametrize("settling", [10, 30])
def test_pi_refusal_says_the_overshoot_the_settling_time_reaches(settling):
    """A type-2 loop always overshoots a step: max_overshoot 0.1 is out of reach for every
    settling time up to 30 periods; the error names the overshoot that is, and asking for it
    succeeds."""
    import re

    with pytest.raises(ValueError, match="type 2") as err:
        design_pi(MODEL, settling_periods=settling, max_overshoot=0.1)
    need = float(re.search(r"allow max_overshoot >= ([0-9.]+)", str(err.value)).group(1))
    assert 0.1 < need < 0.3
    pi = design_pi(MODEL, settling_periods=settling, max_overshoot=need)
    assert pi.settling_periods() <= settling
    assert control.step_info(pi.closed_loop())["Overshoot"] <= 100 * need + 1e-6


def test_poles_is_a_value_and_poles_at_takes_a_gain_ratio_and_delay():
    p = design_p(MODEL, detune=0.5)
    assert isinstance(p.poles, np.ndarray)
    np.testing.assert_allclose(p.poles, [0.5])
    np.testing.assert_allclose(p.poles_at(2.0), [0.0], atol=1e-12)
    np.testing.assert_allclose(sorted(np.abs(p.poles_at(1.0, delay_periods=1))),
                               [math.sqrt(0.5)] * 2)


@pytest.mark.parametrize("kwargs,field", [
    ({"detune": 0.0}, "detune"), ({"detune": 2.0}, "detune"), ({"period_s": -1}, "period_s")])
def test_bad_p_config(kwargs, field):
    with pytest.raises(ValueError, match=field):
        design_p(MODEL, **kwargs)


@pytest.mark.parametrize("detune,delay,limit", [(1.0, 1, 1.0), (1.5, 1, 1.0),
                                                (0.62, 2, 2 * math.sin(math.pi / 10))])
def test_a_p_design_unstable_under_its_own_delay_is_refused(detune, delay, limit):
    with pytest.raises(ValueError, match=rf"detune \(with delay_periods={delay}\) must be in "
                                         rf"\(0, {limit:g}\)"):
        design_p(MODEL, detune=detune, delay_periods=delay)
    ok = design_p(MODEL, detune=0.99 * limit, delay_periods=delay)   # just inside: stable
    assert max(abs(ok.poles_at(1.0))) < 1


def test_pole_spec_radius_and_real_pair():
    p1, p2 = pole_spec(10, 0.0)
    assert p1 == p2
    assert abs(p1) == pytest.approx(0.02 ** 0.1, abs=1e-12)
    q1, q2 = pole_spec(10, 0.1)
    assert q1 == q2.conjugate() and q1.imag > 0
    with pytest.raises(ValueError, match="settling_periods"):
        pole_spec(0.5, 0.1)


def test_step_sequence_matches_scipy_dstep():
    from scipy.signal import dlti, dstep

    from gpucontrol.design import step_sequence

    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 5))
        den = np.poly(rng.uniform(-0.95, 0.95, n))
        num = rng.normal(size=int(rng.integers(1, n + 2)))
        _, (y,) = dstep(dlti(num, den, dt=1.0), n=60)
        np.testing.assert_allclose(step_sequence(den, num, 60), y.ravel(), atol=1e-9)


def test_building_a_controller_imports_no_scipy_signal():
    import subprocess
    import sys

    code = ("import sys; from gpucontrol import LinearLatencyModel, TwoTierController; "
            "TwoTierController(LinearLatencyModel(-12.0, 95.0), 90.0); "
            "print([m for m in ('scipy.signal', 'control') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("delay,message", [
    (-1, r"^delay_periods must be an integer >= 0, got -1"),
    (math.nan, r"^delay_periods must be an integer >= 0, got nan"),
    (1.5, r"^delay_periods must be an integer >= 0, got 1.5"),
    ("1", r"^delay_periods must be an integer >= 0"),
    (101, r"^delay_periods must be an integer in \[0, 100\] .*got 101$"),
    (4000.0, r"^delay_periods must be an integer in \[0, 100\] .*got 4000.0$"),   # in ms?
    (1e300, r"^delay_periods must be an integer in \[0, 100\]"),
    (10 ** 400, r"^delay_periods must be an integer in \[0, 100\]"),
], ids=["-1", "nan", "1.5", "str", "101", "4000.0", "1e300", "10**400"])
def test_design_p_refuses_a_delay_outside_whole_periods_0_to_100(delay, message):
    # 101 to 1e300 were designed for (a delay of 1000 periods took 48 s to build a controller
    # on, its settling time simulated in Python), and 10 ** 400 failed with a bare
    # OverflowError ("int too large to convert to float")
    from gpucontrol import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        design_p(MODEL, delay_periods=delay)
    assert design_p(MODEL, delay_periods=100).delay_periods == 100
    assert design_p(MODEL, delay_periods=2.0).delay_periods == 2


@pytest.mark.parametrize("design", [design_p, design_pi])
def test_a_gain_whose_inverse_overflows_is_refused(design):
    # a subnormal gain passes LinearLatencyModel (< 0, finite) but 1 / gain is inf: design_p
    # returned kp = -inf, design_pi failed inside numpy with a bare LinAlgError
    from gpucontrol import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"model\.gain"):
        design(LinearLatencyModel(-1e-320, 95.0))


@pytest.mark.parametrize("kwargs,field,error", [
    ({"kp": math.nan}, "kp", ValueError), ({"kp": "0.1"}, "kp", ValueError),
    ({"ki": math.inf}, "ki", ValueError), ({"period_s": 0.0}, "period_s", ValueError),
    ({"delay_periods": -1}, "delay_periods", ValueError),
    ({"delay_periods": 0.5}, "delay_periods", ValueError),
    ({"model": {"gain": -12.0, "offset": 95.0}}, "model", TypeError)])
def test_a_design_built_directly_checks_its_fields(kwargs, field, error):
    # the design classes are public; built by hand with a NaN gain, a zero period or a dict
    # for the model they were accepted, and failed later inside numpy or python-control
    from gpucontrol import PDesign, PIDesign
    from gpucontrol.design import Design

    for cls in (Design, PDesign, PIDesign):
        with pytest.raises(error, match=field):
            cls(**{"model": MODEL, "kp": -1 / 12.0, **kwargs})
    d = Design(model=MODEL, kp=-1 / 12.0, ki=0, delay_periods=1.0)   # ints stay usable
    assert d.ki == 0.0 and d.delay_periods == 1 and isinstance(d.delay_periods, int)


def _delay_takers():
    """Every public entry where a measurement delay in periods enters, as ``delay -> result``
    on a P design (a PI design at 100 periods is unstable: stable_gain_range says so)."""
    from gpucontrol import (
        InnerSleepController,
        PDesign,
        PIDesign,
        check_envelope,
        is_stable,
        robustness_sweep,
        stable_gain_range,
    )
    from gpucontrol.design import Design, p_critical_gain

    p = design_p(MODEL)
    return {
        "Design": lambda d: Design(MODEL, kp=-1 / 12.0, delay_periods=d),
        "PDesign": lambda d: PDesign(MODEL, kp=-1 / 12.0, delay_periods=d),
        "PIDesign": lambda d: PIDesign(MODEL, kp=-0.05, ki=-0.01, delay_periods=d),
        "design_p": lambda d: design_p(MODEL, detune=0.01, delay_periods=d),
        "characteristic_polynomial": lambda d: p.characteristic_polynomial(1.0, d),
        "poles_at": lambda d: p.poles_at(1.0, d),
        "loop_tf": lambda d: p.loop_tf(1.0, d),
        "closed_loop": lambda d: p.closed_loop(1.0, d),
        "settling_periods": lambda d: p.settling_periods(0.5, d),
        "p_critical_gain": p_critical_gain,
        "is_stable": lambda d: is_stable(p, 1.0, d),
        "stable_gain_range": lambda d: stable_gain_range(p, None, d),
        "robustness_sweep": lambda d: robustness_sweep(p, None, [0.5, 1.0], d),
        "check_envelope": lambda d: check_envelope(p, delay_periods=d),
        "InnerSleepController": lambda d: InnerSleepController(-0.1, 90.0, delay_periods=d),
    }


@pytest.mark.parametrize("entry", list(_delay_takers()))
def test_every_entry_taking_a_delay_refuses_one_past_100_periods_at_once(entry):
    # only design_p had the limit: a Design built directly, the analyses given a delay,
    # p_critical_gain and InnerSleepController took 101 .. 10 ** 400 (building a degree
    # delay + 1 polynomial, a z**delay transfer function or a deque that long; 10 ** 400 failed
    # with a bare OverflowError or numpy's "array is too big", or was simply kept)
    import time

    from gpucontrol import ConfigurationError
    from gpucontrol.design import MAX_DELAY_PERIODS

    take = _delay_takers()[entry]
    for delay in (MAX_DELAY_PERIODS + 1, 4000.0, 10 ** 400):
        t0 = time.perf_counter()
        with pytest.raises(ConfigurationError, match=r"^delay_periods must be an integer in "
                                                     r"\[0, 100\] \(a measurement delay"):
            take(delay)
        assert time.perf_counter() - t0 < 0.5
    for delay in (0, 1, 2.0, MAX_DELAY_PERIODS):   # still taken
        take(delay)
