"""Goodness-of-fit metrics (plain functions of measured and predicted outputs)."""

from __future__ import annotations

import numpy as np

from ._checks import pair

__all__ = ["fit_percent", "mape", "r2", "rmse"]


def r2(y, yhat) -> float:
    """Coefficient of determination ``1 - SS_res / SS_tot`` (can be negative for bad models).

    >>> r2([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    1.0
    """
    a, b = pair(y, yhat, min_len=2, names=("y", "yhat"))
    ss_tot = float(np.sum((a - a.mean()) ** 2))
    if ss_tot == 0.0:
        raise ValueError("y is constant: R² is undefined")
    return 1.0 - float(np.sum((a - b) ** 2)) / ss_tot


def fit_percent(y, yhat) -> float:
    """Normalized-RMSE fit in percent, as MATLAB's ``compare``:
    ``100 (1 - ||y - yhat|| / ||y - mean(y)||)``; 100 is perfect, 0 is no better than the mean.

    >>> fit_percent([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    0.0
    """
    a, b = pair(y, yhat, min_len=2, names=("y", "yhat"))
    den = float(np.linalg.norm(a - a.mean()))
    if den == 0.0:
        raise ValueError("y is constant: fit percent is undefined")
    return 100.0 * (1.0 - float(np.linalg.norm(a - b)) / den)


def rmse(y, yhat) -> float:
    """Root-mean-square error."""
    a, b = pair(y, yhat, min_len=1, names=("y", "yhat"))
    return float(np.sqrt(np.mean((a - b) ** 2)))


def mape(y, yhat) -> float:
    """Mean absolute percentage error ``100 mean(|y - yhat| / |y|)`` (Mudi's fitting error).

    >>> mape([100.0, 50.0], [90.0, 55.0])
    10.0
    """
    a, b = pair(y, yhat, min_len=1, names=("y", "yhat"))
    if np.any(a == 0):
        raise ValueError("y contains zeros: percentage error is undefined")
    return float(100.0 * np.mean(np.abs(a - b) / np.abs(a)))
