"""Stability of a designed loop when the real plant differs from the nominal model.

The real plant gain is ``g * model.gain`` with ``g > 0`` the real/nominal *gain ratio* (the
GPUColo paper (Chen et al., ICDCS 2024), Sec. V-B: the controller uses the nominal model;
substituting its inputs into the actual model gives the closed loop whose stability we check).
For the paper's P controller the closed-loop pole is ``1 - g``, stable exactly for ``0 < g <
2``.

With a one-period measurement delay the P loop's characteristic polynomial becomes
``z**2 - z + g * detune``. Jury's conditions for ``z**2 + a1 z + a0`` are ``|a0| < 1``,
``1 + a1 + a0 > 0`` and ``1 - a1 + a0 > 0``; here they reduce to ``0 < g * detune < 1``, so the
stable range halves to ``(0, 1 / detune)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from gpucontrol._validate import finite, int_at_least
from gpucontrol.design import (
    Design,
    PDesign,
    _settling,
    check_design,
    check_model,
    p_critical_gain,
    step_sequence,
)
from gpucontrol.errors import ConfigurationError


def jury(coefficients: ArrayLike) -> bool:
    """Jury stability test: True iff every root of the polynomial lies strictly inside |z| = 1.

    ``coefficients`` are real, in descending powers of z (as for ``numpy.roots``); leading
    zeros are ignored, and what remains must have degree >= 1 (a constant has no roots: no
    stability to judge, so it is refused rather than called stable). Uses Jury's table in its
    Schur–Cohn reduction form: with
    ``p(z) = a0 z**n + ... + an`` and ``|an| < |a0|``, the polynomial with coefficients
    ``a0*a_k - an*a_{n-k}`` (k = 0..n-1) has degree n-1 and all roots inside the unit circle
    iff ``p`` does. Roots on the circle count as unstable.

    Parameters
    ----------
    coefficients : array_like
        Real polynomial coefficients, descending powers of z.

    Returns
    -------
    bool
        Whether every root lies strictly inside the unit circle.

    Examples
    --------
    >>> jury([1.0, -0.5])          # z - 0.5
    True
    >>> jury([1.0, -1.0, 0.5])     # z**2 - z + 0.5: poles 0.5 ± 0.5j
    True
    >>> jury([1.0, -1.0])          # z - 1: on the circle
    False
    """
    try:
        if np.asarray(coefficients).dtype.kind in "bUSc":   # bools, strings, complex numbers
            raise TypeError
        a = np.asarray(coefficients, dtype=float)
    except (TypeError, ValueError):
        raise ConfigurationError("coefficients must be a non-empty sequence of finite numbers, "
                                 f"got {coefficients!r}") from None
    if a.ndim > 1 and sum(n > 1 for n in a.shape) > 1:  # a table is not one polynomial
        raise ConfigurationError(f"coefficients must be one polynomial (a 1-D sequence), got "
                                 f"an array of shape {a.shape}")
    a = a.ravel()
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ConfigurationError("coefficients must be a non-empty sequence of finite numbers")
    nz = np.flatnonzero(a)
    if nz.size == 0:
        raise ConfigurationError("coefficients must not all be zero")
    a = a[nz[0]:]
    if a.size < 2:  # a constant: no root to judge (a characteristic polynomial has degree >= 1)
        raise ConfigurationError(
            f"coefficients must describe a polynomial of degree >= 1 (a characteristic "
            f"polynomial), got {coefficients!r}: without its leading zeros it is the constant "
            f"{a[0]:g}")
    scale = np.max(np.abs(a))
    a = a / scale
    eps = 1e-12
    # necessary conditions (Jury): p(1) > 0 and (-1)^n p(-1) > 0 after making a0 > 0
    if a[0] < 0:
        a = -a
    n = a.size - 1
    if np.polyval(a, 1.0) <= eps or ((-1) ** n) * np.polyval(a, -1.0) <= eps:
        return False
    while a.size > 1:
        a0, an = a[0], a[-1]
        if abs(an) >= abs(a0) - eps:
            return False
        a = (a0 * a - an * a[::-1])[:-1]
        a = a / np.max(np.abs(a))
        if a[0] < 0:
            a = -a
    return True


def is_stable(design: Design, gain_ratio: float = 1.0, delay_periods: int | None = None
              ) -> bool:
    """Jury test of the design's closed loop at one gain ratio.

    Parameters
    ----------
    design : Design
        A design from :func:`~gpucontrol.design_p` or :func:`~gpucontrol.design_pi`.
    gain_ratio : float
        Real/nominal plant gain ratio.
    delay_periods : int, optional
        Measurement delay (whole periods, in [0, 100]); default the design's
        ``delay_periods``.

    Returns
    -------
    bool
        Whether the closed loop is stable.

    Examples
    --------
    >>> from gpucontrol import LinearLatencyModel, design_p
    >>> p = design_p(LinearLatencyModel(-12.0, 95.0))
    >>> is_stable(p, 1.5), is_stable(p, 2.5), is_stable(p, 1.5, delay_periods=1)
    (True, False, False)
    """
    check_design(design)
    return jury(design.characteristic_polynomial(gain_ratio, delay_periods))


def _crossings(design: Design, delay_periods: int, n_grid: int = 4001) -> list[float]:
    """Positive gain ratios at which a closed-loop pole lies on the unit circle.

    On the circle ``z = e^{jw}``, the characteristic equation gives
    ``g(w) = -z**d (z - 1) den(z) / (gain * num(z))``; crossings are the ``w`` where ``g`` is
    real and positive.
    """
    from scipy.optimize import brentq

    d = delay_periods
    num, den, m = design.controller_num, design.controller_den, design.model.gain

    def g_of(w: float) -> complex:
        z = complex(math.cos(w), math.sin(w))
        return complex(-(z ** d) * (z - 1) * np.polyval(den, z) / (m * np.polyval(num, z)))

    out: list[float] = []
    w = np.linspace(1e-9, math.pi, n_grid)
    im = np.array([g_of(x).imag for x in w])
    re = np.array([g_of(x).real for x in w])
    for i in range(n_grid - 1):
        if im[i] == 0.0 and re[i] > 0:
            out.append(float(re[i]))
        elif im[i] * im[i + 1] < 0:
            root = brentq(lambda x: g_of(x).imag, w[i], w[i + 1], xtol=1e-14)
            gr = g_of(root).real
            if gr > 0:
                out.append(float(gr))
    end = g_of(math.pi)
    if abs(end.imag) < 1e-9 and end.real > 0:
        out.append(float(end.real))
    return sorted({round(x, 12) for x in out})


def stable_gain_range(design: Design, model=None, delay_periods: int | None = None
                      ) -> tuple[float, float]:
    """(lo, hi): the open interval of real/nominal gain ratios ``g`` around 1 that keeps the
    loop stable.

    ``model`` is the nominal model (defaults to ``design.model``; accepted so that a design can
    be checked against a different nominal, e.g. a re-identified one). For the P design the
    closed form ``(0, k_d / detune)`` is returned for every delay ``d``, with
    ``k_d = 2 sin(pi / (2 (2 d + 1)))`` (2 without delay, 1 with one period, 0.618 with two):
    the gain at which ``z**d (z - 1) + k`` has a root on the unit circle. It is the whole stable
    set, so it may exclude 1 when the detune is too aggressive for the delay. For any other
    design the boundaries are the gain ratios where a pole crosses the unit circle, found on
    the circle, and a design unstable at ratio 1 raises ConfigurationError.

    Parameters
    ----------
    design : Design
        The designed loop.
    model : LinearLatencyModel, optional
        Nominal model to judge against (default ``design.model``).
    delay_periods : int, optional
        Measurement delay (whole periods, in [0, 100]); default the design's
        ``delay_periods``.

    Returns
    -------
    (float, float)
        ``(lo, hi)``; ``hi`` may be ``inf``.

    Examples
    --------
    >>> from gpucontrol import LinearLatencyModel, design_p
    >>> m = LinearLatencyModel(-12.0, 95.0)
    >>> stable_gain_range(design_p(m), m)
    (0.0, 2.0)
    >>> tuple(round(x, 9) for x in stable_gain_range(design_p(m), m, delay_periods=1))
    (0.0, 1.0)
    """
    check_design(design)
    d = design._delay(delay_periods)
    if model is not None and check_model("model", model) != design.model:
        design = _rebase(design, model)
    if isinstance(design, PDesign) and design.ki == 0.0:
        scale = design.kp * design.model.gain  # = detune
        return 0.0, p_critical_gain(d) / scale
    if not is_stable(design, 1.0, d):
        delay = f" with delay_periods={d}" if d else ""
        raise ConfigurationError(f"the design is unstable at the nominal gain (gain ratio 1)"
                                 f"{delay}: it has no stable gain range to report")
    edges = _crossings(design, d)
    lo = max([e for e in edges if e < 1.0], default=0.0)
    hi = min([e for e in edges if e > 1.0], default=math.inf)
    return float(lo), float(hi)


def _rebase(design: Design, model) -> Design:
    """The same controller gains judged against another nominal model (gain ratio frame)."""
    from dataclasses import replace

    return replace(design, model=model)


@dataclass(frozen=True)
class RobustnessRow:
    gain_ratio: float
    poles: tuple[complex, ...]
    stable: bool
    settling_periods: float
    overshoot_pct: float
    steady_state_error: float


@dataclass(frozen=True)
class RobustnessTable:
    """Rows of :func:`robustness_sweep`; ``to_records()`` gives plain dicts (pandas-friendly)."""

    rows: tuple[RobustnessRow, ...]
    delay_periods: int = 0
    columns: tuple[str, ...] = field(default=(
        "gain_ratio", "max_pole_abs", "stable", "settling_periods", "overshoot_pct",
        "steady_state_error"))

    def to_records(self) -> list[dict]:
        return [{
            "gain_ratio": r.gain_ratio,
            "max_pole_abs": float(max(abs(p) for p in r.poles)) if r.poles else 0.0,
            "stable": r.stable,
            "settling_periods": r.settling_periods,
            "overshoot_pct": r.overshoot_pct,
            "steady_state_error": r.steady_state_error,
        } for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __repr__(self) -> str:
        """One line: the gain ratios swept, the delay, the stable ones and the slowest
        settling among them (the dataclass's own repr printed every row and its poles).

        >>> from gpucontrol import LinearLatencyModel, design_p
        >>> robustness_sweep(design_p(LinearLatencyModel(-12.0, 95.0)), ratios=[0.5, 1.0, 2.5])
        RobustnessTable(3 gain ratios 0.5..2.5, delay_periods=0: 2 stable (0.5..1),
        slowest settling 6 periods)
        """
        g = [r.gain_ratio for r in self.rows]
        if not g:
            return f"RobustnessTable(no rows, delay_periods={self.delay_periods})"
        ok = [r.gain_ratio for r in self.rows if r.stable]
        if ok:
            lo, hi = min(ok), max(ok)
            gaps = ", unstable ones between" if sum(lo <= x <= hi for x in g) > len(ok) else ""
            settle = max(r.settling_periods for r in self.rows if r.stable)
            stable = (f"{len(ok)} stable ({lo:g}..{hi:g}{gaps}), slowest settling "
                      f"{settle:g} periods")
        else:
            stable = "none stable"
        return (f"RobustnessTable({len(g)} gain ratios {min(g):g}..{max(g):g}, "
                f"delay_periods={self.delay_periods}: {stable})")


def robustness_sweep(design: Design, model=None, ratios: Iterable[float] | None = None,
                     delay_periods: int | None = None, horizon: int = 400
                     ) -> RobustnessTable:
    """Closed-loop behaviour of ``design`` for each real/nominal gain ratio in ``ratios``.

    Each row has the poles, the Jury verdict, the 2 % settling time in periods, the step
    overshoot in percent and the steady-state error of a unit SLO step (NaN/inf when unstable).

    Parameters
    ----------
    design : Design
        The designed loop.
    model : LinearLatencyModel, optional
        Nominal model to judge against (default ``design.model``).
    ratios : iterable of float, optional
        Real/nominal gain ratios, at least one, each > 0 (default 0.1 to 2.5 in steps of 0.1).
    delay_periods : int, optional
        Measurement delay (whole periods, in [0, 100]); default the design's
        ``delay_periods``.
    horizon : int
        Periods simulated for the step response's overshoot (>= 1); the settling time is
        simulated further when the response has not settled by then.

    Returns
    -------
    RobustnessTable
        One row per ratio; ``to_records()`` gives plain dicts.

    Examples
    --------
    >>> from gpucontrol import LinearLatencyModel, design_p
    >>> t = robustness_sweep(design_p(LinearLatencyModel(-12.0, 95.0)), ratios=[1.0, 2.5])
    >>> [(r["gain_ratio"], r["stable"]) for r in t.to_records()]
    [(1.0, True), (2.5, False)]
    """
    check_design(design)
    d = design._delay(delay_periods)
    if model is not None and check_model("model", model) != design.model:
        design = _rebase(design, model)
    horizon = int_at_least("horizon", horizon, 1)
    if ratios is None:
        ratios = np.round(np.linspace(0.1, 2.5, 25), 6)
    elif isinstance(ratios, (str, bytes)) or not isinstance(ratios, Iterable):
        raise TypeError(f"ratios must be a sequence of gain ratios, got {ratios!r}")
    else:
        ratios = list(ratios)
        if not ratios:
            raise ConfigurationError("ratios must hold at least one gain ratio > 0 (or None "
                                     "for the default 0.1..2.5), got none")
    rows = []
    for g in ratios:
        g = finite("ratios[]", g)
        if g <= 0:
            raise ConfigurationError(f"gain ratios must be > 0, got {g!r}")
        char = design.characteristic_polynomial(g, d)
        poles = tuple(complex(p) for p in np.roots(char))
        stable = jury(char)
        if stable:
            num = design._closed_loop_num(g, d)
            y = step_sequence(char, num, horizon)
            final = float(np.polyval(num, 1.0) / np.polyval(char, 1.0))
            settle = _settling(char, num, horizon, final=final)
            over = max(0.0, (float(np.max(y)) - final) / abs(final) * 100.0)
            sse = 1.0 - final
        else:
            settle, over, sse = math.inf, math.inf, math.nan
        rows.append(RobustnessRow(g, poles, stable, settle, over, sse))
    return RobustnessTable(tuple(rows), d)


def robustness_plot(table: RobustnessTable, ax=None, title: str | None = None):
    """Plot max |pole| and settling periods against the gain ratio.

    Parameters
    ----------
    table : RobustnessTable
        What :func:`robustness_sweep` returned.
    ax : matplotlib Axes, optional
        Where to draw (default: a new figure).
    title : str, optional
        Plot title (default names the delay).

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn on.
    """
    if not isinstance(table, RobustnessTable):
        raise TypeError(f"table must be what robustness_sweep returned, got "
                        f"{type(table).__name__}")
    rec = sorted(table.to_records(), key=lambda r: r["gain_ratio"])
    if not rec:
        raise ConfigurationError("table has no rows: robustness_sweep was given no ratios")
    own = ax is None
    if ax is None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 3.6))
    else:
        fig = ax.figure
    g = [r["gain_ratio"] for r in rec]
    ax.plot(g, [r["max_pole_abs"] for r in rec], "o-", label="max |pole|")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xlabel("real / nominal plant gain")
    ax.set_ylabel("max |pole|")
    ax2 = ax.twinx()
    ax2.plot(g, [r["settling_periods"] if math.isfinite(r["settling_periods"]) else np.nan
                 for r in rec], "s:", color="tab:orange", label="settling periods")
    ax2.set_ylabel("settling (periods)")
    # each run of unstable ratios, out to halfway to its stable neighbours
    label = "unstable"
    k = 0
    while k < len(rec):
        if rec[k]["stable"]:
            k += 1
            continue
        j = k
        while j + 1 < len(rec) and not rec[j + 1]["stable"]:
            j += 1
        lo = g[k] if k == 0 else (g[k - 1] + g[k]) / 2
        hi = g[j] if j == len(rec) - 1 else (g[j] + g[j + 1]) / 2
        ax.axvspan(lo, hi, color="tab:red", alpha=0.1, label=label)
        label = "_nolegend_"
        k = j + 1
    ax.set_title(title or f"robustness (delay {table.delay_periods} period(s))")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    for a in (ax, ax2):   # headroom: the legend's row above every point, not over the first
        lo, hi = a.get_ylim()
        a.set_ylim(lo, hi + 0.3 * (hi - lo))
    ax.legend(h1 + h2, l1 + l2, loc="upper center", ncol=len(l1 + l2), fontsize="small")
    if own:
        fig.tight_layout()
    return fig


@dataclass(frozen=True)
class EnvelopeCheck:
    """Verdict of :func:`check_envelope` for a measured gain envelope."""

    envelope: tuple[float, float]
    stable_range: tuple[float, float]
    stable: bool
    margin_low: float
    margin_high: float
    worst_settling_periods: float

    def __str__(self) -> str:
        verdict = "STABLE" if self.stable else "UNSTABLE"
        where = "within" if self.stable else "not within"
        return (f"{verdict}: envelope {self.envelope[0]:.3g}..{self.envelope[1]:.3g} {where} "
                f"stable range {self.stable_range[0]:.3g}..{self.stable_range[1]:.3g}; "
                f"worst settling {self.worst_settling_periods:g} periods")


def check_envelope(design: Design, model=None, envelope: tuple[float, float] = (1.0, 1.0),
                   delay_periods: int | None = None) -> EnvelopeCheck:
    """Is the loop stable for every real/nominal gain ratio in ``envelope = (g_min, g_max)``?

    ``margin_low``/``margin_high`` are the factors by which the envelope could widen before
    reaching the stability boundary (``g_min / lo`` and ``hi / g_max``; > 1 means safe).

    Parameters
    ----------
    design : Design
        The designed loop.
    model : LinearLatencyModel, optional
        Nominal model to judge against (default ``design.model``).
    envelope : (float, float)
        ``(g_min, g_max)`` with ``0 < g_min <= g_max``, e.g. ``sysid.gain_envelope(...)
        .envelope``.
    delay_periods : int, optional
        Measurement delay (whole periods, in [0, 100]); default the design's
        ``delay_periods``.

    Returns
    -------
    EnvelopeCheck
        The verdict, the stable range, the margins and the worst settling time.

    Examples
    --------
    >>> from gpucontrol import LinearLatencyModel, design_p
    >>> m = LinearLatencyModel(-12.0, 95.0)
    >>> check_envelope(design_p(m), m, (0.5, 1.5)).stable
    True
    """
    try:
        g_min, g_max = envelope
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"envelope must be a (g_min, g_max) pair, got {envelope!r}") from None
    g_min, g_max = finite("envelope[0]", g_min), finite("envelope[1]", g_max)
    if not (0 < g_min <= g_max):
        raise ConfigurationError(f"envelope must satisfy 0 < g_min <= g_max, got {envelope!r}")
    lo, hi = stable_gain_range(design, model, delay_periods)
    ok = lo < g_min and g_max < hi
    grid = np.unique(np.r_[np.linspace(g_min, g_max, 9), g_min, g_max])
    table = robustness_sweep(design, model, grid, delay_periods)
    worst = max(r.settling_periods for r in table.rows)
    return EnvelopeCheck((g_min, g_max), (lo, hi), ok,
                         math.inf if lo == 0 else g_min / lo, hi / g_max, worst)
