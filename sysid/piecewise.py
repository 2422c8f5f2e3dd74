"""Latency vs GPU share: Mudi's piecewise-linear model, a saturating model, and the choice.

The Mudi paper (Sec. 4.1) profiles inference latency at a handful of GPU shares (GPU% = the
inference's resource partition) and fits a continuous two-segment line (eq. 1)::

    L(x) = k1 (x - x0) + y0   for x <= x0,
           k2 (x - x0) + y0   otherwise,

whose cutoff ``(x0, y0)`` is where extra share stops helping. Its inverse gives the smallest
share that meets a latency SLO (eq. 4), which a scheduler uses to give the rest to training.

Beyond Mudi, :func:`fit_saturating` fits the physically motivated ``L(x) = a + b / x``
(Amdahl-style: a part that does not scale with the share plus one that scales inversely), and
:func:`select_latency_model` picks between the models by leave-one-out cross-validation and
says which wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ._checks import finite, in_range, pair
from .metrics import mape, r2

__all__ = [
    "MODEL_FITTERS",
    "ModelComparison",
    "PiecewiseFit",
    "SaturatingFit",
    "fit_piecewise_linear",
    "fit_saturating",
    "loo_errors",
    "select_latency_model",
]


def _domain(bounds, default: tuple[float, float]) -> tuple[float, float]:
    if bounds is None:
        return default
    try:
        lo, hi = (finite("bounds[0]", bounds[0]), finite("bounds[1]", bounds[1]))
    except (TypeError, IndexError):
        raise ValueError(f"bounds must be a (low, high) pair, got {bounds!r}") from None
    if not lo < hi:
        raise ValueError(f"bounds must satisfy low < high, got {bounds!r}")
    return lo, hi


def _margin(margin) -> float:
    """``margin`` as a finite fraction >= 0 (checked whether or not a share meets the SLO)."""
    return in_range("margin", margin, 0.0, math.inf, hi_open=True)


def _with_margin(x: float, margin: float, hi: float) -> float:
    return min(x * (1.0 + margin), hi)


# ---------------------------------------------------------------------------------------------
# piecewise linear (Mudi)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PiecewiseFit:
    """Continuous two-segment line with cutoff ``(x0, y0)`` and slopes ``k1`` (left), ``k2``.

    Parameters
    ----------
    k1, k2 : float
        Slopes left and right of the cutoff.
    x0, y0 : float
        The cutoff point.
    r2 : float
        R² on the profiled points.
    method : {"curvature", "optimal"}
        How the cutoff was placed (see :func:`fit_piecewise_linear`).
    x_range : (float, float)
        Span of the profiled shares: the default search domain of :meth:`min_share` (no
        extrapolation beyond what was measured).

    Examples
    --------
    >>> f = PiecewiseFit(k1=-2.0, k2=-0.1, x0=40.0, y0=20.0, r2=1.0, x_range=(10.0, 90.0))
    >>> float(f.predict(30.0)), float(f.predict(50.0))
    (40.0, 19.0)
    >>> f.min_share(40.0), f.min_share(19.0), f.min_share(10.0) is None
    (30.0, 50.0, True)
    """

    k1: float
    k2: float
    x0: float
    y0: float
    r2: float
    method: str = "curvature"
    x_range: tuple[float, float] = (0.0, 100.0)

    def predict(self, x) -> np.ndarray:
        xx = np.asarray(x, dtype=float)
        dx = xx - self.x0
        return self.y0 + np.where(dx <= 0, self.k1 * dx, self.k2 * dx)

    def min_share(self, slo: float, *, margin: float = 0.0,
                  bounds: tuple[float, float] | None = None) -> float | None:
        """Smallest share ``x`` in ``bounds`` with ``predict(x) <= slo`` (Mudi eq. 4), or None
        if no share in ``bounds`` meets the SLO (Mudi then pauses training).

        ``margin`` inflates the answer by a fraction against prediction error (Mudi uses 10 %:
        ``margin=0.1``), capped at the upper bound; it must be a finite number >= 0 (not a
        string or a bool), checked even when no share meets the SLO.
        """
        s = finite("slo", slo)
        mg = _margin(margin)
        lo, hi = _domain(bounds, self.x_range)
        cands = [lo]
        for k, seg_lo, seg_hi in ((self.k1, -math.inf, self.x0), (self.k2, self.x0, math.inf)):
            if k != 0:
                xr = self.x0 + (s - self.y0) / k
                if seg_lo <= xr <= seg_hi:
                    cands.append(xr)
        cands.append(self.x0)
        ok = sorted(c for c in cands
                    if lo <= c <= hi and self.predict(c) <= s + 1e-9 * max(1.0, abs(s)))
        return _with_margin(float(ok[0]), mg, hi) if ok else None

    def __str__(self) -> str:
        return (f"piecewise ({self.method}): cutoff ({self.x0:.4g}, {self.y0:.4g}), slopes "
                f"{self.k1:.4g} / {self.k2:.4g}, R² {self.r2:.3f}")


def _hinge_fit(x: np.ndarray, y: np.ndarray, x0: float) -> tuple[np.ndarray, float]:
    dx = x - x0
    phi = np.column_stack([np.ones_like(x), np.minimum(dx, 0.0), np.maximum(dx, 0.0)])
    theta, *_ = np.linalg.lstsq(phi, y, rcond=None)
    r = y - phi @ theta
    return theta, float(r @ r)


def curvature_cutoff(x, y) -> int:
    """Index (into ``x`` sorted ascending) of Mudi's cutoff point.

    For each three consecutive points the circle through them is computed and the middle
    point of the set whose circle is tightest is taken. Mudi's text says "lowest curvature";
    we read it as the lowest *radius* of curvature — the sharpest bend, which is what a cutoff
    is (the flattest triple would sit on a straight segment). Both axes are first scaled to
    [0, 1] so that the units of GPU% and milliseconds do not decide the bend.
    """
    xs, ys = pair(x, y, min_len=3, names=("x", "y"))
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    xn = (xs - xs[0]) / (np.ptp(xs) or 1.0)
    yn = (ys - ys.min()) / (np.ptp(ys) or 1.0)
    best, best_k = 1, -1.0
    for i in range(1, xs.size - 1):
        ax, ay = xn[i - 1], yn[i - 1]
        bx, by = xn[i], yn[i]
        cx, cy = xn[i + 1], yn[i + 1]
        area2 = abs((bx - ax) * (cy - ay) - (by - ay) * (cx - ax))
        sides = math.hypot(bx - ax, by - ay) * math.hypot(cx - bx, cy - by) * \
            math.hypot(cx - ax, cy - ay)
        kappa = 2.0 * area2 / sides if sides > 0 else 0.0  # Menger curvature = 1 / radius
        if kappa > best_k:
            best, best_k = i, kappa
    return best


def fit_piecewise_linear(x, y, *, method: str = "curvature") -> PiecewiseFit:
    """Fit Mudi's continuous piecewise-linear latency model.

    Parameters
    ----------
    x, y : array_like
        GPU shares (e.g. percent) and the latencies measured there; at least 4 points with at
        least 3 distinct shares.
    method : {"curvature", "optimal"}
        ``"curvature"`` is Mudi's: the cutoff is the data point at the sharpest three-point
        bend (:func:`curvature_cutoff`), then ``y0``, ``k1`` and ``k2`` by least squares.
        ``"optimal"`` searches the breakpoint continuously between the second and the
        second-to-last share for the least sum of squared errors.

    Returns
    -------
    PiecewiseFit
        Cutoff, slopes and R².

    Examples
    --------
    >>> x = np.arange(10.0, 100.0, 10.0)
    >>> y = np.where(x <= 40, 100 - 2 * (x - 40), 100 - 0.2 * (x - 40))
    >>> f = fit_piecewise_linear(x, y)
    >>> round(f.x0, 6), round(f.k1, 6), round(f.k2, 6), round(f.r2, 6)
    (40.0, -2.0, -0.2, 1.0)
    """
    xs, ys = pair(x, y, min_len=4, names=("x", "y"))
    if np.unique(xs).size < 3:
        raise ValueError("x needs at least 3 distinct values to place a cutoff")
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    if method == "curvature":
        x0 = float(xs[curvature_cutoff(xs, ys)])
    elif method == "optimal":
        x0 = _optimal_breakpoint(xs, ys)
    else:
        raise ValueError(f"method must be 'curvature' or 'optimal', got {method!r}")
    (y0, k1, k2), _ = _hinge_fit(xs, ys, x0)
    f = PiecewiseFit(k1=float(k1), k2=float(k2), x0=x0, y0=float(y0), r2=0.0, method=method,
                     x_range=(float(xs[0]), float(xs[-1])))
    return replace(f, r2=r2(ys, f.predict(xs)))


def _optimal_breakpoint(xs: np.ndarray, ys: np.ndarray) -> float:
    from scipy.optimize import minimize_scalar

    ux = np.unique(xs)
    lo, hi = float(ux[1]), float(ux[-2])
    if lo == hi:
        return lo
    grid = np.unique(np.r_[np.linspace(lo, hi, 201), ux[1:-1]])
    sse = np.array([_hinge_fit(xs, ys, g)[1] for g in grid])
    i = int(np.argmin(sse))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    if b > a:
        res = minimize_scalar(lambda g: _hinge_fit(xs, ys, g)[1], bounds=(a, b),
                              method="bounded", options={"xatol": 1e-9 * max(1.0, abs(b))})
        if res.success and res.fun < sse[i]:
            return float(res.x)
    return float(grid[i])


# ---------------------------------------------------------------------------------------------
# saturating a + b / x
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SaturatingFit:
    """``L(x) = a + b / x``: ``a`` is the latency that no share removes, ``b / x`` the part
    that scales inversely with the share (Amdahl's law on a partitioned GPU).

    Parameters
    ----------
    a, b : float
        The constant and the inverse-share coefficient.
    r2 : float
        R² on the profiled points.
    x_range : (float, float)
        Span of the profiled shares (default search domain of :meth:`min_share`).

    Examples
    --------
    >>> f = SaturatingFit(a=10.0, b=400.0, r2=1.0, x_range=(10.0, 90.0))
    >>> float(f.predict(40.0)), f.min_share(20.0)
    (20.0, 40.0)
    """

    a: float
    b: float
    r2: float
    x_range: tuple[float, float] = (0.0, 100.0)

    def predict(self, x) -> np.ndarray:
        xx = np.asarray(x, dtype=float)
        return self.a + self.b / xx

    def min_share(self, slo: float, *, margin: float = 0.0,
                  bounds: tuple[float, float] | None = None) -> float | None:
        """Smallest share in ``bounds`` with ``predict(x) <= slo``, or None; ``margin`` as
        in :meth:`PiecewiseFit.min_share`."""
        s = finite("slo", slo)
        mg = _margin(margin)
        lo, hi = _domain(bounds, self.x_range)
        if lo <= 0:
            raise ValueError(f"bounds must be > 0 for the a + b/x model, got ({lo}, {hi})")
        if self.b <= 0:  # latency non-increasing in 1/x: smallest share is best
            x = lo if self.predict(lo) <= s else None
        elif s <= self.a:
            x = None
        else:
            x = max(self.b / (s - self.a), lo)
            x = x if x <= hi * (1 + 1e-12) else None
        return None if x is None else _with_margin(float(min(x, hi)), mg, hi)

    def __str__(self) -> str:
        return f"saturating: {self.a:.4g} + {self.b:.4g} / x, R² {self.r2:.3f}"


def fit_saturating(x, y) -> SaturatingFit:
    """Fit ``L(x) = a + b / x`` by least squares in ``1 / x``.

    Parameters
    ----------
    x : array_like
        GPU shares (> 0), at least 3 with at least 2 distinct.
    y : array_like
        Latencies measured at those shares.

    Returns
    -------
    SaturatingFit
        ``a``, ``b`` and R².

    Examples
    --------
    >>> x = np.array([10.0, 20.0, 40.0, 80.0])
    >>> f = fit_saturating(x, 5 + 300 / x)
    >>> round(f.a, 9), round(f.b, 9)
    (5.0, 300.0)
    """
    xs, ys = pair(x, y, min_len=3, names=("x", "y"))
    if np.any(xs <= 0):
        raise ValueError("x (GPU share) must be > 0 for the a + b/x model")
    if np.unique(xs).size < 2:
        raise ValueError("x is constant: the a + b/x model is unidentifiable")
    phi = np.column_stack([np.ones_like(xs), 1.0 / xs])
    (a, b), *_ = np.linalg.lstsq(phi, ys, rcond=None)
    yhat = a + b / xs
    return SaturatingFit(a=float(a), b=float(b), r2=r2(ys, yhat),
                         x_range=(float(xs.min()), float(xs.max())))


# ---------------------------------------------------------------------------------------------
# cross-validated choice
# ---------------------------------------------------------------------------------------------
#: Candidate latency-vs-share models by name: each maps (x, y) to a fit with ``predict``.
MODEL_FITTERS: dict[str, Callable] = {
    "piecewise": lambda x, y: fit_piecewise_linear(x, y, method="curvature"),
    "piecewise-optimal": lambda x, y: fit_piecewise_linear(x, y, method="optimal"),
    "saturating": fit_saturating,
}


def loo_errors(x, y, model: str | Callable = "piecewise") -> np.ndarray:
    """Leave-one-out absolute percentage errors ``100 |y_i - yhat_i| / |y_i|``: each point is
    predicted by the model fitted to all the others. Their mean is Mudi's fitting error.

    Parameters
    ----------
    x, y : array_like
        GPU shares and latencies (at least 3 points).
    model : str or callable
        A name from ``MODEL_FITTERS`` (``"piecewise"``, ``"piecewise-optimal"``,
        ``"saturating"``) or a callable ``(x, y) -> fit`` with ``predict``.

    Returns
    -------
    ndarray
        One percentage error per point.
    """
    xs, ys = pair(x, y, min_len=3, names=("x", "y"))
    fitter = MODEL_FITTERS.get(model) if isinstance(model, str) else model
    if fitter is None or not callable(fitter):
        raise ValueError(f"model must be one of {', '.join(MODEL_FITTERS)} or a callable, "
                         f"got {model!r}")
    out = np.empty(xs.size)
    for i in range(xs.size):
        keep = np.arange(xs.size) != i
        f = fitter(xs[keep], ys[keep])
        out[i] = mape([ys[i]], [float(f.predict(xs[i]))])
    return out


@dataclass(frozen=True)
class ModelComparison:
    """Leave-one-out comparison of latency-vs-share models (made by
    :func:`select_latency_model`).

    Parameters
    ----------
    errors : dict of str to float
        Each model name's mean leave-one-out percentage error.
    winner : str
        The chosen model.
    fit : PiecewiseFit or SaturatingFit
        The winner refitted on all points.
    fits : dict of str to fit
        Every cross-validated model refitted on all points.
    """

    errors: dict[str, float]
    winner: str
    fit: object
    fits: dict[str, object] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {v:.2f}%" for k, v in sorted(self.errors.items(),
                                                              key=lambda kv: kv[1]))
        return f"LOO mean abs. error: {parts} -> {self.winner} wins"


def select_latency_model(x, y, candidates=("piecewise", "piecewise-optimal", "saturating"),
                         *, tolerance: float = 0.0) -> ModelComparison:
    """Pick the latency-vs-share model with the lowest leave-one-out error.

    ``tolerance`` (a fraction in [0, 1)) prefers the first-listed candidate unless another
    is better by more than that fraction — e.g. keep Mudi's model unless the alternative is
    clearly better. Candidates that cannot be fitted to the folds (too few points) are
    skipped; if none can, ValueError.

    Parameters
    ----------
    x, y : array_like
        GPU shares and latencies (at least 3 points).
    candidates : sequence of str
        Model names from ``MODEL_FITTERS``, the preferred one first.
    tolerance : float
        Fraction in [0, 1) by which another model must beat the first to win.

    Returns
    -------
    ModelComparison
        Errors per model, the winner and the refitted models.

    Examples
    --------
    >>> x = np.arange(10.0, 100.0, 10.0)
    >>> cmp = select_latency_model(x, 8 + 600 / x, candidates=("piecewise", "saturating"))
    >>> cmp.winner
    'saturating'
    """
    tol = in_range("tolerance", tolerance, 0.0, 1.0, hi_open=True)
    unknown = [c for c in candidates if c not in MODEL_FITTERS]
    if unknown or not candidates:
        raise ValueError(f"candidates must be names from {', '.join(MODEL_FITTERS)}, "
                         f"got {list(candidates)!r}")
    xs, ys = pair(x, y, min_len=3, names=("x", "y"))
    errors: dict[str, float] = {}
    reasons: list[str] = []
    for name in candidates:
        try:
            errors[name] = float(np.mean(loo_errors(xs, ys, name)))
        except ValueError as exc:
            reasons.append(f"{name}: {exc}")
    if not errors:
        raise ValueError("no candidate model could be cross-validated: " + "; ".join(reasons))
    names = list(errors)
    winner = min(names, key=lambda k: errors[k])
    first = names[0]
    if errors[winner] >= errors[first] * (1.0 - tol):
        winner = first
    fits = {k: MODEL_FITTERS[k](xs, ys) for k in errors}
    return ModelComparison(errors=errors, winner=winner, fit=fits[winner], fits=fits)
