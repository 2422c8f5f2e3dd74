"""The latency as a function of the training's running fraction (its duty).

A training process that sleeps ``s`` after each iteration of ``t`` seconds runs a fraction
``d = t / (t + s)`` of the time. Two interference shapes are common, and one law holds both:

* additive (spatial sharing with spare capacity; each running moment of the training adds
  delay): ``l = c + A d``;
* time-sliced (the inference gets the device only while the training does not hold it; its
  service rate falls linearly in ``d``): ``1 / l`` linear in ``d``, ``l = c / (1 - B d)``.

:func:`fit_duty_law` fits ``l = (c + A d) / (1 - B d)`` with ``c > 0``, ``A >= 0`` and ``B`` in
``[0, 0.98]`` by least squares on the log of the latency (a relative error, as a controller
that corrects the curve by a factor reads it). ``B = 0`` is the additive law, ``A = 0`` the
time-sliced one. On the simulated plant calibrated to the H100 run, at full share (the
training time-sliced beside the inference), the latency falls from 192 ms to 22 ms over sleeps
of 0 to 1 s with ``1 / l`` a line in ``d``: the law fits the noisy period means of white-noise
sleeps within 4-6 % (rms of ``log l``), where the additive law's residual on the noise-free
curve is 40 % of the mean latency and a line in the sleep misses by about 50 %.

>>> import numpy as np
>>> d = np.linspace(0.2, 1.0, 30)
>>> law = fit_duty_law(0.25 * (1 - d) / d, 20.0 / (1 - 0.9 * d), 0.25)
>>> round(law.c, 2), round(law.a, 2), round(law.b, 2)
(20.0, 0.0, 0.9)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from ._checks import pair, positive

#: The largest bend fitted: at ``B = 0.98`` the law's latency at full duty is 50x its idle
#: latency (the H100-calibrated simulated plant's is 0.90, 8.7x).
MAX_BEND = 0.98


@dataclass(frozen=True)
class DutyLaw:
    """``l = (c + a d) / (1 - b d)`` over the duty ``d = t / (t + s)``.

    Parameters
    ----------
    c : float
        Latency with the training stopped (ms, > 0).
    a : float
        Additive interference at full duty (ms, >= 0).
    b : float
        Bend, in [0, 0.98]: the share of the inference's service rate the training takes at
        full duty.
    rms_log : float
        Root-mean-square residual of ``log l`` (a relative error).
    n : int
        Readings fitted.
    """

    c: float
    a: float
    b: float
    rms_log: float
    n: int

    def latency(self, duty):
        """The law's latency (ms) at ``duty`` (array-like)."""
        d = np.asarray(duty, float)
        return (self.c + self.a * d) / (1.0 - self.b * d)


def fit_duty_law(sleep_s, latency_ms, iteration_s: float) -> DutyLaw:
    """Fit :class:`DutyLaw` to readings taken at the sleeps ``sleep_s``.

    Parameters
    ----------
    sleep_s : array_like
        The sleep of each reading's period (s, >= 0).
    latency_ms : array_like
        The readings (ms, > 0), as many as sleeps, at least 3.
    iteration_s : float
        The training's iteration time (s, > 0), or a duty cycler's run quantum: the duty's
        time constant.

    Returns
    -------
    DutyLaw
        ``c``, ``a``, ``b``, the residual's RMS in ``log l`` and the readings used.

    Raises
    ------
    ValueError
        Fewer than 3 readings, a negative sleep or a latency that is not positive, or sleeps
        that give one duty only.
    """
    s, y = pair(sleep_s, latency_ms, min_len=3, names=("sleep_s", "latency_ms"))
    t = positive("iteration_s", iteration_s)
    if np.any(s < 0) or np.any(y <= 0):
        raise ValueError("sleep_s must be >= 0 and latency_ms > 0")
    d = t / (t + s)
    if np.ptp(d) <= 0:
        raise ValueError("the sleeps give one duty only: nothing to fit a law to")
    a0, c0 = np.polyfit(d, y, 1)
    x0 = [max(float(c0), 0.5 * float(y.min())), max(float(a0), 1e-6), 0.0]
    log_y = np.log(y)

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log((x[0] + x[1] * d) / (1.0 - x[2] * d)) - log_y

    fit = least_squares(residual, x0, bounds=([1e-9, 0.0, 0.0], [np.inf, np.inf, MAX_BEND]))
    c, a, b = (float(v) for v in fit.x)
    return DutyLaw(c, a, b, float(np.sqrt(np.mean(fit.fun ** 2))), len(y))
