import json
import math

import control
import numpy as np
import pytest

from gpucontrol import LatencyModelFamily, LinearLatencyModel, OperatingPoint
from gpucontrol.errors import ConfigurationError
from gpucontrol.models import duty_form


def test_predict_and_inverse():
    m = LinearLatencyModel(gain=-12.0, offset=95.0)
    assert m.predict(0.0) == 95.0
    assert m.predict(0.5) == pytest.approx(89.0, abs=1e-12)
    assert m.sleep_for(m.predict(0.37)) == pytest.approx(0.37, abs=1e-12)


def test_incremental_form_matches_static_model():
    m = LinearLatencyModel(-7.5, 60.0)
    s = np.array([0.0, 0.3, 0.1, 0.9, 0.9, 0.2])
    l = m.predict(s[0])
    for k in range(len(s) - 1):
        l = m.step(l, s[k + 1] - s[k])
        assert l == pytest.approx(m.predict(s[k + 1]), abs=1e-12)


def test_to_tf_is_gain_over_z_minus_one():
    tf = LinearLatencyModel(-12.0, 95.0).to_tf(4.0)
    assert tf.dt == 4.0
    np.testing.assert_allclose(tf.num[0][0], [-12.0], atol=1e-12)
    np.testing.assert_allclose(tf.den[0][0], [1.0, -1.0], atol=1e-12)
    np.testing.assert_allclose(control.poles(tf), [1.0], atol=1e-12)


@pytest.mark.parametrize("gain", [0.0, 1.0, math.nan, math.inf, "x"])
def test_bad_gain_names_field(gain):
    with pytest.raises(ValueError, match="gain"):
        LinearLatencyModel(gain, 10.0)


def test_bad_offset_and_period():
    with pytest.raises(ValueError, match="offset"):
        LinearLatencyModel(-1.0, math.nan)
    with pytest.raises(ValueError, match="period_s"):
        LinearLatencyModel(-1.0, 1.0).to_tf(0.0)


def test_from_fit_duck_typing_and_dict_round_trip():
    class Fit:
        gain, offset, r2 = -3.0, 40.0, 0.9

    m = LinearLatencyModel.from_fit(Fit())
    assert (m.gain, m.offset) == (-3.0, 40.0)
    assert LinearLatencyModel.from_dict(m.to_dict()) == m
    with pytest.raises(ValueError, match="gain"):
        LinearLatencyModel.from_fit(object())
    with pytest.raises(ValueError, match="offset"):
        LinearLatencyModel.from_dict({"gain": -1.0})


def family():
    return LatencyModelFamily.from_points([
        OperatingPoint(80, LinearLatencyModel(-14.0, 90.0)),
        OperatingPoint(20, LinearLatencyModel(-2.0, 60.0)),
        OperatingPoint(50, LinearLatencyModel(-8.0, 75.0), batch=None),
    ])


def test_family_interpolates_and_clamps():
    fam = family()
    assert fam.at(35).gain == pytest.approx(-5.0, abs=1e-12)
    assert fam.at(35).offset == pytest.approx(67.5, abs=1e-12)
    assert fam.at(5) == fam.points[0].model
    assert fam.at(100) == fam.points[-1].model
    assert fam.mps_gain(60, sleep_s=0.0) == pytest.approx(0.5, abs=1e-12)
    assert fam.gain_ratios(LinearLatencyModel(-8.0, 75.0)) == pytest.approx((0.25, 1.75))


def test_family_by_batch_and_json():
    fam = LatencyModelFamily.from_points([
        OperatingPoint(50, LinearLatencyModel(-8.0, 75.0), batch=105),
        OperatingPoint(50, LinearLatencyModel(-9.0, 85.0), batch=115),
    ])
    assert fam.at(50, batch=113).offset == 85.0
    assert fam.at(50, batch=100).offset == 75.0
    back = LatencyModelFamily.from_json(fam.to_json())
    assert back == fam
    assert json.loads(fam.to_json())["points"][0]["batch"] == 105
    # the bare list of rows (the form before iteration times and the span) still reads
    assert LatencyModelFamily.from_json(json.dumps(fam.to_document()["points"])) == fam


