"""Plants drawn at random, so that no prior about the plant can win.

:class:`DrawnPlant` is a mean-law plant whose physics come from a seed: the training's
iteration time at the whole GPU from 0.1 to 2 s, its speed growing as ``share**e`` with ``e``
from 0.3 (a share barely speeds it up: the best point is low in the range with no sleep) to
1.5 (the best point is high with a long sleep), an interference that grows as
``share**gamma`` (``gamma`` 0.5..2) and may be convex in the training's footprint, noise of
0.5-2 % per period, and a restart of 3-15 s per share change. The plant that runs differs from
the one identified: its interference is ``x0.3..x3`` the identified one (a model gain error
of the same ratio, in the sleep's effect and the share's alike), and one draw in two reports
every reading a period late (:class:`~harness.sim.zoo.DelayedPlant`), undisclosed. The SLO
(:attr:`DrawnPlant.slo_ms`) sits between the inference's latency alone and with the training
at full share and duty, so the oracle's point moves across the whole range from draw to draw.

>>> p = DrawnPlant(draw=3, seed=0)
>>> 0.1 <= p.work_s <= 2.0 and 0.3 <= p.speed <= 1.5 and p.idle_ms < p.slo_ms
True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from harness.sim.zoo import _MeanLawPlant

__all__ = ["DrawnPlant"]


class DrawnPlant(_MeanLawPlant):
    """A plant whose physics are drawn from ``draw`` (see the module docstring).

    Latency ``idle * load * (1 + k f + k c f**2)`` with the footprint ``f = (m/100)**gamma
    * d`` (``d = t/(t + s)`` the training's running fraction), ``k`` the interference and
    ``c`` its convexity; iteration time ``t = work_s * (m/100)**-speed``.

    Parameters
    ----------
    draw : int
        Which plant (the physics' seed).
    seed : int
        The noise's seed.
    identified : bool
        The plant as it was identified (interference not scaled by the drawn gain ratio).
    restart_s : float, optional
        Training downtime of a share change (s); default the drawn one.
    """

    name = "random"

    def __init__(self, *, draw: int = 0, seed: int = 0, identified: bool = False,
                 restart_s: float | None = None) -> None:
        g = np.random.default_rng(7_001 + 7919 * int(draw))
        self.draw = int(draw)
        self.work_s = float(math.exp(g.uniform(math.log(0.1), math.log(2.0))))
        self.speed = float(g.uniform(0.3, 1.5))
        self.gamma = float(g.uniform(0.5, 2.0))
        self.convexity = float(g.uniform(0.0, 1.0))
        self.idle_ms = float(g.uniform(10.0, 100.0))
        self.gain_ratio = float(math.exp(g.uniform(math.log(0.3), math.log(3.0))))
        kappa = float(g.uniform(0.6, 2.5))
        self.kappa = kappa if identified else kappa * self.gain_ratio
        self.delay = int(g.integers(0, 2))
        self.p99_factor = float(g.uniform(1.05, 1.25))
        drawn_restart = float(g.uniform(3.0, 15.0))
        # the SLO between the inference alone and with the training at full share and duty
        # (of the plant that runs), with room above the load's swing
        k_run = kappa * self.gain_ratio
        full = k_run * (1.0 + self.convexity)
        x = float(g.uniform(0.25, 0.75))
        self.slo_ms = self.idle_ms * (1.0 + max(x * full, 0.3))
        super().__init__(seed=seed, restart_s=drawn_restart if restart_s is None else restart_s)
        self.noise = float(g.uniform(0.005, 0.02))

    def iteration_s(self, m: Any) -> np.ndarray:
        return self.work_s * (np.asarray(m, float) / 100.0) ** -self.speed

    def mean_law(self, m: Any, duty: Any, load: float) -> np.ndarray:
        f = (np.asarray(m, float) / 100.0) ** self.gamma * duty
        return self.idle_ms * load * (1.0 + self.kappa * f * (1.0 + self.convexity * f))

    def describe(self) -> dict[str, float]:
        """The drawn constants."""
        return {"work_s": self.work_s, "speed": self.speed, "gamma": self.gamma,
                "convexity": self.convexity, "idle_ms": self.idle_ms, "kappa": self.kappa,
                "gain_ratio": self.gain_ratio, "delay": self.delay, "slo_ms": self.slo_ms,
                "restart_s": self.restart_s, "noise": self.noise}
