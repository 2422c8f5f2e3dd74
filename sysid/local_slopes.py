"""How far the local slope strays from one identified slope across the excited span.

A white-noise fit of ``latency = gain * sleep + offset`` over [0, 1] s reports one slope, but
the latency is linear in the training's duty ``t / (t + s)`` (``t``: iteration time), not in the
sleep, so the local slope near sleep 0 can be several times the fitted one. A P loop designed on
the fitted slope is stable only while the real/nominal ratio stays below ``2 / detune`` (below
``1 / detune`` with a one-period measurement delay); :func:`local_slopes` reports the range of
local/fitted ratios over the excited span and warns when it leaves that range.

>>> import numpy as np
>>> s = np.linspace(0.0, 1.0, 60)
>>> y = 60.0 + 40.0 * 0.2 / (0.2 + s)
>>> r = local_slopes(s, y, stable_ratio=4.0, warn=False)
>>> round(r.iteration_s, 2), r.ratio_range[1] > 4.0
(0.2, True)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ._checks import flag, not_constant, pair, positive

__all__ = ["LocalSlopes", "local_slopes"]


@dataclass(frozen=True)
class LocalSlopes:
    """Result of :func:`local_slopes`.

    Parameters
    ----------
    gain : float
        The single (least-squares) slope over the span.
    span : (float, float)
        The excited input range.
    iteration_s : float
        The duty law's time constant ``t`` that fits best (``inf``: the data are linear).
    local_gains : tuple of float
        Local slopes ``d latency / d u`` at ``points``.
    points : tuple of float
        Where the local slopes are evaluated (9 points across the span).
    ratio_range : (float, float)
        (min, max) of local slope / ``gain``.
    stable_ratio : float
        The loop's largest stable real/nominal gain ratio it was checked against (NaN: none).
    warning : str or None
        Why the ratio range leaves the stable range, if it does.
    """

    gain: float
    span: tuple[float, float]
    iteration_s: float
    local_gains: tuple[float, ...]
    points: tuple[float, ...]
    ratio_range: tuple[float, float]
    stable_ratio: float
    warning: str | None


def local_slopes(u, y, *, stable_ratio: float | None = None, warn: bool = True) -> LocalSlopes:
    """Fit ``y = a + b t / (t + u)`` (best ``t`` on a grid, ``a``/``b`` by least squares) and
    report the local slopes across the excited span against the single linear slope.

    Parameters
    ----------
    u : array_like
        Inputs (sleep intervals, s, >= 0); at least 6, not all equal.
    y : array_like
        Outputs (latency, ms), same length.
    stable_ratio : float, optional
        The loop's largest stable real/nominal ratio (``2 / detune``; ``1 / detune`` with a
        one-period delay): a finite number > 0, or None for no check. When the local/fitted
        ratio exceeds it, the result carries a warning (and :func:`warnings.warn` is called if
        ``warn``).
    warn : bool
        Issue a ``UserWarning`` when the range exceeds ``stable_ratio``.

    Returns
    -------
    LocalSlopes
        The fitted slope, the local slopes and their ratio range.

    Raises
    ------
    ValueError
        On mismatched lengths, NaN/inf, fewer than 6 samples, a constant or negative input,
        a ``stable_ratio`` that is not a finite number > 0, a ``warn`` that is not a bool.
    """
    sr = math.nan if stable_ratio is None else positive("stable_ratio", stable_ratio)
    do_warn = flag("warn", warn)
    x, yy = pair(u, y, min_len=6)
    not_constant("u", x)
    if np.any(x < 0):
        raise ValueError("u must be >= 0 (a sleep interval)")
    phi = np.column_stack([x, np.ones(x.size)])
    gain = float(np.linalg.lstsq(phi, yy, rcond=None)[0][0])
    lo, hi = float(x.min()), float(x.max())
    width = hi - lo
    best_t, best_ssr, best_b = math.inf, float(np.sum((yy - phi @ np.linalg.lstsq(
        phi, yy, rcond=None)[0]) ** 2)), 0.0
    for t in np.geomspace(1e-3 * width + 1e-9, 100.0 * width, 400):
        d = t / (t + x)
        a_mat = np.column_stack([d, np.ones(x.size)])
        coef = np.linalg.lstsq(a_mat, yy, rcond=None)[0]
        ssr = float(np.sum((yy - a_mat @ coef) ** 2))
        if ssr < best_ssr - 1e-12:
            best_t, best_ssr, best_b = float(t), ssr, float(coef[0])
    pts = np.linspace(lo, hi, 9)
    if math.isfinite(best_t):
        local = -best_b * best_t / (best_t + pts) ** 2
    else:
        local = np.full(pts.size, gain)
    ratios = local / gain if gain != 0 else np.full(pts.size, math.nan)
    rr = (float(np.min(ratios)), float(np.max(ratios)))
    msg = None
    if stable_ratio is not None and (rr[1] >= sr or rr[0] <= 0):
        msg = (f"the local slope ranges over {rr[0]:.2g}..{rr[1]:.2g} x the fitted slope "
               f"{gain:.3g} across u in [{lo:g}, {hi:g}], beyond the loop's stable ratio "
               f"{sr:.3g}: schedule the gain on the operating point (the iteration time fits "
               f"as {best_t:.3g} s), lower the detune or identify over a narrower span")
        if do_warn:
            warnings.warn(msg, UserWarning, stacklevel=2)
    return LocalSlopes(gain, (lo, hi), best_t, tuple(float(v) for v in local),
                       tuple(float(v) for v in pts), rr, sr, msg)
