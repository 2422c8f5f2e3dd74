"""sysid: system identification for the latency controller — excitation signals, records,
fits, validation and gain envelopes.

Pure data in, models out: sysid depends on numpy, scipy and (lazily, for NARX) sysidentpy,
and imports neither ``gpucontrol`` nor ``harness``. A fit reaches a controller design by duck
typing (it has ``gain`` and ``offset``) or as plain numbers (a gain envelope).

>>> import numpy as np
>>> from sysid import white_noise, fit_static
>>> s = white_noise(50, 0.0, 1.0, seed=0)
>>> fit = fit_static(s, 95.0 - 12.0 * s)
>>> round(fit.gain, 6), round(fit.offset, 6)
(-12.0, 95.0)
"""

from .data import IdData
from .duty import DutyLaw, fit_duty_law
from .excitation import multi_level, prbs, white_noise
from .experiment import ExcitationActuation, measurement_value, run_experiment
from .fit import (
    ArxFit,
    OrderSelection,
    StaticFit,
    Validation,
    fit_arx,
    fit_static,
    select_order,
    validate,
)
from .local_slopes import LocalSlopes, local_slopes
from .metrics import fit_percent, mape, r2, rmse
from .narx import NarxFit, fit_narx
from .piecewise import (
    ModelComparison,
    PiecewiseFit,
    SaturatingFit,
    fit_piecewise_linear,
    fit_saturating,
    loo_errors,
    select_latency_model,
)
from .rate import IterationFit, fit_iteration_time
from .residuals import ResidualAnalysis, correlation_analysis, resid, resid_plot
from .variation import (
    GainEnvelope,
    NominalChoice,
    gain_envelope,
    recommend_nominal,
    worst_pole_abs,
)

# excitation: prbs, white_noise, multi_level; records: IdData, run_experiment;
# fits: fit_static, fit_arx, select_order, validate, resid, fit_narx;
# local slopes across the excited span: local_slopes;
# latency vs GPU share: fit_piecewise_linear, fit_saturating, select_latency_model;
# variation: gain_envelope, recommend_nominal;
# the training's rate curve (iteration time from iterations counted): fit_iteration_time;
# the latency over the training's duty, additive or time-sliced: fit_duty_law.
__all__ = [
    "ArxFit", "DutyLaw", "ExcitationActuation", "GainEnvelope", "IdData", "IterationFit",
    "LocalSlopes", "ModelComparison", "NarxFit", "NominalChoice", "OrderSelection", "PiecewiseFit",
    "ResidualAnalysis", "SaturatingFit", "StaticFit", "Validation", "correlation_analysis",
    "fit_arx", "fit_duty_law", "fit_iteration_time", "fit_narx", "fit_percent",
    "fit_piecewise_linear", "fit_saturating", "fit_static", "gain_envelope", "local_slopes",
    "loo_errors", "mape", "measurement_value", "multi_level", "prbs", "r2", "recommend_nominal",
    "resid", "resid_plot", "rmse", "run_experiment", "select_latency_model", "select_order",
    "validate", "white_noise", "worst_pole_abs",
]
