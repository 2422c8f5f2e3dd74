"""Least-squares fits: the GPUColo paper's static linear model and ARX models with order selection.

* :func:`fit_static` fits ``y = gain * u + offset`` (the GPUColo paper (Chen et al., ICDCS
  2024), Sec. V-A: latency vs sleep interval)
  with standard errors and 95 % confidence intervals (:mod:`sysid.static`, re-exported here).
* :func:`fit_arx` fits ``A(q) y(k) = B(q) u(k - nk) + c + e(k)`` by least squares, with the
  parameter covariance, AIC and FPE, and fit %/R² by *free-run simulation* (the model is fed
  only the input, as it would be when predicting far ahead), on validation data if given.
* :func:`select_order` compares ARX orders by AIC, FPE or validation fit.

A fit exposes ``gain`` and ``offset`` (for ARX: the static gain and the equilibrium output at
``u = 0``), so it can seed a controller design by duck typing, e.g.
``gpucontrol.LinearLatencyModel.from_fit(fit)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from ._checks import (
    flag,
    int_at_least,
    int_values,
    not_constant,
    output_varies,
    vector,
)
from .data import IdData, require_record
from .metrics import fit_percent, r2
from .static import StaticFit, _power_of_two_below, fit_static

__all__ = [
    "ArxFit",
    "OrderSelection",
    "StaticFit",
    "Validation",
    "fit_arx",
    "fit_static",
    "select_order",
    "validate",
]


# ---------------------------------------------------------------------------------------------
# ARX
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ArxFit:
    """ARX model ``y(k) + a1 y(k-1) + … + a_na y(k-na) = b1 u(k-nk) + … + b_nb u(k-nk-nb+1) + c``.

    Parameters
    ----------
    na, nb, nk : int
        Output order, input order and input delay (samples).
    a, b : ndarray
        Denominator coefficients ``a1..a_na`` and numerator ``b1..b_nb``.
    c : float
        Constant term (0 when fitted with ``offset=False``).
    cov, stderr : ndarray
        Covariance and standard errors of ``params = [a..., b..., c]``.
    sigma2 : float
        Unbiased noise-variance estimate (SSR / (N - d)).
    loss : float
        Mean squared one-step residual on the estimation data (MATLAB's loss function V).
    aic, fpe : float
        ``N log V + 2 d`` and ``V (1 + d/N) / (1 - d/N)``.
    n_used : int
        Samples in the least-squares problem (the record after its first ``max_lag``).
    r2, fit_pct : float
        Free-run simulation quality on ``validated_on`` data.
    validated_on : {"estimation", "validation"}
        Which record ``r2`` and ``fit_pct`` were computed on.
    period_s : float
        Sampling period of the estimation record (s).
    has_offset : bool
        Whether the constant term ``c`` was fitted.
    """

    na: int
    nb: int
    nk: int
    a: np.ndarray
    b: np.ndarray
    c: float
    cov: np.ndarray
    stderr: np.ndarray
    sigma2: float
    loss: float
    n_used: int
    aic: float
    fpe: float
    r2: float = math.nan
    fit_pct: float = math.nan
    validated_on: str = "estimation"
    period_s: float = 1.0
    has_offset: bool = field(default=True)

    # ---- structure ----------------------------------------------------------------------------
    @property
    def max_lag(self) -> int:
        """Samples of history a prediction needs (the first ``max_lag`` are initial values)."""
        return max(self.na, self.nk + self.nb - 1)

    @property
    def n_params(self) -> int:
        return self.na + self.nb + (1 if self.has_offset else 0)

    @property
    def params(self) -> np.ndarray:
        return np.r_[self.a, self.b, [self.c] if self.has_offset else []]

    @property
    def static_gain(self) -> float:
        """Steady-state ``dy/du``: ``sum(b) / (1 + sum(a))`` (inf for an integrating model)."""
        den = 1.0 + float(np.sum(self.a))
        return math.inf if den == 0 else float(np.sum(self.b)) / den

    @property
    def gain(self) -> float:
        """Alias of :attr:`static_gain`, so an ARX fit can seed a static-model design."""
        return self.static_gain

    @property
    def offset(self) -> float:
        """Equilibrium output at ``u = 0``: ``c / (1 + sum(a))``."""
        den = 1.0 + float(np.sum(self.a))
        return math.inf if den == 0 else self.c / den

    def tf_coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """``(num, den)`` in descending powers of z, equal length, for ``control.tf(num, den,
        dt)``: ``B(z) z**-nk / A(z)`` (the constant term ``c`` is an operating point, not
        dynamics)."""
        n = self.max_lag
        den = np.zeros(n + 1)
        den[0] = 1.0
        den[1:self.na + 1] = self.a
        num = np.zeros(n + 1)
        num[self.nk:self.nk + self.nb] = self.b
        return num, den

    # ---- prediction ---------------------------------------------------------------------------
    def _regressors(self, u: np.ndarray, y: np.ndarray, start: int) -> np.ndarray:
        return _arx_matrix(u, y, self.na, self.nb, self.nk, start, self.has_offset)

    def predict(self, data: IdData) -> np.ndarray:
        """One-step-ahead prediction; the first ``max_lag`` samples are the measured ones."""
        _need(data, self.max_lag + 1, self)
        yhat = np.array(data.y, dtype=float)
        yhat[self.max_lag:] = self._regressors(data.u, data.y, self.max_lag) @ self.params
        return yhat

    def simulate(self, u, y_init=None) -> np.ndarray:
        """Free-run simulation from the input alone.

        ``y_init`` supplies the first ``max_lag`` outputs (initial conditions); without it they
        are the equilibrium output for the first input value.
        """
        uu = vector("u", u, min_len=1)
        n0 = self.max_lag
        y = np.empty(uu.size)
        if y_init is None:
            y[:n0] = self.offset + self.static_gain * uu[0] if np.isfinite(self.offset) else 0.0
        else:
            yi = vector("y_init", y_init, min_len=0)
            if yi.size < n0:
                raise ValueError(f"y_init needs {n0} value(s), got {yi.size}")
            y[:n0] = yi[:n0]
        for k in range(n0, uu.size):
            acc = self.c if self.has_offset else 0.0
            for i in range(1, self.na + 1):
                acc -= self.a[i - 1] * y[k - i]
            for j in range(self.nb):
                acc += self.b[j] * uu[k - self.nk - j]
            y[k] = acc
        return y

    def residuals(self, data: IdData) -> np.ndarray:
        """One-step prediction errors ``y - yhat`` for ``k >= max_lag``."""
        return np.asarray(data.y[self.max_lag:]) - self.predict(data)[self.max_lag:]

    def __str__(self) -> str:
        return (f"ARX(na={self.na}, nb={self.nb}, nk={self.nk}): static gain "
                f"{self.static_gain:.4g}, offset {self.offset:.4g}, fit {self.fit_pct:.1f}% "
                f"({self.validated_on}), R² {self.r2:.3f}, AIC {self.aic:.1f}")


def _arx_matrix(u: np.ndarray, y: np.ndarray, na: int, nb: int, nk: int, start: int,
                offset: bool) -> np.ndarray:
    n = u.size
    cols = [-y[start - i:n - i] for i in range(1, na + 1)]
    cols += [u[start - nk - j:n - nk - j] for j in range(nb)]
    if offset:
        cols.append(np.ones(n - start))
    return np.column_stack(cols)


def _arx_least_squares(phi: np.ndarray, target: np.ndarray, offset: bool, orders: str
                       ) -> tuple[np.ndarray, np.ndarray, float]:
    """``(theta, cov, ssr)`` of the least-squares fit ``target ~ phi @ theta`` (the last column
    of ``phi`` the constant when ``offset``), with ``cov = ssr / (n - d) (Phi' Phi)^-1``.

    As in :func:`fit_static`, the fit is on the centred data (with an offset): on u = 1e6
    plus an excitation of 1 the columns [-y, u, 1] are nearly parallel (condition number
    1e13), and the normal equations' ``inv(Phi' Phi)`` lost up to 2e-3 of the standard errors
    and lstsq 1e-8 of ``c``; with an excitation of 1e-3 the rank test refused the record. The
    centred regressors are tested for rank and scaled by powers of two (exact), the covariance
    comes from their QR factor (``inv(R) inv(R)'``, not the normal equations), and
    ``c = mean(y) - mean(X) beta`` and its row of the covariance follow from the means.
    """
    x = phi[:, :-1] if offset else phi
    xm = np.mean(x, axis=0) if offset else np.zeros(x.shape[1])
    ym = float(np.mean(target)) if offset else 0.0
    xc, yc = x - xm, target - ym
    if np.linalg.matrix_rank(xc) < x.shape[1]:
        raise ValueError(f"regressors are linearly dependent for {orders}: the input is not "
                         "exciting enough for this order")
    sx = np.array([_power_of_two_below(v) for v in np.max(np.abs(xc), axis=0)])
    sy = _power_of_two_below(float(np.max(np.abs(yc))))
    xs, ys = xc / sx, yc / sy
    beta_s, *_ = np.linalg.lstsq(xs, ys, rcond=None)
    res = ys - xs @ beta_s
    rinv = np.linalg.inv(np.linalg.qr(xs, mode="r"))
    n, d = phi.shape
    sigma2_s = float(res @ res) / (n - d)   # (in the scaled output's units)
    scale = sy / sx
    cov_b = sigma2_s * (rinv @ rinv.T) * np.outer(scale, scale)
    beta = beta_s * scale
    ssr = float(res @ res) * sy * sy
    if not offset:
        return beta, cov_b, ssr
    # Phi = [X, 1] = [Xc, 1] T with T = [[I, 0], [xm, 1]]: (Phi' Phi)^-1 = T^-1 diag(S^-1,
    # 1 / n) T^-T, whose last row and column are -S^-1 xm and 1 / n + xm' S^-1 xm
    cov = np.empty((d, d))
    cov[:-1, :-1] = cov_b
    cov[:-1, -1] = cov[-1, :-1] = -(cov_b @ xm)
    cov[-1, -1] = sigma2_s * sy * sy / n + float(xm @ cov_b @ xm)
    return np.r_[beta, ym - float(xm @ beta)], cov, ssr


def _need(data: IdData, n_min: int, what) -> None:
    """Refuse a record shorter than ``n_min`` for the model ``what``, named by its structure
    (its full text printed a fit % and an R² of nan into the message)."""
    if len(data) < n_min:
        lags = ", ".join(f"{k}={getattr(what, k)}" for k in ("na", "nb", "nk", "ylag", "xlag",
                                                             "degree") if hasattr(what, k))
        name = {"ArxFit": "ARX", "NarxFit": "NARX"}.get(type(what).__name__,
                                                        type(what).__name__)
        raise ValueError(f"record too short for {name}({lags}): {len(data)} sample(s), need "
                         f"at least {n_min} (the first {getattr(what, 'max_lag', 0)} are "
                         "initial conditions)")


def _check_orders(na, nb, nk) -> tuple[int, int, int]:
    return int_at_least("na", na, 0), int_at_least("nb", nb, 1), int_at_least("nk", nk, 0)


def fit_arx(data: IdData, na: int = 1, nb: int = 1, nk: int = 1, *,
            validation: IdData | None = None, offset: bool = True) -> ArxFit:
    """Fit an ARX model by least squares.

    Parameters
    ----------
    data : IdData
        Estimation record.
    na, nb, nk : int
        Output order (>= 0), input order (>= 1) and input delay in samples (>= 0; 0 means the
        input acts in the same period, as the sleep interval does on the period's latency).
    validation : IdData, optional
        Held-out record on which ``r2``/``fit_pct`` are computed by free-run simulation
        (otherwise on the estimation record).
    offset : bool
        Include the constant term ``c`` (default); pass False for offset-free data. Must be
        a bool: a string such as ``"no"`` is refused, not taken as true.

    Returns
    -------
    ArxFit
        Coefficients, covariance, AIC/FPE and free-run R²/fit %.

    Raises
    ------
    ValueError
        When the record is too short for the order (fewer samples than parameters + 1 after
        the initial ``max_lag``), the input or the output is constant, or the regressors are
        linearly dependent (input not persistently exciting for ``nb``).

    Examples
    --------
    >>> import numpy as np
    >>> u = np.random.default_rng(0).uniform(0, 1, 200)
    >>> y = np.zeros(200)
    >>> for k in range(1, 200):
    ...     y[k] = 0.5 * y[k - 1] + 2.0 * u[k - 1] + 1.0
    >>> m = fit_arx(IdData(u, y), na=1, nb=1, nk=1)
    >>> np.round(m.params, 6).tolist(), round(m.static_gain, 6)
    ([-0.5, 2.0, 1.0], 4.0)
    """
    require_record(data)
    na, nb, nk = _check_orders(na, nb, nk)
    offset = flag("offset", offset)
    return _fit_arx(data, na, nb, nk, validation, offset, max(na, nk + nb - 1))


def _fit_arx(data: IdData, na: int, nb: int, nk: int, validation: IdData | None,
             offset: bool, start: int) -> ArxFit:
    """:func:`fit_arx` on the samples from ``start`` on (``start >= max_lag``), so that
    :func:`select_order` can compare every order on the same samples."""
    not_constant("u", data.u)
    d = na + nb + (1 if offset else 0)
    n_min = start + d + 1
    if len(data) < n_min:
        raise ValueError(f"record too short for the order na={na}, nb={nb}, nk={nk}: "
                         f"{len(data)} sample(s), need at least {n_min}")
    phi = _arx_matrix(data.u, data.y, na, nb, nk, start, offset)
    target = np.asarray(data.y[start:])
    output_varies(data.y)
    theta, cov, ssr = _arx_least_squares(phi, target, offset, f"na={na}, nb={nb}, nk={nk}")
    n_used = target.size
    sigma2 = ssr / (n_used - d)
    loss = max(ssr / n_used, np.finfo(float).tiny)
    fit = ArxFit(
        na=na, nb=nb, nk=nk, a=theta[:na].copy(), b=theta[na:na + nb].copy(),
        c=float(theta[-1]) if offset else 0.0, cov=cov,
        stderr=np.sqrt(np.maximum(np.diag(cov), 0.0)), sigma2=sigma2, loss=loss,
        n_used=n_used, aic=n_used * math.log(loss) + 2 * d,
        fpe=loss * (1 + d / n_used) / (1 - d / n_used) if d < n_used else math.inf,
        period_s=data.period_s, has_offset=offset)
    check = validation if validation is not None else data
    v = validate(fit, check)
    return replace(fit, r2=v.r2, fit_pct=v.fit_pct,
                   validated_on="validation" if validation is not None else "estimation")


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Validation:
    """Measured vs free-run predicted outputs on a record (made by :func:`validate`).

    Parameters
    ----------
    y, yhat : ndarray
        Measured and predicted outputs over the whole record.
    start : int
        First compared sample (the first ``start`` are initial conditions copied from the
        measurement).
    r2, fit_pct : float
        R² and fit % from ``start`` on.
    """

    y: np.ndarray
    yhat: np.ndarray
    start: int
    r2: float
    fit_pct: float


def validate(fit, data: IdData) -> Validation:
    """Free-run validation of any fitted model on a record.

    Models with ``simulate(u, y_init)`` and ``max_lag`` (ARX, NARX) are simulated from the
    input with the record's first ``max_lag`` outputs as initial conditions, which are then
    excluded from the scores; static models (``predict(u)``) are evaluated directly.

    Parameters
    ----------
    fit : ArxFit, NarxFit, StaticFit or duck-typed model
        Anything with ``simulate(u, y_init)`` and ``max_lag``, or with ``predict(u)``.
    data : IdData
        The record to validate on (its output must vary).

    Returns
    -------
    Validation
        Measured and predicted outputs with R² and fit %.

    Examples
    --------
    >>> v = validate(fit_static([0.0, 1.0, 2.0], [95.0, 83.0, 71.0]),
    ...              IdData([0.5, 1.5], [89.0, 77.0]))
    >>> round(v.r2, 9), round(v.fit_pct, 9)
    (1.0, 100.0)
    """
    require_record(data)
    if hasattr(fit, "simulate") and hasattr(fit, "max_lag"):
        start = int(fit.max_lag)
        _need(data, start + 2, fit)
        yhat = np.asarray(fit.simulate(data.u, data.y[:start]), dtype=float)
    elif hasattr(fit, "predict"):
        start = 0
        yhat = np.asarray(fit.predict(data.u), dtype=float)
    else:
        raise ValueError("fit must provide simulate(u, y_init) or predict(u)")
    y = np.asarray(data.y, dtype=float)
    if np.ptp(y[start:]) == 0:
        raise ValueError("validation output is constant: R² and fit % are undefined")
    return Validation(y=y, yhat=yhat, start=start, r2=r2(y[start:], yhat[start:]),
                      fit_pct=fit_percent(y[start:], yhat[start:]))


# ---------------------------------------------------------------------------------------------
# order selection
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OrderSelection:
    """Result of :func:`select_order`.

    Parameters
    ----------
    best : ArxFit
        The chosen fit, refitted on all usable samples of its order.
    criterion : {"aic", "fpe", "validation"}
        The criterion it won on.
    table : tuple of dict
        One row per candidate order (``na, nb, nk, n_params, aic, fpe, fit_pct, r2``).
    """

    best: ArxFit
    criterion: str
    table: tuple[dict, ...]


_CRITERIA = ("aic", "fpe", "validation")


def select_order(data: IdData, na: Iterable[int] = range(4), nb: Iterable[int] = range(1, 4),
                 nk: Iterable[int] = (0, 1), *, criterion: str = "aic",
                 validation: IdData | None = None, offset: bool = True) -> OrderSelection:
    """Fit every ARX order in ``na x nb x nk`` and pick the best by ``criterion``.

    ``"aic"`` and ``"fpe"`` penalise parameters on the estimation data (all candidates use the
    same samples, those after the largest lag, so the criteria are comparable);
    ``"validation"`` maximises free-run fit % on ``validation`` (required).

    Parameters
    ----------
    data : IdData
        Estimation record.
    na, nb, nk : iterable of int
        Candidate output orders (>= 0), input orders (>= 1) and input delays (>= 0): each a
        sequence such as ``range(3)`` or ``[1]``, not a bare int.
    criterion : {"aic", "fpe", "validation"}
        How to compare the candidates.
    validation : IdData, optional
        Held-out record (required for ``criterion="validation"``).
    offset : bool
        Fit the constant term.

    Returns
    -------
    OrderSelection
        The best fit and the table of all candidates.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> u = rng.uniform(0, 1, 300)
    >>> y = np.zeros(300)
    >>> for k in range(1, 300):
    ...     y[k] = 0.6 * y[k - 1] + u[k - 1] + 0.01 * rng.standard_normal()
    >>> sel = select_order(IdData(u, y), na=range(0, 3), nb=range(1, 3), nk=(0, 1))
    >>> (sel.best.na, sel.best.nk)
    (1, 1)
    """
    if criterion not in _CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(_CRITERIA)}, got {criterion!r}")
    if criterion == "validation" and validation is None:
        raise ValueError("criterion 'validation' needs a validation record")
    require_record(data)
    offset = flag("offset", offset)
    nas, nbs, nks = int_values("na", na, 0), int_values("nb", nb, 1), int_values("nk", nk, 0)
    orders = [(a, b, k) for a in nas for b in nbs for k in nks]
    if not orders:
        raise ValueError("no candidate orders: na, nb and nk must be non-empty")
    start = max(max(a, k + b - 1) for a, b, k in orders)
    fits, rows = [], []
    for a, b, k in orders:
        f = _fit_arx(data, a, b, k, validation, offset, start)
        fits.append(f)
        rows.append({"na": a, "nb": b, "nk": k, "n_params": f.n_params, "aic": f.aic,
                     "fpe": f.fpe, "fit_pct": f.fit_pct, "r2": f.r2})
    if criterion == "validation":
        i = int(np.nanargmax([f.fit_pct for f in fits]))
    else:
        i = int(np.argmin([getattr(f, criterion) for f in fits]))
    best = fits[i]
    if best.max_lag != start:  # refit on all usable samples of the winning order
        best = fit_arx(data, best.na, best.nb, best.nk, validation=validation, offset=offset)
    return OrderSelection(best=best, criterion=criterion, table=tuple(rows))