def test_family_iteration_time_is_a_power_law_between_levels():
    fam = LatencyModelFamily.from_points([
        OperatingPoint(25, LinearLatencyModel(-2.0, 60.0), iteration_s=2.0),
        OperatingPoint(100, LinearLatencyModel(-14.0, 90.0), iteration_s=0.5),
        OperatingPoint(50, LinearLatencyModel(-8.0, 75.0))], sleep_span_s=(0.0, 1.0))
    assert fam.iteration_s(50) == pytest.approx(1.0, rel=1e-12)   # t ~ m**-1 through 25, 100
    assert fam.iteration_s(12.5) == pytest.approx(4.0, rel=1e-12)  # the end segment continued
    back = LatencyModelFamily.from_json(fam.to_json())
    assert back == fam and back.sleep_span_s == (0.0, 1.0)
    assert math.isnan(family().iteration_s(50))     # nothing measured
    with pytest.raises(ValueError, match="iteration_s"):
        OperatingPoint(50, LinearLatencyModel(-1.0, 1.0), iteration_s=0.0)
    with pytest.raises(ValueError, match="sleep_span_s"):
        LatencyModelFamily(fam.points, sleep_span_s=(1.0, 0.5))


def test_duty_form_inverts_the_secant_of_the_duty_law():
    c, A, t, span = 60.0, 40.0, 0.3, (0.0, 1.0)
    s = np.linspace(*span, 401)
    gain, offset = np.polyfit(s, c + A * t / (t + s), 1)
    c1, A1 = duty_form(LinearLatencyModel(gain, offset), t, span)
    assert (c1, A1) == pytest.approx((c, A), rel=2e-3)


def test_family_validation():
    with pytest.raises(ValueError, match="points"):
        LatencyModelFamily(())
    with pytest.raises(ValueError, match="mps_pct"):
        LatencyModelFamily.from_points([OperatingPoint(0, LinearLatencyModel(-1.0, 1.0))])


def test_fit_error_is_kept_through_the_model_file_and_checked():
    fam = LatencyModelFamily.from_points([
        OperatingPoint(50, LinearLatencyModel(-8.0, 75.0), fit_error=0.04),
        OperatingPoint(100, LinearLatencyModel(-20.0, 95.0))])
    doc = fam.to_document()
    assert doc["points"][0]["fit_error"] == 0.04 and "fit_error" not in doc["points"][1]
    assert LatencyModelFamily.from_json(fam.to_json()) == fam
    with pytest.raises(ConfigurationError, match="fit_error"):
        OperatingPoint(50, LinearLatencyModel(-8.0, 75.0), fit_error=-0.1)


def test_a_bent_law_is_kept_through_the_model_file_and_read_at_its_level_only():
    fam = LatencyModelFamily.from_points([
        OperatingPoint(50, LinearLatencyModel(-8.0, 75.0)),
        OperatingPoint(100, LinearLatencyModel(-20.0, 95.0), bent_law=(20.0, 1.0, 0.9))])
    doc = fam.to_document()
    assert doc["points"][1]["bent_law"] == [20.0, 1.0, 0.9] and "bent_law" not in doc["points"][0]
    assert LatencyModelFamily.from_json(fam.to_json()) == fam
    assert fam.bent_law_at(100) == (20.0, 1.0, 0.9)
    assert fam.bent_law_at(50) is None and fam.bent_law_at(99) is None
    for bad, field in (((0.0, 1.0, 0.5), "bent_law\\[0\\]"), ((20.0, -1.0, 0.5), "bent_law\\[1\\]"),
                       ((20.0, 1.0, 1.0), "bent_law\\[2\\]"), ((20.0, 1.0), "bent_law")):
        with pytest.raises(ConfigurationError, match=field):
            OperatingPoint(100, LinearLatencyModel(-20.0, 95.0), bent_law=bad)

