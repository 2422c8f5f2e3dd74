"""The training's rate curve: iteration time from iterations counted per period.

Each training iteration takes its compute time ``t`` plus the time the sleep knob keeps it off
the GPU, ``b * s`` (``b = 1`` when the sleep ``s`` is taken once per iteration; a duty cycler
that runs the training ``q`` seconds between pauses gives ``b = t / q``). Over a period of
``T`` seconds in which ``n`` iterations completed, the time balance is ``T = n (t + b s)``,
up to the part of an iteration that straddles a period's end. Summed over the record, and
summed again weighted by the sleep (the excitation, which the straddling part does not
depend on), it gives two linear equations in ``(t, b)``: an instrumental-variables fit with
the excitation as instrument. The rounding of a few whole iterations per period then averages
out, where least squares on ``T / n`` (or on ``n``) is biased by it (an iteration of 1.7 s
counted per 4 s period came out 6 % short). Counting iterations needs nothing from the
training but its progress.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import positive, vector

__all__ = ["IterationFit", "fit_iteration_time"]


@dataclass(frozen=True)
class IterationFit:
    """The time balance ``T = n (t + b s)`` fitted to one record.

    Parameters
    ----------
    iteration_s : float
        ``t``: the training's iteration time without sleep (s).
    sleep_factor : float
        ``b``: seconds off the GPU per iteration per second of sleep (1 for a sleep taken once
        per iteration).
    rmse_s : float
        Root-mean-square residual of the balance (s per period).
    n : int
        Periods used (those with iterations counted).
    """

    iteration_s: float
    sleep_factor: float
    rmse_s: float
    n: int

    def rate(self, sleep_s: float) -> float:
        """Iterations per second at ``sleep_s`` (s)."""
        return 1.0 / (self.iteration_s + self.sleep_factor * float(sleep_s))


def fit_iteration_time(sleep_s, iterations, period_s: float = 4.0, *,
                       sleep_factor: float | None = None) -> IterationFit:
    """Fit the training's iteration time from iterations counted per period.

    Parameters
    ----------
    sleep_s : array_like
        The sleep applied in each period (s).
    iterations : array_like
        Training iterations completed in each period (fractions allowed); periods with none
        (a restart) are left out.
    period_s : float
        Period length (s), > 0.
    sleep_factor : float, optional
        ``b`` when known (1 for the per-iteration sleep of the training hook); None fits it
        too (needs the sleep to vary).

    Returns
    -------
    IterationFit
        ``t``, ``b``, the balance's rms residual and the periods used.

    Raises
    ------
    ValueError
        Lengths differ, fewer than two usable periods, or the fit gives a non-positive time.

    Examples
    --------
    >>> s = np.array([0.0, 0.5, 1.0, 0.25])
    >>> fit = fit_iteration_time(s, 4.0 / (0.4 + s))
    >>> round(fit.iteration_s, 6), round(fit.sleep_factor, 6)
    (0.4, 1.0)
    """
    s = vector("sleep_s", sleep_s, min_len=1)
    n = vector("iterations", iterations, min_len=1)
    if s.size != n.size:
        raise ValueError(f"sleep_s and iterations differ in length ({s.size} vs {n.size})")
    T = positive("period_s", period_s)
    ok = n > 0
    if ok.sum() < 2:
        raise ValueError(f"iterations: {int(ok.sum())} period(s) counted any; need at least 2")
    s, n = s[ok], n[ok]
    if sleep_factor is None:
        # b is identifiable only if the sleep varies: with one sleep the two equations are
        # the same one, and solving them anyway gives whatever the rounding makes of them
        if float(np.ptp(s)) <= 1e-9 * max(float(np.max(np.abs(s))), 1e-3):
            raise ValueError(f"sleep_s must vary to fit the sleep factor (or pass "
                             f"sleep_factor=): every period counted slept {s[0]:g} s")
        # instruments (1, s): sum(T - n (t + b s)) = 0 and sum(s (T - n (t + b s))) = 0
        Z = np.column_stack([np.ones_like(s), s])
        X = np.column_stack([n, n * s])
        try:
            t, b = np.linalg.solve(Z.T @ X, Z.T @ np.full(n.size, T))
        except np.linalg.LinAlgError:
            raise ValueError("sleep_s must vary to fit the sleep factor (or pass "
                             "sleep_factor=)") from None
    else:
        b = positive("sleep_factor", sleep_factor)
        t = float((T * n.size - b * np.sum(n * s)) / np.sum(n))
    if not (np.isfinite(t) and t > 0):
        raise ValueError(f"the counts give no positive iteration time (fitted {t:.4g} s): "
                         "check that iterations and sleeps are per period")
    resid = T - n * (t + b * s)
    return IterationFit(float(t), float(b), float(np.sqrt(np.mean(resid ** 2))), int(n.size))
