"""Gain variation across operating points, as plain numbers a stability check accepts.

The inner loop is designed on one nominal gain ``m0``; the real plant's gain ``m`` changes
with the MPS level, the batch size and the co-located job. Identify the gain at each operating
point, express each as a ratio ``g = m / m0`` and the envelope ``(g_min, g_max)`` is what
``gpucontrol.check_envelope(design, model, (g_min, g_max))`` checks against the design's
stable range. sysid imports nothing from gpucontrol: the envelope is two floats.

Which nominal? For the P controller of the GPUColo paper (Chen et al., ICDCS 2024) on ``l(k+1) =
l(k) + m u(k)`` with ``kp = detune / m0``, the closed-loop pole is ``1 - detune * g``. The
nominal that minimises the worst-case pole magnitude over the envelope — the largest stability
(contraction) margin — centres the envelope on deadbeat: ``m0 = detune * (m_min + m_max) / 2``
without delay. :func:`recommend_nominal` finds it numerically for a measurement delay too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import finite, int_at_least, positive

__all__ = [
    "GainEnvelope",
    "NominalChoice",
    "gain_envelope",
    "recommend_nominal",
    "worst_pole_abs",
]


def _gains(gains: Any) -> tuple[tuple[str, ...], np.ndarray]:
    """Labels and gain values from numbers, fits (``.gain``) or a mapping of either."""
    if isinstance(gains, Mapping):
        items = list(gains.items())
    elif isinstance(gains, (str, bytes, bytearray)) or not isinstance(gains, Iterable):
        raise ValueError(f"gains must be a sequence or a mapping of gains or fits (one per "
                         f"operating point), got {type(gains).__name__} {gains!r:.60}")
    else:
        items = [(str(i), g) for i, g in enumerate(gains)]
    if not items:
        raise ValueError("gains must hold at least one operating point")
    labels, values = [], []
    for label, g in items:
        v = getattr(g, "gain", g)
        values.append(finite(f"gain of operating point {label!r}", v))
        labels.append(str(label))
    arr = np.asarray(values)
    if np.any(arr == 0):
        raise ValueError("a gain of 0 leaves the plant uncontrollable at that operating point")
    if np.any(arr > 0) and np.any(arr < 0):
        raise ValueError(f"gains change sign across operating points ({arr.tolist()}): "
                         "no single nominal model can keep the loop stable")
    return tuple(labels), arr


@dataclass(frozen=True)
class GainEnvelope:
    """Identified gains per operating point and their ratios to a nominal gain.

    ``envelope`` = ``(g_min, g_max)`` is the pair to pass to
    ``gpucontrol.check_envelope(design, model, envelope)``.

    Parameters
    ----------
    labels : tuple of str
        Operating-point labels.
    gains : tuple of float
        Identified gain at each operating point.
    nominal_gain : float
        The design's nominal gain the ratios are taken against.
    """

    labels: tuple[str, ...]
    gains: tuple[float, ...]
    nominal_gain: float

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(g / self.nominal_gain for g in self.gains)

    @property
    def g_min(self) -> float:
        return min(self.ratios)

    @property
    def g_max(self) -> float:
        return max(self.ratios)

    @property
    def envelope(self) -> tuple[float, float]:
        return (self.g_min, self.g_max)

    def as_dict(self) -> dict[str, float]:
        """``{label: ratio}``, e.g. for a table."""
        return dict(zip(self.labels, self.ratios))

    def __str__(self) -> str:
        return (f"gain envelope {self.g_min:.3g}..{self.g_max:.3g} of nominal "
                f"{self.nominal_gain:.4g} over {len(self.gains)} operating point(s)")


def gain_envelope(gains: Any, nominal: float | Any | None = None) -> GainEnvelope:
    """Envelope of real/nominal gain ratios over operating points.

    Parameters
    ----------
    gains : sequence or mapping
        Identified gains, as numbers or fits with a ``gain`` attribute (StaticFit, ArxFit),
        optionally keyed by an operating-point label (``{"mps 40%": fit, ...}``).
    nominal : float or fit, optional
        The design's nominal gain; default: :func:`recommend_nominal`'s choice for the P
        controller.

    Returns
    -------
    GainEnvelope
        Gains, ratios and ``envelope``.

    Examples
    --------
    >>> env = gain_envelope({"mps20": -4.0, "mps80": -12.0}, nominal=-8.0)
    >>> env.envelope
    (0.5, 1.5)
    """
    labels, arr = _gains(gains)
    if nominal is None:
        m0 = recommend_nominal(arr).nominal_gain
    else:
        m0 = finite("nominal", getattr(nominal, "gain", nominal))
        if m0 == 0 or np.sign(m0) != np.sign(arr[0]):
            raise ValueError(f"nominal gain {m0!r} must be non-zero with the gains' sign")
    return GainEnvelope(labels=labels, gains=tuple(float(g) for g in arr),
                        nominal_gain=float(m0))


def _p_loop_polynomial(g: float, detune: float, delay: int) -> np.ndarray:
    """``z**d (z - 1) + g * detune`` in descending powers: the characteristic polynomial of
    the P loop (``kp = detune / m0``) at gain ratio ``g`` with a ``d``-period delay.

    The control core computes every design's polynomial in general form
    (``gpucontrol.design.Design.characteristic_polynomial``, which this equals for
    ``design_p``; tests/sysid/test_variation.py pins the two together); sysid cannot import
    the core, and this two-coefficient special case is the only one it needs.
    """
    left = np.r_[1.0, -1.0, np.zeros(delay)]
    left[-1] += g * detune
    return left


def worst_pole_abs(envelope: tuple[float, float], *, detune: float = 1.0,
                   delay_periods: int = 0, n_grid: int = 201) -> float:
    """Largest closed-loop pole magnitude of the P loop over the gain-ratio ``envelope``
    (below 1 means stable throughout; ``1 - value`` is the contraction margin).

    Parameters
    ----------
    envelope : (float, float)
        ``(g_min, g_max)`` real/nominal gain ratios, both > 0.
    detune : float
        The P controller's ``kp * m0`` (> 0).
    delay_periods : int
        Measurement delay in periods (>= 0).
    n_grid : int
        Gain ratios sampled across the envelope when there is a delay.

    Returns
    -------
    float
        The largest closed-loop pole magnitude.

    Examples
    --------
    >>> worst_pole_abs((0.5, 1.5))
    0.5
    """
    lo, hi = positive("envelope[0]", envelope[0]), positive("envelope[1]", envelope[1])
    if lo > hi:
        raise ValueError(f"envelope must satisfy g_min <= g_max, got {envelope!r}")
    d = int_at_least("delay_periods", delay_periods, 0)
    k = positive("detune", detune)
    if d == 0:
        return max(abs(1 - k * lo), abs(1 - k * hi))
    grid = np.unique(np.r_[np.linspace(lo, hi, n_grid), lo, hi])
    return float(max(np.max(np.abs(np.roots(_p_loop_polynomial(g, k, d)))) for g in grid))


@dataclass(frozen=True)
class NominalChoice:
    """The recommended nominal gain and the envelope and worst pole it yields (made by
    :func:`recommend_nominal`).

    Parameters
    ----------
    nominal_gain : float
        The recommended nominal gain (with the gains' sign).
    envelope : (float, float)
        The gain-ratio envelope against it.
    worst_pole_abs : float
        The largest closed-loop pole magnitude over that envelope.
    """

    nominal_gain: float
    envelope: tuple[float, float]
    worst_pole_abs: float

    @property
    def stable(self) -> bool:
        return self.worst_pole_abs < 1.0

    @property
    def margin(self) -> float:
        """Contraction margin ``1 - worst |pole|`` (> 0: stable at every operating point)."""
        return 1.0 - self.worst_pole_abs


def recommend_nominal(gains: Iterable[float] | Mapping[str, Any], *, detune: float = 1.0,
                      delay_periods: int = 0) -> NominalChoice:
    """Nominal gain that maximises the P loop's stability margin over the identified gains.

    Minimises the worst closed-loop pole magnitude over all operating points. Without delay
    the answer is ``detune * (m_min + m_max) / 2``, which puts the envelope symmetrically
    around deadbeat; with a delay the optimum is found numerically.

    Parameters
    ----------
    gains : sequence or mapping
        Identified gains, as numbers or fits with a ``gain`` attribute, optionally keyed by
        operating-point label.
    detune : float
        The P controller's ``kp * m0`` (> 0).
    delay_periods : int
        Measurement delay in periods (>= 0).

    Returns
    -------
    NominalChoice
        Nominal gain, envelope and worst pole.

    Examples
    --------
    >>> c = recommend_nominal([-4.0, -12.0])
    >>> c.nominal_gain, c.envelope, c.worst_pole_abs
    (-8.0, (0.5, 1.5), 0.5)
    """
    _, arr = _gains(gains)
    k = positive("detune", detune)
    d = int_at_least("delay_periods", delay_periods, 0)
    m_lo, m_hi = float(np.min(np.abs(arr))), float(np.max(np.abs(arr)))
    sign = float(np.sign(arr[0]))
    if d == 0:
        m0 = k * (m_lo + m_hi) / 2.0
    else:
        from scipy.optimize import minimize_scalar

        def cost(log_m0: float) -> float:
            m = math.exp(log_m0)
            return worst_pole_abs((m_lo / m, m_hi / m), detune=k, delay_periods=d, n_grid=41)

        grid = np.linspace(math.log(m_lo * k / 4), math.log(m_hi * k * 4), 81)
        i = int(np.argmin([cost(x) for x in grid]))
        res = minimize_scalar(cost, bounds=(grid[max(i - 1, 0)], grid[min(i + 1, 80)]),
                              method="bounded")
        m0 = math.exp(float(res.x) if res.fun <= cost(grid[i]) else float(grid[i]))
    env = (m_lo / m0, m_hi / m0)
    return NominalChoice(nominal_gain=sign * m0, envelope=env,
                         worst_pole_abs=worst_pole_abs(env, detune=k, delay_periods=d))
