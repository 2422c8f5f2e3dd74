"""The two knobs on the training, as the controller is told about them.

:class:`ShareKnob` is the spatial share as the backend offers it: which shares (any whole
percent within bounds, or a few green-context partitions), and what one change costs the
training (an MPS restart's downtime; nothing for a restart-free backend). :class:`SleepKnob`
is the sleep: its range, and whether it is taken once per iteration (the training hook) or by
a duty cycler that runs the training a fixed quantum between pauses.

Both are plain frozen records, checked once; the controller derives what it needs from them
(the outer loop's candidate shares and the cost of a move, the hold after a change, the duty's
time constant).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpucontrol._validate import bounds, finite, in_range, int_at_least, positive
from gpucontrol.errors import ConfigurationError

__all__ = ["ShareKnob", "SleepKnob"]


@dataclass(frozen=True)
class ShareKnob:
    """The training's spatial share (MPS active-thread percentage or green-context partition).

    Parameters
    ----------
    levels_pct : sequence of float, optional
        The only shares the backend takes (e.g. the green-context partitions a training
        created, 25/50/75/100), at least one, each within ``bounds_pct``; None: any multiple of
        ``granularity_pct`` within the bounds.
    bounds_pct : (float, float)
        Lowest and highest share, within [1, 100] %.
    granularity_pct : float
        Smallest step between two shares (points, > 0; an MPS percentage: 1).
    change_s : float, optional
        Training time one change costs (s, >= 0): an MPS restart's downtime, 0 for a
        restart-free backend. None: a restart of unknown length (the default outer loop then
        prices it at :attr:`ASSUMED_CHANGE_S`; the actuator may tell the real one later).
    initial_pct : float, optional
        The share the backend is at now (default: the highest; on levels, the largest level
        not above it).

    Examples
    --------
    >>> ShareKnob.green((25, 50, 75, 100)).restart_free
    True
    >>> ShareKnob(initial_pct=80.0).start_pct
    80.0
    >>> ShareKnob.green((25, 50, 75, 100), initial_pct=60.0).start_pct
    50.0
    """

    levels_pct: tuple[float, ...] | None = None
    bounds_pct: tuple[float, float] = (1.0, 100.0)
    granularity_pct: float = 1.0
    change_s: float | None = None
    initial_pct: float | None = None

    #: The change cost assumed when none is given (s): the GPUColo paper's longest measured
    #: MPS restart.
    ASSUMED_CHANGE_S = 15.0

    def __post_init__(self) -> None:
        lo, hi = bounds("bounds_pct", self.bounds_pct, 1.0, 100.0)
        object.__setattr__(self, "bounds_pct", (lo, hi))
        object.__setattr__(self, "granularity_pct",
                           in_range("granularity_pct", self.granularity_pct, 0.0, 100.0,
                                    lo_open=True))
        if self.change_s is not None:
            object.__setattr__(self, "change_s",
                               in_range("change_s", self.change_s, 0.0, 3600.0))
        if self.levels_pct is not None:
            levels = self.levels_pct
            if getattr(levels, "ndim", 1) == 1 and hasattr(levels, "tolist"):
                levels = levels.tolist()  # a 1-D numpy array, as ShareKnob.green takes one
            if isinstance(levels, (str, bytes)) or not isinstance(levels, Sequence):
                raise ConfigurationError(f"levels_pct must be a sequence of percentages, got "
                                         f"{levels!r}")
            if not levels:  # "no level offered" is not "any share": refuse, do not widen
                raise ConfigurationError(
                    "levels_pct must hold at least one share (or be None: any multiple of "
                    f"granularity_pct within bounds_pct), got {self.levels_pct!r}")
            checked = sorted({in_range("levels_pct", v, lo, hi) for v in levels})
            object.__setattr__(self, "levels_pct", tuple(checked))
        if self.initial_pct is not None:
            object.__setattr__(self, "initial_pct",
                               in_range("initial_pct", self.initial_pct, lo, hi))

    @classmethod
    def mps(cls, restart_s: float | None = None, **kw: object) -> ShareKnob:
        """MPS active-thread percentages, each change a restart of ``restart_s`` (None:
        unknown)."""
        return cls(change_s=restart_s, **kw)  # type: ignore[arg-type]

    @classmethod
    def green(cls, levels_pct: Sequence[float], **kw: object) -> ShareKnob:
        """Green-context partitions inside MPS: these levels only, no restart."""
        return cls(levels_pct=tuple(levels_pct), change_s=0.0, **kw)  # type: ignore[arg-type]

    @property
    def restart_free(self) -> bool:
        """A change costs the training nothing (the share can move every period)."""
        return self.change_s == 0.0

    @property
    def cost_s(self) -> float:
        """The training time a change costs, the assumed restart when unknown (s)."""
        return self.ASSUMED_CHANGE_S if self.change_s is None else self.change_s

    @property
    def start_pct(self) -> float:
        """The share at the start: ``initial_pct`` (default the highest), on a level."""
        want = self.bounds_pct[1] if self.initial_pct is None else self.initial_pct
        return self.snap(want, down=True)

    def snap(self, pct: float, down: bool = False) -> float:
        """The offered share nearest ``pct`` (with ``down``: the largest not above it, else
        the lowest)."""
        lo, hi = self.bounds_pct
        x = min(max(finite("pct", pct), lo), hi)
        if self.levels_pct is None:
            g = self.granularity_pct
            k = math.floor(x / g + 1e-9) if down else round(x / g)
            return min(max(k * g, lo), hi)
        if down:
            fits = [v for v in self.levels_pct if v <= x + 1e-9]
            return fits[-1] if fits else self.levels_pct[0]
        return min(self.levels_pct, key=lambda v: abs(v - x))

    def candidates(self, most: int = 50) -> tuple[float, ...]:
        """The shares an optimising outer loop weighs: the levels, or a grid over the bounds
        in steps of whole granularities, at most ``most`` (>= 2) of them (both bounds
        included)."""
        most = int_at_least("most", most, 2)
        if self.levels_pct is not None:
            return self.levels_pct
        lo, hi = self.bounds_pct
        g = self.granularity_pct
        step = g * max(1, math.ceil((hi - lo) / (g * (most - 1)) - 1e-9))
        grid = {self.snap(lo + k * step) for k in range(int((hi - lo) / step) + 1)}
        return tuple(sorted(grid | {lo, hi}))


@dataclass(frozen=True)
class SleepKnob:
    """The training's sleep.

    Parameters
    ----------
    bounds_s : (float, float)
        Sleep range (s) within [0, 3600].
    run_quantum_s : float, optional
        Run time between two pauses when a duty cycler applies the sleep (SIGSTOP/SIGCONT,
        the cgroup freezer): the training's running fraction is then ``q / (q + s)`` whatever
        its iteration time. None (default): the sleep is taken once per iteration (the hook),
        and the fraction is ``t / (t + s)``.
    initial_s : float, optional
        Sleep at the start (default: the sleep the default outer loop's identified curves
        predict for the set point at the starting share, so the opening periods are not
        spent climbing from the bottom; with ``outer="paper"`` the lower bound).

    Examples
    --------
    >>> SleepKnob((0.0, 2.0)).duty(0.5, 0.5)
    0.5
    >>> SleepKnob(run_quantum_s=0.03).duty(0.5, 0.03)
    0.5
    """

    bounds_s: tuple[float, float] = (0.0, 1.0)
    run_quantum_s: float | None = None
    initial_s: float | None = None

    def __post_init__(self) -> None:
        # the messages name SleepKnob's own fields (TwoTierController checks a bare
        # (low, high) pair as its sleep_bounds_s before it builds the knob)
        lo, hi = bounds("bounds_s", self.bounds_s, 0.0, 3600.0)
        object.__setattr__(self, "bounds_s", (lo, hi))
        if self.run_quantum_s is not None:
            object.__setattr__(self, "run_quantum_s",
                               in_range("run_quantum_s", self.run_quantum_s, 1e-3, 3600.0))
        if self.initial_s is not None:
            object.__setattr__(self, "initial_s",
                               in_range("initial_s", self.initial_s, lo, hi))

    def tau(self, iteration_s: float) -> float:
        """The duty's time constant: the run quantum of a duty cycler, else the iteration
        time (s)."""
        return self.run_quantum_s if self.run_quantum_s is not None else iteration_s

    def duty(self, iteration_s: float, sleep_s: float) -> float:
        """The training's running fraction at ``sleep_s`` (s, in [0, 3600]; iteration time
        ``iteration_s``, > 0, unused by a duty cycler)."""
        # on the controller's path: plain comparisons (NaN fails them), the shared checks only
        # to word the error
        tau = self._tau_checked(iteration_s)
        if not 0.0 <= sleep_s <= 3600.0:
            in_range("sleep_s", sleep_s, 0.0, 3600.0)
        return tau / (tau + sleep_s)

    def sleep_for(self, iteration_s: float, duty: float) -> float:
        """The sleep giving running fraction ``duty`` in (0, 1], within the bounds (s;
        iteration time ``iteration_s``, > 0, unused by a duty cycler)."""
        tau = self._tau_checked(iteration_s)
        if not 0.0 < duty <= 1.0:
            in_range("duty", duty, 0.0, 1.0, lo_open=True)
        lo, hi = self.bounds_s
        return min(max(tau * (1.0 - duty) / max(duty, 1e-9), lo), hi)

    def _tau_checked(self, iteration_s: float) -> float:
        """:meth:`tau`, refusing an iteration time that is not a finite number > 0 where it is
        the time constant (a duty cycler's run quantum was checked when the knob was built)."""
        tau = self.tau(iteration_s)
        if not 0.0 < tau < math.inf:
            positive("iteration_s", iteration_s)
        return tau

