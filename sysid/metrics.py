"""Goodness-of-fit metrics (plain functions of measured and predicted outputs)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ._checks import pair

__all__ = ["fit_percent", "mape", "r2", "rmse"]


def r2(y: ArrayLike, yhat: ArrayLike) -> float:
    """Coefficient of determination ``1 - SS_res / SS_tot``.

    The one R² of sysid: :func:`~sysid.fit_static`, the ARX/NARX validation and the
    latency-vs-share fits all report this value.

    Parameters
    ----------
    y : array_like
        Measured outputs (at least 2, finite).
    yhat : array_like
        Predicted outputs, same length as ``y``.

    Returns
    -------
    float
        1 for a perfect prediction, 0 for one no better than the mean of ``y``, negative for
        worse. When ``y`` is constant (``SS_tot = 0``) the ratio is 0/0 or x/0: the result is
        1.0 if ``yhat`` reproduces ``y`` to rounding (a relative 1e-9 of ``max |y|``), and
        ``-inf`` otherwise (the limit of ``1 - SS_res / SS_tot`` as ``SS_tot`` goes to 0).

    Examples
    --------
    >>> r2([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    1.0
    >>> r2([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    0.0
    >>> r2([5.0, 5.0], [5.0, 5.0]), r2([5.0, 5.0], [4.0, 6.0])
    (1.0, -inf)
    """
    a, b = pair(y, yhat, min_len=2, names=("y", "yhat"))
    ss_res = float(np.sum((a - b) ** 2))
    if float(np.ptp(a)) == 0.0:
        tol = 1e-9 * max(float(np.max(np.abs(a))), 1.0)
        return 1.0 if float(np.max(np.abs(a - b))) <= tol else -math.inf
    ss_tot = float(np.sum((a - a.mean()) ** 2))
    return 1.0 - ss_res / ss_tot


def fit_percent(y, yhat) -> float:
    """Normalized-RMSE fit in percent, as MATLAB's ``compare``.

    Parameters
    ----------
    y : array_like
        Measured outputs.
    yhat : array_like
        Predicted outputs, same length as ``y``.

    Returns
    -------
    float
        ``100 (1 - ||y - yhat|| / ||y - mean(y)||)``: 100 is perfect, 0 is no better than the
        mean; ValueError when ``y`` is constant.

    Examples
    --------
    >>> fit_percent([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    0.0
    """
    a, b = pair(y, yhat, min_len=2, names=("y", "yhat"))
    den = float(np.linalg.norm(a - a.mean()))
    if den == 0.0:
        raise ValueError("y is constant: fit percent is undefined")
    return 100.0 * (1.0 - float(np.linalg.norm(a - b)) / den)


def rmse(y, yhat) -> float:
    """Root-mean-square error.

    Parameters
    ----------
    y : array_like
        Measured outputs.
    yhat : array_like
        Predicted outputs, same length as ``y``.

    Returns
    -------
    float
        ``sqrt(mean((y - yhat)**2))``.

    Examples
    --------
    >>> rmse([1.0, 2.0], [1.0, 4.0])
    1.4142135623730951
    """
    a, b = pair(y, yhat, min_len=1, names=("y", "yhat"))
    return float(np.sqrt(np.mean((a - b) ** 2)))


def mape(y, yhat) -> float:
    """Mean absolute percentage error (the Mudi paper's fitting error).

    Parameters
    ----------
    y : array_like
        Measured outputs.
    yhat : array_like
        Predicted outputs, same length as ``y``.

    Returns
    -------
    float
        ``100 mean(|y - yhat| / |y|)``; ValueError when ``y`` contains a zero.

    Examples
    --------
    >>> mape([100.0, 50.0], [90.0, 55.0])
    10.0
    """
    a, b = pair(y, yhat, min_len=1, names=("y", "yhat"))
    if np.any(a == 0):
        raise ValueError("y contains zeros: percentage error is undefined")
    return float(100.0 * np.mean(np.abs(a - b) / np.abs(a)))
