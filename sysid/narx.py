"""Polynomial NARX models through sysidentpy's FROLS, behind sysid's fit/validate interface.

sysidentpy (0.9) builds a candidate set of polynomial regressors from lagged inputs and
outputs and keeps the terms that explain most of the output variance (forward regression
orthogonal least squares, FROLS), choosing how many by an information criterion. This adapter
fixes what its defaults leave implicit:

* the parameter estimator is an explicit :class:`~sysidentpy.parameter_estimation.LeastSquares`
  (FROLS' default is recursive least squares);
* sysidentpy's input lags start at 1; ``nk=0`` (the input acts in the same period, as the
  sleep interval does on that period's latency) is obtained by shifting the input one sample
  ahead, and ``nk > 1`` by the input lag list ``nk .. nk + xlag - 1``;
* sysidentpy's ``predict`` copies the first ``max_lag`` measured outputs into its prediction,
  so R² and fit % here are computed after trimming them (otherwise they flatter the model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ._checks import int_at_least, not_constant, output_varies
from .data import IdData, require_record
from .fit import validate

__all__ = ["NarxFit", "fit_narx"]


@dataclass(frozen=True, eq=False)
class NarxFit:
    """A fitted polynomial NARX model.

    Parameters
    ----------
    model : sysidentpy FROLS
        The fitted sysidentpy model.
    ylag, xlag : int
        Maximum output and input lags.
    degree : int
        Polynomial degree of the basis.
    nk : int
        Input delay in samples.
    terms : tuple of (str, float, float)
        ``(regressor, parameter, ERR)`` as sysidentpy names them, e.g.
        ``("x1(k-1)y(k-1)", 0.1, 0.003)``; with ``nk=0`` sysidentpy's ``x1(k-1)`` is ``u(k)``.
    r2, fit_pct : float
        Free-run scores after the first ``max_lag`` samples, on ``validated_on`` data.
    validated_on : {"estimation", "validation"}
        Which record the scores were computed on.
    """

    model: Any
    ylag: int
    xlag: int
    degree: int
    nk: int
    terms: tuple[tuple[str, float, float], ...]
    r2: float = math.nan
    fit_pct: float = math.nan
    validated_on: str = "estimation"

    @property
    def max_lag(self) -> int:
        """Initial outputs a simulation needs; they are excluded from the scores."""
        return int(self.model.max_lag)

    def _x(self, u) -> np.ndarray:
        uu = np.asarray(u, dtype=float).ravel()
        if self.nk == 0:  # sysidentpy's x(k-1) on the advanced input is u(k)
            uu = np.r_[uu[1:], uu[-1:]]
        return uu.reshape(-1, 1)

    def simulate(self, u, y_init) -> np.ndarray:
        """Free-run simulation: only the first ``max_lag`` values of ``y_init`` are used."""
        uu = np.asarray(u, dtype=float).ravel()
        yi = np.asarray(y_init, dtype=float).ravel()
        if yi.size < self.max_lag:
            raise ValueError(f"y_init needs {self.max_lag} value(s), got {yi.size}")
        y0 = np.zeros(uu.size)
        y0[:self.max_lag] = yi[:self.max_lag]
        yhat = np.asarray(self.model.predict(X=self._x(uu), y=y0.reshape(-1, 1)),
                          dtype=float).ravel()[:uu.size]
        return yhat

    def predict(self, data: IdData, steps_ahead: int = 1) -> np.ndarray:
        """``steps_ahead``-step prediction from measured outputs (first ``max_lag`` copied)."""
        k = int_at_least("steps_ahead", steps_ahead, 1)
        yhat = np.asarray(self.model.predict(X=self._x(data.u),
                                             y=np.asarray(data.y).reshape(-1, 1),
                                             steps_ahead=k), dtype=float).ravel()[:len(data)]
        return yhat

    def residuals(self, data: IdData) -> np.ndarray:
        """One-step prediction errors for ``k >= max_lag``."""
        return np.asarray(data.y[self.max_lag:]) - self.predict(data)[self.max_lag:]

    def __str__(self) -> str:
        body = ", ".join(f"{t} {p:+.4g}" for t, p, _ in self.terms)
        return (f"NARX(ylag={self.ylag}, xlag={self.xlag}, degree={self.degree}, nk={self.nk})"
                f": {body}; fit {self.fit_pct:.1f}% ({self.validated_on}), R² {self.r2:.3f}")


def fit_narx(data: IdData, *, ylag: int = 2, xlag: int = 2, degree: int = 2, nk: int = 1,
             n_terms: int | None = None, info_criteria: str = "aic", n_info_values: int = 10,
             validation: IdData | None = None) -> NarxFit:
    """Fit a polynomial NARX model with sysidentpy's FROLS and least squares.

    Parameters
    ----------
    data : IdData
        Estimation record.
    ylag, xlag : int
        Maximum output and input lags (>= 1).
    degree : int
        Polynomial degree of the basis (>= 1; 1 gives a linear ARX structure).
    nk : int
        Input delay in samples (>= 0); 0 lets ``u(k)`` act on ``y(k)``.
    n_terms : int, optional
        Number of terms to keep; by default chosen by ``info_criteria`` over the first
        ``n_info_values`` candidates.
    info_criteria : {"aic", "aicc", "bic", "fpe", "lilc"}
        Information criterion for the number of terms.
    n_info_values : int
        Candidate term counts the criterion is evaluated on (>= 1).
    validation : IdData, optional
        Held-out record for ``r2``/``fit_pct`` (otherwise the estimation record).

    Returns
    -------
    NarxFit
        The model, its terms and free-run scores.

    Raises
    ------
    ImportError
        When sysidentpy is not installed (``pip install 'gpucontrol[narx]'``).
    """
    try:
        from sysidentpy.basis_function import Polynomial
        from sysidentpy.model_structure_selection import FROLS
        from sysidentpy.parameter_estimation import LeastSquares
        from sysidentpy.utils.display_results import results
    except ImportError:
        raise ImportError("sysid.fit_narx needs sysidentpy, an optional dependency: "
                          "pip install 'gpucontrol[narx]'") from None

    require_record(data)
    ylag, xlag = int_at_least("ylag", ylag, 1), int_at_least("xlag", xlag, 1)
    degree, nk = int_at_least("degree", degree, 1), int_at_least("nk", nk, 0)
    n_info_values = int_at_least("n_info_values", n_info_values, 1)
    if info_criteria not in ("aic", "aicc", "bic", "fpe", "lilc"):
        raise ValueError(f"info_criteria must be one of aic, aicc, bic, fpe, lilc, "
                         f"got {info_criteria!r}")
    not_constant("u", data.u)
    output_varies(data.y)
    max_lag = max(ylag, xlag + max(nk - 1, 0))
    n_candidates = math.comb(ylag + xlag + degree, degree)
    n_min = max_lag + n_candidates + 1
    if len(data) < n_min:
        raise ValueError(f"record too short for ylag={ylag}, xlag={xlag}, degree={degree}: "
                         f"{len(data)} sample(s), need at least {n_min} "
                         f"({n_candidates} candidate regressors)")
    if n_terms is not None:
        n_terms = int_at_least("n_terms", n_terms, 1)
        if n_terms > n_candidates:
            raise ValueError(f"n_terms={n_terms} exceeds the {n_candidates} candidate regressors")
    # sysidentpy lags the input from 1: a delay nk >= 1 is the lag list nk..nk+xlag-1
    xlags = xlag if nk <= 1 else list(range(nk, nk + xlag))
    model = FROLS(order_selection=n_terms is None, n_terms=n_terms, ylag=ylag, xlag=xlags,
                  info_criteria=info_criteria, n_info_values=min(n_info_values, n_candidates),
                  estimator=LeastSquares(), basis_function=Polynomial(degree=degree))
    fit = NarxFit(model=model, ylag=ylag, xlag=xlag, degree=degree, nk=nk, terms=())
    model.fit(X=fit._x(data.u), y=np.asarray(data.y, dtype=float).reshape(-1, 1))
    rows = results(model.final_model, model.theta, model.err, model.n_terms,
                   err_precision=8, dtype="dec")
    terms = tuple((str(r[0]), float(r[1]), float(r[2])) for r in rows)
    v = validate(replace(fit, terms=terms), validation if validation is not None else data)
    return replace(fit, terms=terms, r2=v.r2, fit_pct=v.fit_pct,
                   validated_on="validation" if validation is not None else "estimation")
