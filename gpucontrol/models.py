"""Latency models of a co-located GPU.

The inner loop's plant (the GPUColo paper (Chen et al., ICDCS 2024), Sec. V-A) is the static
map from the training processes' sleep interval ``s`` (seconds per iteration) to the mean
per-batch inference latency ``l`` (ms), identified as ``l = gain * s + offset`` with
``gain < 0`` (more sleep, lower latency). Because the sleep chosen at the end of period ``k``
acts during period ``k + 1``, the loop sees the incremental (velocity) form

    l(k+1) = l(k) + gain * u(k),     u(k) = s(k+1) - s(k),

whose transfer function from ``u`` to ``l`` is ``gain / (z - 1)``.

Across the spatial share ``m`` (MPS percentage or green-context partition) a
:class:`LatencyModelFamily` holds one such model per identified level and, where measured, the
training's iteration time ``t(m)`` (compute only, sleep excluded): the training rate at sleep
``s`` is ``1 / (t(m) + s)`` iterations per second. The two curves are what the default outer
loop optimises over (:mod:`gpucontrol.outer`).

The latency is physically linear in the training's running fraction ``d = t / (t + s)``, not in
the sleep (the training interferes only while it computes): :func:`duty_form` turns a secant
fitted over a sleep span into that law, ``l = c + A d``.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucontrol._validate import bounds, finite, in_range, int_at_least, positive
from gpucontrol.errors import ConfigurationError


@dataclass(frozen=True)
class LinearLatencyModel:
    """``latency_ms = gain * sleep_s + offset`` around one operating point.

    Parameters
    ----------
    gain : float
        Slope in ms of latency per second of sleep; must be negative and finite.
    offset : float
        Latency in ms at zero sleep; must be finite.

    Examples
    --------
    >>> m = LinearLatencyModel(gain=-12.0, offset=95.0)
    >>> m.predict(0.5)
    89.0
    >>> m.sleep_for(89.0)
    0.5
    """

    gain: float
    offset: float

    def __post_init__(self) -> None:
        g = finite("gain", self.gain)
        if g >= 0:
            raise ConfigurationError(
                f"gain must be < 0 (more sleep, lower latency), got {self.gain!r}")
        object.__setattr__(self, "gain", g)
        object.__setattr__(self, "offset", finite("offset", self.offset))

    def predict(self, sleep_s: float) -> float:
        """Latency (ms) predicted for a sleep interval (s)."""
        return self.gain * sleep_s + self.offset

    def sleep_for(self, latency_ms: float) -> float:
        """Sleep interval (s) at which the model predicts ``latency_ms`` (unclamped)."""
        return (latency_ms - self.offset) / self.gain

    def step(self, latency_ms: float, u: float) -> float:
        """One step of the incremental form: ``l(k+1) = l(k) + gain * u(k)``."""
        return latency_ms + self.gain * u

    def to_tf(self, period_s: float = 4.0):
        """python-control discrete transfer function ``gain / (z - 1)`` from ``u`` to ``l``.

        >>> tf = LinearLatencyModel(-12.0, 95.0).to_tf(4.0)
        >>> float(tf.dt)
        4.0
        """
        import control

        dt = positive("period_s", period_s)
        return control.tf([self.gain], [1.0, -1.0], dt)

    def scaled(self, gain_ratio: float) -> LinearLatencyModel:
        """The same model with its gain multiplied by ``gain_ratio`` (> 0)."""
        return LinearLatencyModel(self.gain * positive("gain_ratio", gain_ratio), self.offset)

    @classmethod
    def from_fit(cls, fit: Any) -> LinearLatencyModel:
        """Build from anything exposing ``gain`` and ``offset`` (e.g. ``sysid.StaticFit``).

        A fit that also reports ``ci95`` (``sysid.StaticFit``) is refused when the gain's 95 %
        confidence interval reaches 0 or above: the data do not show that sleep lowers the
        latency, and a controller designed on such a gain would be arbitrarily aggressive."""
        try:
            gain, offset = fit.gain, fit.offset
        except AttributeError:
            raise ConfigurationError("fit must expose 'gain' and 'offset' attributes") from None
        ci = getattr(fit, "ci95", None)
        if ci is not None:
            try:
                hi = float(ci[0][1])
            except (TypeError, ValueError, IndexError):
                hi = math.nan
            if math.isfinite(hi) and hi >= 0.0:
                raise ConfigurationError(
                    f"fit: the gain's 95 % confidence interval [{float(ci[0][0]):.4g}, "
                    f"{hi:.4g}] reaches 0: the data do not show that more sleep lowers the "
                    "latency; excite a wider sleep range or record more periods")
        return cls(gain=gain, offset=offset)

    def to_dict(self) -> dict[str, float]:
        return {"gain": self.gain, "offset": self.offset}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LinearLatencyModel:
        missing = [k for k in ("gain", "offset") if k not in d]
        if missing:
            raise ConfigurationError(f"model is missing field(s): {', '.join(missing)}")
        return cls(gain=d["gain"], offset=d["offset"])


@dataclass(frozen=True)
class OperatingPoint:
    """One identified operating point: training MPS percentage and inference batch size.

    Parameters
    ----------
    mps_pct : float
        Training MPS percentage, in (0, 100].
    model : LinearLatencyModel
        The latency-vs-sleep model identified there.
    batch : int, optional
        Inference batch size (None: not distinguished).
    iteration_s : float, optional
        The training's iteration time at this share (s, compute only, sleep excluded), where
        the identification measured it; None when not measured.
    duty_law : (float, float), optional
        ``(c, A)`` of the latency ``c + A d`` fitted on the running fraction
        ``d = t / (t + s)`` with that iteration time (ms; ``A > 0``): the same data as
        ``model``, without the line's dependence on where the sleeps fell. None: derived from
        ``model`` (:func:`duty_form`).
    fit_error : float, optional
        How far the identification's readings at this level strayed from the fitted model:
        the residual's RMS as a fraction of the level's mean latency (noise and the law's
        misfit together). The outer loop trusts the curve at this share no closer than that
        (:class:`~gpucontrol.outer.ThroughputOuter`; no less than a share never identified).
        None: not recorded (trusted to 2 %).
    bent_law : (float, float, float), optional
        ``(c, A, B)`` of the latency ``(c + A d) / (1 - B d)`` on the same running fraction
        (:func:`sysid.fit_duty_law`; ms, ms, ``B`` in [0, 1)), where the identification found
        the level time-sliced: the inference served only while the training does not hold the
        device, so ``1 / latency`` falls linearly in ``d`` and the duty law's line misses.
        None: the level is not time-sliced (or it was not asked).
    """

    mps_pct: float
    model: LinearLatencyModel
    batch: int | None = None
    iteration_s: float | None = None
    duty_law: tuple[float, float] | None = None
    fit_error: float | None = None
    bent_law: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mps_pct", in_range("mps_pct", self.mps_pct, 0.0, 100.0,
                                                     lo_open=True))
        if not isinstance(self.model, LinearLatencyModel):
            raise TypeError(f"OperatingPoint.model must be a LinearLatencyModel, got "
                            f"{type(self.model).__name__}")
        if self.batch is not None:
            object.__setattr__(self, "batch", int_at_least("batch", self.batch, 1))
        if self.iteration_s is not None:
            object.__setattr__(self, "iteration_s", in_range(
                "iteration_s", self.iteration_s, 0.0, 3600.0, lo_open=True))
        if self.duty_law is not None:
            try:
                c, a = self.duty_law
            except (TypeError, ValueError):
                raise ConfigurationError(f"duty_law must be (c, A) in ms, got "
                                         f"{self.duty_law!r}") from None
            object.__setattr__(self, "duty_law", (finite("duty_law[0]", c),
                                                  positive("duty_law[1]", a)))
        if self.fit_error is not None:
            object.__setattr__(self, "fit_error",
                               in_range("fit_error", self.fit_error, 0.0, 10.0))
        if self.bent_law is not None:
            try:
                c, a, b = self.bent_law
            except (TypeError, ValueError):
                raise ConfigurationError(f"bent_law must be (c, A, B) in ms, ms and [0, 1), "
                                         f"got {self.bent_law!r}") from None
            object.__setattr__(self, "bent_law", (
                positive("bent_law[0]", c), in_range("bent_law[1]", a, 0.0, math.inf),
                in_range("bent_law[2]", b, 0.0, 1.0, hi_open=True)))


@dataclass(frozen=True)
class LatencyModelFamily:
    """Linear latency models across MPS levels (and optionally batch sizes), for gain scheduling.

    ``at(mps_pct, batch)`` interpolates gain and offset linearly in the MPS percentage between
    the two nearest identified levels (clamped at the ends) for the nearest identified batch.
    ``mps_gain(...)`` is the local slope of latency with respect to the training MPS percentage
    (ms per percentage point) at a given sleep. ``iteration_s(m)`` is the training's iteration
    time, measured at the identified levels and at the rate sweep's, a power law between them
    (NaN where none was measured).

    Parameters
    ----------
    points : tuple of OperatingPoint
        The identified operating points (at least one).
    sleep_span_s : (float, float), optional
        The sleep range the models were fitted over (their slopes are secants over it);
        None: unknown (the controller then takes its sleep bounds).
    iteration_times : tuple of (float, float)
        ``(share %, iteration time s)`` measured by a rate sweep at shares with no latency
        model (the training's speed need not be smooth in the share: a kernel's blocks run in
        whole waves over the SMs it gets); a point's own time wins at its share.

    Examples
    --------
    >>> fam = LatencyModelFamily.from_points([
    ...     OperatingPoint(20, LinearLatencyModel(-2.0, 60.0)),
    ...     OperatingPoint(80, LinearLatencyModel(-14.0, 90.0))])
    >>> fam.at(50).gain
    -8.0
    >>> round(fam.mps_gain(50, sleep_s=0.0), 6)
    0.5
    """

    points: tuple[OperatingPoint, ...] = field(default_factory=tuple)
    sleep_span_s: tuple[float, float] | None = None
    iteration_times: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.points, OperatingPoint) or not hasattr(self.points, "__iter__"):
            raise TypeError(f"points must be a sequence of OperatingPoint, got "
                            f"{type(self.points).__name__}")
        object.__setattr__(self, "points", tuple(self.points))
        if not self.points:
            raise ConfigurationError("points must hold at least one OperatingPoint")
        for p in self.points:
            if not isinstance(p, OperatingPoint):
                raise TypeError(f"points must be OperatingPoint(mps_pct, model[, batch]) "
                                f"items, got {type(p).__name__}")
        pts = tuple(sorted(self.points, key=lambda p: (p.batch or 0, p.mps_pct)))
        for a, b in itertools.pairwise(pts):
            if (a.batch, a.mps_pct) == (b.batch, b.mps_pct):
                raise ConfigurationError(
                    f"points: two operating points at mps_pct {a.mps_pct:g}"
                    + ("" if a.batch is None else f", batch {a.batch}")
                    + "; give one model per MPS level")
        object.__setattr__(self, "points", pts)
        if self.sleep_span_s is not None:
            object.__setattr__(self, "sleep_span_s",
                               bounds("sleep_span_s", self.sleep_span_s, 0.0, 3600.0))
        object.__setattr__(self, "iteration_times", _times(self.iteration_times))

    @classmethod
    def from_points(cls, points: Iterable[OperatingPoint],
                    sleep_span_s: tuple[float, float] | None = None) -> LatencyModelFamily:
        """A family from its points (any order) and the sleep span they were fitted over."""
        return cls(tuple(points), sleep_span_s)

    @classmethod
    def of(cls, model: LinearLatencyModel | LatencyModelFamily, share_pct: float = 100.0,
           iteration_s: float | None = None) -> LatencyModelFamily:
        """``model`` as a family: a family as it is, a single model as one point at
        ``share_pct`` (with ``iteration_s`` when known)."""
        if isinstance(model, LatencyModelFamily):
            return model
        if not isinstance(model, LinearLatencyModel):
            raise ConfigurationError("model must be a LinearLatencyModel or a "
                                     f"LatencyModelFamily, got {type(model).__name__}")
        return cls((OperatingPoint(share_pct, model, iteration_s=iteration_s),))

    def _batch_points(self, batch: int | None) -> list[OperatingPoint]:
        batches = sorted({p.batch for p in self.points}, key=lambda b: (b is None, b or 0))
        if batch is None and None in batches:
            chosen = None  # the rows that do not distinguish the batch
        elif batch is None or all(b is None for b in batches):
            chosen = batches[0]
        else:
            known = [b for b in batches if b is not None]
            chosen = min(known, key=lambda b: abs(b - batch))
        return [p for p in self.points if p.batch == chosen]

    @property
    def batches(self) -> tuple[int | None, ...]:
        """The inference batch sizes the points distinguish (None: not distinguished)."""
        return tuple(sorted({p.batch for p in self.points}, key=lambda b: (b is None, b or 0)))

    def at(self, mps_pct: float, batch: int | None = None) -> LinearLatencyModel:
        mps_pct = finite("mps_pct", mps_pct)
        pts = self._batch_points(batch)
        xs = [p.mps_pct for p in pts]
        if len(pts) == 1 or mps_pct <= xs[0]:
            return pts[0].model
        if mps_pct >= xs[-1]:
            return pts[-1].model
        i = bisect.bisect_right(xs, mps_pct)
        a, b = pts[i - 1], pts[i]
        w = (mps_pct - a.mps_pct) / (b.mps_pct - a.mps_pct)
        return LinearLatencyModel(
            gain=a.model.gain + w * (b.model.gain - a.model.gain),
            offset=a.model.offset + w * (b.model.offset - a.model.offset),
        )

    def mps_gain(self, mps_pct: float, sleep_s: float = 0.0, batch: int | None = None) -> float:
        """d latency / d MPS% (ms per percentage point) at ``sleep_s``; NaN with one level."""
        mps_pct, sleep_s = finite("mps_pct", mps_pct), finite("sleep_s", sleep_s)
        pts = self._batch_points(batch)
        if len(pts) < 2:
            return math.nan
        xs = [p.mps_pct for p in pts]
        i = min(max(bisect.bisect_right(xs, mps_pct), 1), len(pts) - 1)
        a, b = pts[i - 1], pts[i]
        return (b.model.predict(sleep_s) - a.model.predict(sleep_s)) / (b.mps_pct - a.mps_pct)

    def timed_pct(self, batch: int | None = None) -> tuple[float, ...]:
        """The shares where the iteration time was measured (levels and rate sweep)."""
        return tuple(sorted(self._times(batch)))

    def _times(self, batch: int | None) -> dict[float, float]:
        """Every measured iteration time, made non-increasing in the share: a training never
        runs slower on more of the GPU, so an isotonic regression in log time averages the
        noise of short readings (a rate sweep's few periods) without smoothing away real
        steps (whole waves of thread blocks)."""
        times = dict(self.iteration_times)
        times.update({p.mps_pct: float(p.iteration_s) for p in self._batch_points(batch)
                      if p.iteration_s is not None})
        if len(times) < 2:
            return times
        from scipy.optimize import isotonic_regression  # scipy >= 1.12; only when needed

        xs = sorted(times)
        fit = isotonic_regression([math.log(times[m]) for m in xs], increasing=False).x
        return {m: math.exp(float(y)) for m, y in zip(xs, fit)}

    def iteration_s(self, mps_pct: float, batch: int | None = None) -> float:
        """The training's iteration time at ``mps_pct`` (s): a power law ``t ~ m**-beta``
        through the two nearest shares that measured it (identified levels and rate sweep),
        continued past the end ones with the end segment's exponent (within [0, 3]); the
        measured time itself with one share; NaN when none measured it."""
        m = finite("mps_pct", mps_pct)
        times = self._times(batch)
        if not times or m <= 0:
            return math.nan
        xs = sorted(times)
        if len(xs) == 1:
            return times[xs[0]]
        i = min(max(bisect.bisect_right(xs, m), 1), len(xs) - 1)
        a, b = xs[i - 1], xs[i]
        ta, tb = times[a], times[b]
        beta = -math.log(tb / ta) / math.log(b / a)
        if not a <= m <= b:
            beta = min(max(beta, 0.0), 3.0)    # past the ends: a bounded continuation
        return ta * (m / a) ** -beta

    def duty_law(self, mps_pct: float, run_quantum_s: float | None = None,
                 prior_iteration_s: float | None = None) -> tuple[float, float]:
        """``(c, A)`` of the latency ``c + A d`` at ``mps_pct``, ``d`` the training's running
        fraction: each level's identified law (or its line turned into one by
        :func:`duty_form` with the run quantum of a duty cycler, its iteration time, or
        ``prior_iteration_s`` scaled as the inverse of the share), interpolated linearly
        between levels. Past the end levels (and with one level) ``c``, the inference alone,
        is held and ``A``, the training's interference, is taken as proportional to the
        share. NaNs when no time constant is known.

        Parameters
        ----------
        mps_pct : float
            The share (%).
        run_quantum_s : float, optional
            A duty cycler's run quantum (s): the duty's time constant at every share.
        prior_iteration_s : float, optional
            Iteration time assumed at the highest level where none was measured (s).

        Returns
        -------
        (float, float)
            ``c`` and ``A`` (ms).
        """
        m = finite("mps_pct", mps_pct)
        pts = self._batch_points(None)
        span = self.sleep_span_s
        top = max(p.mps_pct for p in pts)
        laws = []
        for p in pts:
            if p.duty_law is not None and run_quantum_s is None:
                laws.append(p.duty_law)
                continue
            tau = run_quantum_s or p.iteration_s or (
                None if prior_iteration_s is None else prior_iteration_s * top / p.mps_pct)
            laws.append((math.nan, math.nan) if tau is None or span is None else
                        duty_form(p.model, tau, span))
        xs = [p.mps_pct for p in pts]
        if len(pts) == 1 or not xs[0] <= m <= xs[-1]:
            end = 0 if m < xs[0] else len(pts) - 1
            return laws[end][0], laws[end][1] * m / xs[end]
        j = min(max(bisect.bisect_right(xs, m), 1), len(pts) - 1)
        w = min(max((m - xs[j - 1]) / (xs[j] - xs[j - 1]), 0.0), 1.0)
        (c0, a0), (c1, a1) = laws[j - 1], laws[j]
        return c0 + w * (c1 - c0), a0 + w * (a1 - a0)

    def bent_law_at(self, mps_pct: float) -> tuple[float, float, float] | None:
        """The ``bent_law`` of the level identified at exactly ``mps_pct`` (None where no
        level is, or it is not time-sliced). Never interpolated: between levels the device
        may share otherwise (a partition or a wave of thread blocks gained), and a bent and a
        straight law do not blend into either."""
        m = finite("mps_pct", mps_pct)
        for p in self._batch_points(None):
            if p.mps_pct == m:
                return p.bent_law
        return None

    def gain_ratios(self, nominal: LinearLatencyModel) -> tuple[float, float]:
        """(min, max) of member gain / nominal gain: the envelope to check stability against."""
        if not isinstance(nominal, LinearLatencyModel):
            raise TypeError(f"nominal must be a LinearLatencyModel, got {type(nominal).__name__}")
        r = [p.model.gain / nominal.gain for p in self.points]
        return min(r), max(r)

    def to_document(self) -> dict[str, Any]:
        """The model file's form (what ``gpucontrol identify`` writes as model.json):
        ``{"points": [{"mps_pct", "gain", "offset"[, "batch"][, "iteration_s"]
        [, "idle_ms", "duty_gain_ms"][, "fit_error"][, "bent_law": [c, A, B]]}, ...]
        [, "sleep_span_s": [low, high]][, "iteration_times": [[share %, s], ...]]}``
        (:func:`gpucontrol.model_form.document`)."""
        from gpucontrol.model_form import document

        return document(self)

    def to_json(self) -> str:
        """:meth:`to_document` as JSON."""
        return json.dumps(self.to_document())

    @classmethod
    def from_document(cls, doc: Any) -> LatencyModelFamily:
        """Read :meth:`to_document`'s form, a bare list of its rows, or one row with the
        family's keys beside it (a one-level file, ``mps_pct`` 100 unless given). A key the
        form does not define (:data:`~gpucontrol.model_form.FAMILY_KEYS`,
        :data:`~gpucontrol.model_form.POINT_KEYS`, :data:`~gpucontrol.model_form.LEVEL_KEYS`)
        is refused, named (:func:`gpucontrol.model_form.read`)."""
        from gpucontrol.model_form import read

        return cls(*read(doc))

    @classmethod
    def from_json(cls, text: str) -> LatencyModelFamily:
        """Read :meth:`to_json`'s text (or a bare JSON list of rows)."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"family JSON: {exc}") from None
        return cls.from_document(doc)


