"""The default outer loop: go to the share with the most predicted training at the SLO.

The law. Identification gives two curves across the shares ``m`` the backend offers
(:class:`~gpucontrol.models.LatencyModelFamily`): the latency, linear in the training's running
fraction ``d = tau / (tau + s)`` (``tau``: the iteration time ``t(m)``, or a duty cycler's run
quantum; :func:`~gpucontrol.models.duty_form`),

    l(m, s) = exp(q + delta(m)) * (c(m) + A(m) d)

(``(c + A d) / (1 - B d)`` at a level found time-sliced, where the knob offers only identified
levels: :class:`Curves`), and the training rate ``r(m, s) = d / t(m)``. ``q`` is the load,
common to every share (the inference's work scales every latency alike: a larger batch, more
requests); ``delta(m)`` is what the identified curve gets wrong at ``m``, and ``t(m)`` is
corrected by ``exp(eps(m))`` where the node reports iteration times. A level identified only
as a line in the sleep has ``c`` and ``A`` read off that line at the iteration time believed
there, and read again when the belief moves (a line fitted against a training of another
speed is another duty law: :meth:`Curves.retime`). At every decision the loop
predicts, at every share the backend offers, the duty at which the latency meets the set point
(within the sleep range; a share where even the longest sleep misses it is infeasible) and the
training rate there, at the mean of its belief and at the pessimistic edge (``Z`` standard
deviations of the difference between that share's correction and the current one's). The set
point is the controller's aim (the SLO less a margin for the reading noise) at the noise read
steadily, not at the noise now the inner loop aims by (:mod:`gpucontrol.noise`): where a
share's latency line is flat in the sleep, the few % the aim moves with the noise estimate's
sampling error move that share's predicted training by far more than a steep share's, and the
loop would walk between shares on nothing that changed. A move starts the new share at the
sleep predicted for the inner loop's own aim.

It moves to the share with the best pessimistic rate when its gain beats the move's cost: the
training a change loses (``ShareKnob.change_s``) over the periods spent at the current share
(what has lasted that long is expected to last about as long again; right after a move this
prices the next one high), but over no more than ``FORGET`` periods: a prediction is learnt from
readings that fade over that long, and a gain it promises for longer is not known to last (at
steady load, without this bound, a long dwell makes every move cheap and the loop chases
differences of a few % between neighbouring shares that are within the curves' error). A
restart-free backend's moves cost nothing. It explores, going on the mean alone, when only the
mean says a share is better and that share is not already known to within what a window there
would teach; an exploration is priced over the whole dwell (what it buys is a reading, not a
prediction's promise: after bad readings taught a wrong load, the loop climbs out of a share it
would otherwise keep). With the current share infeasible (the sleep pinned
high over the set point, three readings) it moves at once to the best share feasible at the
pessimistic edge, else at the mean, else the one least over, whatever the cost (once the
share has had ``min_window`` readings to settle in: the inner loop's opening transient pins the
sleep too).

What it learns (:class:`~gpucontrol.belief.Belief`, two of them: latency and iteration time).
The corrections have a Gaussian-process prior, smooth in ``log m`` and anchored near zero at the
identified shares, plus, at each identified share, an error of its own: what the
identification's residual there (``OperatingPoint.fit_error``, at most ``SIGMA0``: known no
worse than an unidentified share) exceeds the error every identified share is allowed
(``SIGMA_ANCHOR``): a level whose readings strayed from its line (a convex latency fitted by a
line, or noisy readings) is not vouched for by its neighbours, so readings there can say it is
wrong without saying the load is. The load is a random walk. Readings are folded in four at a
time by a Kalman update, the innovation clipped at three standard deviations (a wild reading
moves the belief a bounded step); five surprises of one sign in a row reopen the belief at once
(a load step, or what bad readings taught: the load's variance goes up, so the next readings
take the load where they are; a scheduled decision waits while the readings surprise), and
a sleep pinned at a bound lets the load and this share's correction take the readings at once.
The inner loop starts at the sleep the curves predict for the set point at the starting share
(:meth:`ThroughputOuter.start_sleep`). Every correction decays back to the prior over ``FORGET``
periods, so nothing learnt from bad readings outlives them by much; what the loop keeps reading
where it stands is re-learnt as fast as it fades. Readings past explaining (the reading noise at
its cap, 0.2: most successive readings 20 % or more apart) teach nothing that holds, yet they
move every learnt quantity and the share; when they are explainable again (the noise read
from the last 16 differences' median under half the cap) the controller starts afresh
(:attr:`ThroughputOuter.recovered`): everything learnt back to the prior, the starting share
and the sleep predicted there. Otherwise the episode's load, corrections and share would decide
the run after it, and where the loop started over would depend on where the bad readings left
it.

Why. A local learner cannot see a global optimum (a plant whose training speed grows slowly
with the share trains most at the bottom of the range); the curves can. One share's readings
cannot tell the load from that share's correction: moves between shares can, and the prior
splits a surprise between the two by how sure it is of each. Decisions wait for ``min_window``
readings at a share: on one reading the loop chases the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucontrol._validate import int_at_least
from gpucontrol.belief import Belief
from gpucontrol.curves import Curves
from gpucontrol.errors import ConfigurationError
from gpucontrol.knobs import ShareKnob, SleepKnob
from gpucontrol.models import LatencyModelFamily
from gpucontrol.noise import CAP2, Aim, ReadingNoise

__all__ = ["Decision", "ThroughputOuter", "least_latency_ms"]

#: The noise under which readings are explainable again after it reached its cap (variance,
#: log: half the cap's deviation).
_CLEAR2 = 0.1 ** 2

@dataclass(frozen=True, slots=True)
class Decision:
    """What the outer loop weighed at a decision, and what it chose.

    Parameters
    ----------
    share_pct : float
        The share it stood at.
    best_pct : float
        The share with the best predicted training (its own when none is better).
    gain : float
        That share's predicted training gain over the current one (relative, pessimistic).
    cost : float
        What a move costs (relative training over the expected dwell).
    sleep_s : float
        The sleep predicted at ``best_pct`` for the set point.
    rate : float
        The training rate predicted at ``best_pct`` (iterations per second).
    load : float
        The load factor read off the window (1: as at identification).
    action : str
        ``"stay"``, ``"move"``, ``"explore"`` or ``"escape"`` (the current share infeasible).
    """

    share_pct: float
    best_pct: float
    gain: float
    cost: float
    sleep_s: float
    rate: float
    load: float
    action: str

    def describe(self) -> str:
        """The decision in words (the actuation's reason)."""
        at = f"{self.best_pct:g} % (sleep {self.sleep_s:.3f} s, {self.rate:.3g} it/s)"
        if self.action == "stay":
            return (f"outer: stay at {self.share_pct:g} % (best {at}: {100 * self.gain:+.1f} % "
                    f"<= cost {100 * self.cost:.1f} %; load {self.load:.3f})")
        verb = {"move": "predicted training", "explore": "explore: could gain",
                "escape": "infeasible here; best feasible"}[self.action]
        return (f"outer throughput: share {self.share_pct:g} -> {self.best_pct:g}: {verb} "
                f"{100 * self.gain:+.1f} % at {at}, cost {100 * self.cost:.1f} %; "
                f"load {self.load:.3f}")


class ThroughputOuter:
    """The default outer loop (see the module docstring for the law).

    Built with its own settings only; :class:`~gpucontrol.TwoTierController` binds it to the
    set point, the knobs and the model (:meth:`bind`).

    Parameters
    ----------
    every : int, optional
        Periods between two decisions (>= 1). Default: 1 with a restart-free share knob (a
        decision every period, on a sliding window), else 25 (a restart must pay).
    min_window : int
        Fewest readings at the current share a decision waits for (>= 1).
    """

    strategy = "throughput"
    #: Readings pinned at a sleep bound that trigger a decision at once.
    PINNED = 3
    #: Readings folded into the beliefs at once (one Kalman update for their mean).
    BATCH = 4
    #: Pessimism of a prediction: how many standard deviations it is taken against a move.
    Z = 1.0
    #: The belief's constants (log units): the model error far from any identified share,
    #: at one, its correlation length (a factor of 2 in share), the load's drift per period
    #: and the periods over which learnt corrections fade back to the prior.
    SIGMA0, SIGMA_ANCHOR, LENGTH, DRIFT, FORGET = 0.15, 0.02, math.log(2.0), 0.01, 100.0

    def __init__(self, *, every: int | None = None, min_window: int = 8) -> None:
        self._every = None if every is None else int_at_least("outer_every", every, 1)
        self.min_window = int_at_least("min_window", min_window, 1)
        #: Mechanisms, each on (the benchmark's ablation turns them off one at a time).
        self.feedforward = True
        self.explore = True
        self.afresh = True
        self.steady_noise = True
        #: the controller's aim: the set point (ms) at a reading noise (sigma, log)
        self.aim_at: Aim | None = None
        self._aimed: tuple[float, object] | None = None   # (sigma, aim_at): the set point
        self._aimed_ms = 0.0
        self.last: Decision | None = None
        self._bound = False

    # ---- binding -------------------------------------------------------------------------
    def bind(self, slo_ms: float, share: ShareKnob, sleep: SleepKnob, period_s: float,
             family: LatencyModelFamily) -> ThroughputOuter:
        """Attach to a controller: the set point the loop aims at, the knobs, the control
        period and the identified curves. Raises if already bound."""
        if self._bound:
            raise ConfigurationError("this outer loop object already serves a controller")
        self._bound = True
        self.slo_ms, self.share, self.sleep, self.period_s = slo_ms, share, sleep, period_s
        self.every = self._every if self._every is not None else (
            1 if share.restart_free else 25)
        start = share.start_pct
        shares = tuple(sorted(set(share.candidates()) | {start}))
        self.curves = cv = Curves(family, shares, sleep)
        self._start = shares.index(start)
        ident = np.log([p.mps_pct for p in family.points])
        fit = {p.mps_pct: p.fit_error for p in family.points if p.fit_error is not None}
        timed = np.log(family.timed_pct())
        self.lat = Belief(cv.log_m, ident, sigma0=self.SIGMA0, sigma_anchor=self.SIGMA_ANCHOR,
                           length=self.LENGTH, load=True, drift=self.DRIFT, forget=self.FORGET)
        #: per share, the variance of the identified curve's misfit there beyond the anchor's
        #: (``fit_error``, at most ``SIGMA0``: no level is less known than an unidentified
        #: share, and a wider prior would let bad readings teach it a correction the prior
        #: allows nowhere else)
        e = np.minimum([fit.get(m, 0.0) for m in shares], self.SIGMA0)
        self.misfit = np.maximum(e * e - self.SIGMA_ANCHOR ** 2, 0.0)
        self.lat.widen(self.misfit)
        self.it = Belief(cv.log_m, timed, sigma0=self.SIGMA0 if cv.times_known else 0.5,
                          sigma_anchor=self.SIGMA_ANCHOR, length=self.LENGTH, load=False,
                          drift=0.0, forget=self.FORGET)
        self.noise = ReadingNoise(self.FORGET)
        self._batch: list[float] = []     # log ratios not yet folded into the beliefs
        self._times: list[float] = []     # iteration times likewise
        #: the longest dwell a move is amortised over: the belief's memory (periods)
        self.horizon = self.FORGET
        self.moves = 0
        self._state()
        return self

    def _state(self) -> None:
        """What the loop learns and counts, as at the start (the beliefs apart)."""
        self.i = self._start
        self.noise.clear()                # the reading noise, learnt
        self._period = 0                  # periods since bound or started afresh
        self._batch.clear()
        self._times.clear()
        self._reopen = 0.0                # a run of surprises: the load's variance to add
        self._fresh = False               # a fold since the last decision
        self._high = self._low = 0        # readings in a row pinned high over / low under
        self._count = 0                   # readings at this share
        self._last_y: float | None = None
        self._since = 0                  # readings since the last decision
        self._held = 0                   # periods at this share (the expected dwell)
        self._ff_sleep: float | None = None
        self._garbled = False             # the reading noise at its cap (:attr:`recovered`)
        #: readings past explaining have become explainable again: the controller starts
        #: afresh (:meth:`start_afresh`)
        self.recovered = False

    def start_afresh(self) -> None:
        """Forget everything learnt, as if just bound: the beliefs at their prior, the curves
        read at the prior's iteration times, the reading noise unknown, at the starting share.
        The settings (the mechanisms' switches among them) stay."""
        self.lat.to_prior()
        self.it.to_prior()
        if self.curves.retimes:
            self.curves.retime(self.curves.t)
        self._state()

    @property
    def mps_pct(self) -> float:
        """The share now (%); the name the paper's loops use."""
        return self.curves.m_f[self.i]

    share_pct = mps_pct

    @property
    def reading_noise(self) -> float:
        """The standard deviation of one reading around the belief (log), as measured."""
        return math.sqrt(self.noise.var)

    @property
    def settling(self) -> bool:
        """Fewer than ``min_window`` periods at this share (the opening, or after a move)."""
        return self._count < self.min_window

    @property
    def load(self) -> float:
        """The load factor believed now (1: as identified)."""
        return math.exp(self.lat.q)

    @property
    def latency_scale(self) -> float:
        """What the belief multiplies the identified curve by at this share (``exp(q +
        delta)``): the load and this share's correction scale the latency's slope in the sleep
        as much as its level."""
        return math.exp(self.lat.total(self.i))

    def bent_slope(self, duty: float) -> float | None:
        """The latency's slope in the duty here (ms per unit) where the law is bent, else None."""
        return self.curves.slope(duty, self.i) if self.curves.B_f[self.i] > 0 else None

    # ---- per period ----------------------------------------------------------------------
    def update(self, latency_ms: float, sleep_s: float, iteration_s: float
               ) -> tuple[float | None, str]:
        """One valid period at the current share: its latency (ms), the sleep applied during
        it (s) and the iteration time the node read (s; NaN: none).

        Returns
        -------
        (float or None, str)
            The new share (None: unchanged) and the reason ("" between decisions).
        """
        lo, hi = self.sleep.bounds_s
        self._high = self._high + 1 if sleep_s >= hi - 1e-9 and latency_ms > self.slo_ms else 0
        self._low = self._low + 1 if sleep_s <= lo + 1e-9 and latency_ms < self.slo_ms else 0
        self._since += 1
        self._count += 1
        self._period += 1
        self._read(latency_ms, sleep_s, iteration_s)
        # pinned at a bound: decide at once, once the share has had a window to settle in
        pinned = self._count >= self.min_window and (
            (self._high >= self.PINNED and self._since >= self.PINNED) or (
                self._low >= 2 * self.PINNED and self._since >= 2 * self.PINNED))
        if pinned or self._reopen or len(self._batch) >= self.BATCH:
            self._fold(force=pinned)
        # a scheduled decision waits while the readings surprise the belief (it may be stale)
        if not (pinned or (self._fresh and self._since >= self.every
                           and self._count >= self.min_window and not self.lat.surprising)):
            return None, ""
        periods, self._since, self._fresh = self._since, 0, False
        return self._decide(periods)

    def _read(self, latency_ms: float, sleep_s: float, iteration_s: float) -> None:
        """One reading's log ratio to the identified curve at this share and sleep (with the
        iteration time believed here), and the reading noise (:class:`ReadingNoise`). Where
        the curve predicts no positive latency (a line's duty law past where it holds: ``c`` <
        0 at a long sleep) the reading teaches the latency belief nothing: its log ratio would
        be any size."""
        cv, i = self.curves, self.i
        if math.isfinite(iteration_s) and iteration_s > 0:
            self._times.append(iteration_s)
        tau = self.sleep.tau(cv.t_f[i] * math.exp(self.it.delta.item(i)))
        # Curves.latency, inline in the duty law's arithmetic order (one ulp moves a share path)
        bend = 1.0 - cv.B_f[i] * tau / (tau + sleep_s)
        pred = (cv.c_f[i] + cv.A_f[i] * tau / (tau + sleep_s)) / bend
        if not pred > 0.0:
            return
        y = math.log(max(latency_ms, 1e-9) / max(pred, 1e-9))
        if self._last_y is not None:
            self.noise.add(abs(y - self._last_y))
            if self._garbled or self.noise.var >= CAP2:
                self._watch()
        self._last_y = y
        self._batch.append(y)
        self._reopen = max(self._reopen, self.lat.surprised(i, y, self.noise.var))

    def _watch(self) -> None:
        """Readings past explaining: the reading noise at its cap (most successive readings
        20 % or more apart). They are explainable again when the noise read from the median
        of the last 16 differences (over 0.954) is under half the cap (the 64 the noise is
        read from keep the bad ones for 32 readings more): :attr:`recovered` then asks the
        controller to start afresh."""
        if self._garbled:
            if self.noise.now.recent_variance(16) < _CLEAR2:
                self._garbled, self.recovered = False, self.afresh
        else:
            self._garbled = True

    def _fold(self, force: bool = False) -> None:
        """Fold the readings since the last fold into the beliefs: the periods pass, then one
        observation of their mean (noise shrunk by their number) at this share. ``force``
        (the sleep pinned at a bound: the readings, not the belief, say where the load is)
        lets the load take the whole innovation at once."""
        n = len(self._batch)
        if not n:
            return
        i = self.i
        self.lat.step(n)
        self.it.step(n)
        if self._times:
            t = sorted(self._times)[len(self._times) // 2]
            self.it.observe(i, math.log(t / self.curves.t[i]), 0.05 ** 2 / len(self._times))
            self._retime()
        y = sum(self._batch) / n
        if force:     # the surprise may be the load or this share's curve: room for both
            v = (y - self.lat.q - self.lat.delta[i]) ** 2
            self.lat.P[0, 0] += v
            self.lat.P[1 + i, 1 + i] += v
        elif self._reopen:
            self.lat.reopen(i, self._reopen)
        self._reopen = 0.0
        self.lat.observe(i, y, self.noise.var / n, check=False)
        self._batch.clear()
        self._times.clear()
        self._fresh = True

    def _retime(self) -> None:
        """Re-read the lines at the iteration times believed now, where a level's law is its
        line (:meth:`Curves.retime`), once they moved by more than 2 % at some share."""
        cv = self.curves
        if cv.retimes:
            tau = cv.t * np.exp(self.it.delta)
            if float(np.max(np.abs(np.log(tau / cv.tau)))) > 0.02:
                cv.retime(tau)

    def duty_gain(self, tau: float) -> float:
        """``A`` of the law here at time constant ``tau`` where the laws are read off the
        lines (the inner loop's gain schedule); NaN otherwise."""
        return self.curves.duty_gain(self.i, tau)

    # ---- the prediction ------------------------------------------------------------------
    def _setpoints(self) -> float | np.ndarray:
        """The set point (ms) a decision predicts every share at: the controller's aim at
        the reading noise steadily read (:meth:`ReadingNoise.sigmas`, one per share where a
        share is louder), not at the noise now the inner loop aims by; that one itself until
        the steady noise is read, or where the controller gives no aim."""
        aim = self.aim_at
        if not self.steady_noise or aim is None:
            return self.slo_ms
        sig = self.noise.sigmas(self.i, self._period)
        if sig is None:
            return self.slo_ms
        steady, own = sig
        if self._aimed != (steady, aim):     # (one for all, often the same)
            self._aimed, self._aimed_ms = (steady, aim), aim(steady)
        if not own:
            return self._aimed_ms
        sp = np.full(len(self.curves.m_f), self._aimed_ms)
        for j, x in own.items():
            sp[j] = aim(x)
        return sp

    def _predict(self, setpoint: float | np.ndarray | None = None
                 ) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """Per share, at the mean and ``Z`` standard deviations against a move (the current
        share at its mean): the duty at the set point (``setpoint``, default
        :meth:`_setpoints`), the training rate there (-inf where even the longest sleep misses
        it) and, at the mean, the latency at the longest sleep."""
        cv, i = self.curves, self.i
        sig = self.Z * self.lat.spread(i)
        sig_t = self.Z * self.it.spread(i)
        t = cv.t * np.exp(self.it.delta)
        d_hi, least = cv.at_longest_sleep(t, self.sleep)
        base = np.exp(self.lat.q + self.lat.delta)
        sp = self._setpoints() if setpoint is None else setpoint
        out = []
        for scale, tt in ((base, t), (base * np.exp(sig), t * np.exp(sig_t))):
            d = np.minimum(cv.duty(sp / scale), 1.0)
            out.append((np.maximum(d, d_hi), np.where(d >= d_hi, d / tt, -np.inf)))
        worst = base * least
        return (out[0][0], out[0][1], worst), (out[1][0], out[1][1])

    # ---- the decision --------------------------------------------------------------------
    def _decide(self, periods: int) -> tuple[float | None, str]:
        self._held += periods
        (d0, rate0, worst), (d, rate) = self._predict()
        i = self.i
        held = self.period_s * max(self._held, self.min_window)
        cost = self.share.cost_s / min(held, self.period_s * self.horizon)   # a move's
        dwell_cost = self.share.cost_s / held                                # an exploration's
        now = rate0[i]
        if not math.isfinite(now):
            return self._escape(d, rate, d0, rate0, worst, cost)
        gain = rate / now - 1.0
        gain[i] = 0.0
        j = int(np.argmax(gain))
        if gain[j] > cost:
            return self._act("move", j, (d, rate), now, cost, edge=1)
        if self.explore:
            # the mean prediction says another share is better, its uncertainty that the
            # pessimistic edge is not: only going there settles it
            # (a share known about as well as one window there would leave it is not
            # explored: going there would teach nothing the pessimistic edge does not know)
            known = self.lat.spread(i) <= 2.0 * math.sqrt(self.noise.var / self.min_window)
            mean = np.where(known, -np.inf, rate0 / now - 1.0)
            mean[i] = 0.0
            k = int(np.argmax(mean))
            if mean[k] > dwell_cost:
                return self._act("explore", k, (d0, rate0), now, dwell_cost, edge=0)
        return self._act("stay", j, (d, rate), now, cost, edge=1)

    def _escape(self, d: np.ndarray, rate: np.ndarray, d0: np.ndarray, rate0: np.ndarray,
                worst: np.ndarray, cost: float) -> tuple[float | None, str]:
        """Infeasible here: the share with the best training that is feasible even at the
        pessimistic edge, else at the mean prediction, else the share whose latency at the
        longest sleep is predicted least."""
        if np.isfinite(rate).any():
            return self._act("escape", int(np.argmax(rate)), (d, rate), -math.inf, cost, 1)
        if np.isfinite(rate0).any():
            return self._act("escape", int(np.argmax(rate0)), (d0, rate0), -math.inf, cost, 0)
        return self._act("escape", int(np.argmin(worst)), (d0, rate0), -math.inf, cost, 0)

    def _act(self, action: str, j: int, pred: tuple[np.ndarray, np.ndarray], now: float,
             cost: float, edge: int) -> tuple[float | None, str]:
        """Record the decision (``pred``: the duty and the rate it was taken on, at the mean
        (``edge`` 0) or the pessimistic edge (1)); on a move, go to share ``j`` with the sleep
        predicted there at the same edge for the set point the inner loop aims at."""
        cv, (d, rate) = self.curves, pred
        gain = float(rate[j] / now - 1.0) if now > 0 and math.isfinite(now) else math.inf
        t = cv.t_f[j] * math.exp(self.it.delta.item(j))
        stay = action == "stay" or j == self.i
        if not stay:
            d = self._predict(self.slo_ms)[edge][0]
        sleep = self.sleep.sleep_for(t, d.item(j))
        self.last = Decision(self.share_pct, cv.m_f[j], 0.0 if j == self.i else gain,
                             cost, sleep, float(max(rate[j], 0.0)), self.load,
                             "stay" if stay else action)
        if stay:
            return None, self.last.describe()
        self._ff_sleep = sleep if self.feedforward else None
        self.noise.leave(self.i, self._period)
        self.i = j
        self.moves += 1
        self._since = self._count = self._held = self._high = self._low = 0
        self._last_y = None
        return self.share_pct, self.last.describe()

    def start_sleep(self) -> float:
        """The sleep to start at: the one the identified curves predict for the set point at
        the starting share and the identified load. From the bottom of the sleep range the
        inner loop would spend its first periods over the SLO whenever the load needs sleep;
        the prediction puts it within the model's error of its operating point at once."""
        (d0, _, _), _ = self._predict(self.slo_ms)
        t = self.curves.t_f[self.i] * math.exp(self.it.delta.item(self.i))
        return self.sleep.sleep_for(t, d0.item(self.i))

    def move_sleep(self) -> float | None:
        """The sleep to start the new share at, predicted for the set point (pessimistic edge),
        once after each move; None otherwise."""
        s, self._ff_sleep = self._ff_sleep, None
        return s


def least_latency_ms(family: LatencyModelFamily, share: ShareKnob,
                     sleep: SleepKnob) -> tuple[float, float]:
    """The least latency the identified model predicts at any share ``share`` offers and any
    sleep in ``sleep``'s range (the longest, where the training's duty is least), at the
    identified load, and the share it is at: an SLO below it is one no setting of the knobs
    can meet on this model (the model's counterpart of the least latency a plant reaches,
    which ``gpucontrol burst`` refuses an SLO under). At each share the lower of the two
    readings of the identification: its fitted line and the duty law the loop predicts with
    (they part at the ends of the span: neither alone refuses an SLO the other meets).

    >>> from gpucontrol.models import LatencyModelFamily, LinearLatencyModel
    >>> fam = LatencyModelFamily.of(LinearLatencyModel(-12.0, 95.0))
    >>> least_latency_ms(fam, ShareKnob(levels_pct=(100.0,)), SleepKnob((0.0, 1.0)))
    (83.0, 100.0)
    """
    shares = tuple(sorted(set(share.candidates()) | {share.start_pct}))
    cv = Curves(family, shares, sleep)
    longest = sleep.bounds_s[1]
    line = np.array([family.at(m).predict(longest) for m in shares])
    lat = np.minimum(cv.at_longest_sleep(cv.t, sleep)[1], line)
    i = int(np.argmin(lat))
    return float(lat[i]), float(cv.m[i])
