"""The GPUColo paper's static model: ``y = gain * u + offset`` by least squares
(:func:`fit_static`; the GPUColo paper (Chen et al., ICDCS 2024), Sec. V-A: latency vs sleep
interval), with standard errors and 95 % confidence intervals. Re-exported by
:mod:`sysid.fit` beside the ARX fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._checks import not_constant, pair
from .metrics import r2

__all__ = ["StaticFit", "fit_static"]


@dataclass(frozen=True)
class StaticFit:
    """``y = gain * u + offset`` fitted by ordinary least squares (made by :func:`fit_static`).

    Parameters
    ----------
    gain, offset : float
        Slope and intercept.
    r2 : float
        R² (:func:`sysid.r2`) on the data the model was fitted to; use :func:`validate` for
        held-out data.
    stderr : (float, float)
        Standard errors of ``(gain, offset)``.
    ci95 : ((float, float), (float, float))
        95 % confidence intervals of ``gain`` and ``offset`` from Student's t with ``n - 2``
        degrees of freedom.
    n : int
        Number of samples fitted.
    rmse : float
        Root-mean-square residual.
    """

    gain: float
    offset: float
    r2: float
    stderr: tuple[float, float]
    ci95: tuple[tuple[float, float], tuple[float, float]]
    n: int
    rmse: float

    def predict(self, u) -> np.ndarray:
        """Predicted outputs for the inputs ``u``."""
        return self.gain * np.asarray(u, dtype=float) + self.offset

    def __str__(self) -> str:
        (glo, ghi), _ = self.ci95
        return (f"y = {self.gain:.4g} u + {self.offset:.4g}  (gain 95% CI [{glo:.4g}, "
                f"{ghi:.4g}], R² = {self.r2:.3f}, n = {self.n})")


def fit_static(u, y) -> StaticFit:
    """Fit ``y = gain * u + offset`` by least squares.

    Parameters
    ----------
    u : array_like
        Inputs (e.g. sleep intervals, s); at least 3, not all equal.
    y : array_like
        Outputs (e.g. mean latencies, ms), same length.

    Returns
    -------
    StaticFit
        The fit with standard errors, 95 % confidence intervals and R².

    A constant output gives gain exactly 0 (with zero standard errors), which
    :meth:`gpucontrol.LinearLatencyModel.from_fit` refuses: no response to control.

    Raises
    ------
    ValueError
        On mismatched lengths, NaN/inf, fewer than 3 samples or a constant input (which
        leaves the gain unidentifiable).

    Examples
    --------
    >>> f = fit_static([0.0, 0.5, 1.0, 1.5], [95.0, 89.0, 83.0, 77.0])
    >>> round(f.gain, 9), round(f.offset, 9), round(f.r2, 9)
    (-12.0, 95.0, 1.0)
    """
    from scipy.stats import t as student_t

    x, yy = pair(u, y, min_len=3)
    not_constant("u", x)
    n = x.size
    # Fit on u and y scaled to under 2 in magnitude, so that values whose squares overflow
    # (1e200) still give the right gain and standard errors; undo the scaling afterwards. The
    # scales are powers of two (exact), and the fit is on the centred data: on u = 1e6 plus a
    # small excitation the uncentred columns [u, 1] are nearly parallel, and the gain lost
    # digits (1e-7 relative for an excitation of 1e-3) and its standard error all of them.
    umax, ymax = float(np.max(np.abs(x))), float(np.max(np.abs(yy)))
    su, sy = _power_of_two_below(umax), _power_of_two_below(ymax)
    xs, ys = x / su, yy / sy
    xm, ym = float(np.mean(xs)), float(np.mean(ys))
    xc, yc = xs - xm, ys - ym
    sxx = float(xc @ xc)
    with np.errstate(over="ignore"):  # a span past the float range is not constant
        y_span = float(np.ptp(yy))
    if y_span <= 1e-12 * max(ymax, 1.0):
        # constant output: exactly no slope, not roundoff, and the output itself
        slope, icept = 0.0, float(ys[0])
        resid = ys - icept
        r_squared = r2(ys, np.full(n, icept))
    else:
        slope = float(xc @ yc) / sxx
        icept = ym - slope * xm
        resid = yc - slope * xc
        r_squared = r2(yc, yc - resid)
    ssr = float(resid @ resid)
    dof = n - 2
    sigma2 = ssr / dof
    # the diagonal of sigma2 (Phi' Phi)^-1 for Phi = [u, 1], from the centred sums
    var = np.array([sigma2 / sxx, sigma2 * (1.0 / n + xm * xm / sxx)])
    q = float(student_t.ppf(0.975, dof))
    with np.errstate(over="ignore"):
        se = np.sqrt(np.maximum(var, 0.0)) * np.array([sy / su, sy])
        gain, offset = slope * sy / su, icept * sy
        rmse = math.sqrt(ssr / n) * sy
    if not all(math.isfinite(v) for v in (gain, offset, rmse, *se)):
        raise ValueError(f"u and y span too many orders of magnitude for a float fit (|u| up "
                         f"to {umax:g}, |y| up to {ymax:g}): the gain or its standard error "
                         "overflows; rescale the data")
    return StaticFit(
        gain=gain, offset=offset,
        r2=r_squared,
        stderr=(float(se[0]), float(se[1])),
        ci95=((gain - q * se[0], gain + q * se[0]), (offset - q * se[1], offset + q * se[1])),
        n=n, rmse=rmse)


def _power_of_two_below(v: float) -> float:
    """The power of two in ``(v / 2, v]`` for a finite ``v > 0``, 0.5 for 0: dividing by it
    rounds nothing away (unless a quotient falls below the normal range)."""
    return math.ldexp(1.0, math.frexp(v)[1] - 1)