def _times(rows: Any) -> tuple[tuple[float, float], ...]:
    """``iteration_times`` checked: ``(share %, s)`` pairs, share in (0, 100], time in
    (0, 3600] s, no share twice; sorted by share."""
    try:
        raw = [(m, t) for m, t in rows]
    except (TypeError, ValueError):
        raise ConfigurationError(f"iteration_times must be (share %, iteration s) pairs, got "
                                 f"{rows!r:.80}") from None
    pairs = [(in_range("iteration_times share", m, 0.0, 100.0, lo_open=True),
              in_range("iteration_times iteration_s", t, 0.0, 3600.0, lo_open=True))
             for m, t in raw]
    if len({m for m, _ in pairs}) < len(pairs):
        raise ConfigurationError("iteration_times: a share measured twice; give one time per "
                                 "share")
    return tuple(sorted(pairs))


def duty_form(model: LinearLatencyModel, tau_s: float,
              span_s: tuple[float, float]) -> tuple[float, float]:
    """``(c, A)`` of the duty law ``l = c + A * tau / (tau + s)`` that a least-squares line
    over uniform sleeps in ``span_s`` would have fitted as ``model``.

    Over ``s`` uniform on ``[a, b]`` the duty ``d = tau / (tau + s)`` has mean
    ``E[d] = tau / (b - a) * ln((tau + b) / (tau + a))`` and covariance with ``s``
    ``tau - (tau + (a + b) / 2) E[d]``; the fitted line's slope is ``A`` times that covariance
    over ``var(s) = (b - a)**2 / 12``, and the line passes through the mean point
    ``((a + b) / 2, c + A E[d])``. Inverting both gives ``A`` and ``c``. ``tau`` is the
    iteration time (the sleep is taken once per iteration) or a duty cycler's run quantum.

    Parameters
    ----------
    model : LinearLatencyModel
        The least-squares line (its gain is negative).
    tau_s : float
        The duty's time constant at the model's share (s, > 0).
    span_s : (float, float)
        The sleep span the model was fitted over (s), ``low < high``.

    Returns
    -------
    (float, float)
        ``c`` (ms: the latency with the training stopped) and ``A`` (ms per unit duty, > 0).

    Examples
    --------
    >>> c, A = duty_form(LinearLatencyModel(-20.0, 100.0), 0.5, (0.0, 1.0))
    >>> round(A, 1), round(c, 1)
    (33.8, 71.4)
    """
    t = positive("tau_s", tau_s)
    a, b = bounds("span_s", span_s, 0.0, 3600.0)
    return _duty(model.gain, model.offset, t, a, b, math.log)


def duty_form_np(gain: float, offset: float, tau_s: float,
                 span_s: tuple[float, float]) -> tuple[float, float]:
    """:func:`duty_form` of one line by its gain and offset (floats, the span checked), with
    numpy's log: the outer loop re-reads its levels' lines at the iteration times it believes.
    numpy's log is the one its arrays take; ``math.log`` differs from it in the last bit for
    about one value in 3,000, and one ulp moves a share path."""
    return _duty(gain, offset, tau_s, span_s[0], span_s[1], lambda x: float(np.log(x)))


def _duty(g: Any, o: Any, t: Any, a: float, b: float, log: Any) -> tuple[Any, Any]:
    """The inversion of :func:`duty_form` (one arithmetic order, whichever ``log``)."""
    mean_d = t / (b - a) * log((t + b) / (t + a))
    cov = t - (t + 0.5 * (a + b)) * mean_d
    A = g * (b - a) ** 2 / (12.0 * cov)
    c = o + g * 0.5 * (a + b) - A * mean_d
    return c, A
