"""``gpucontrol identify``: the system-identification study of the GPUColo paper (Chen et al.,
ICDCS 2024), Sec. V-A (Figs. 6 and 7).

At each training MPS level the plant is excited with pseudo-random white noise on the sleep
interval, one value per control period (after a few warm-up periods that cover the training
restart the MPS change causes). The first part of each record fits the static model
``latency = gain * sleep + offset`` (:func:`sysid.fit_static`); the rest is held out to
compare predicted and measured latency (Fig 7's R²). Alongside, the noise-free plant gives
the true local slope at the middle of the sleep range, so the identified gain can be judged.

The same records give the training's rate curve: at each level the iterations the training
completed per period and the sleep applied fit its iteration time ``t(m)``
(:func:`sysid.fit_iteration_time`, the rate being ``1 / (t + s)``; the plant's own iteration
readings when it counts none). With it the latency is fitted once more on the training's
running fraction ``d = t / (t + s)``, ``l = c + A d`` (``idle_ms``, ``duty_gain_ms``): the
physical law, which a line in the sleep approximates differently depending on where the
white-noise sleeps fell. ``model.json`` carries both curves, latency and iteration time per
level, which the default controller's outer loop optimises over.

The training's speed need not be smooth in the share (a kernel's thread blocks run in whole
waves over the SMs it is given: on 132 SMs a 256-block kernel takes 2 waves from 128 SMs up,
3 from 86, 4 from 64), and five levels cannot show where its steps fall. A rate sweep
(``rate_levels``, :func:`rate_levels`: the shares the backend offers between the identified
levels; ``gpucontrol identify --rate-sweep``) then measures the iteration time alone at every
other share: a few periods at the low end of the sleep range after the restart, no
excitation (the latency model between levels is smooth, the speed is not). ``model.json``
keeps them as ``iteration_times``, and ``identify_rate.png`` draws them beside the levels'
times and the non-increasing law the controller reads
(:meth:`gpucontrol.LatencyModelFamily.iteration_s`).

Written to ``<out>/identify/``: ``identify_periods.csv`` (tidy, one row per period),
``identify_summary.csv`` and ``.md`` (one row per MPS level), ``identify_meta.json``,
``identify_fig6.png`` (latency vs sleep per level with the fitted lines) and
``identify_fig7.png`` (predicted vs measured on the held-out periods) and ``model.json``, the
file ``gpucontrol daemon --model`` reads (:func:`model_document`), when some level has a
significantly negative gain. Each run's files replace the previous run's as a whole
(:func:`harness.results.result_set`): a run that makes no model leaves no ``model.json``.
The command prints gain, offset and R² per level, then the gain envelope across levels and
whether the GPUColo paper's P controller designed on the recommended nominal gain is stable
over it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import sysid
from gpucontrol import (
    LinearLatencyModel,
    ShareKnob,
    check_envelope,
    design_p,
)
from harness.checks import number
from harness.experiments.common import (
    ExperimentResult,
    close_plant,
    distinct_numbers,
    make_plant,
    plant_mps_enabled,
)
from harness.experiments.model_doc import family_of, model_document, time_sliced
from harness.progress import Progress
from harness.results import (
    markdown_table,
    result_set,
    write_csv,
    write_json,
    write_markdown_table,
)
from harness.sim.protocol import Records

__all__ = ["MIN_SPLIT_PERIODS", "MPS_RANGE", "PERIOD_COLUMNS", "RATE_PERIODS", "SUMMARY_COLUMNS",
           "check_split", "family_of", "identify", "model_document", "rate_levels"]

#: The training MPS levels identification takes, %: [1, 100] (``gpucontrol identify --mps``).
MPS_RANGE = (1.0, 100.0)
#: The fewest periods of each record to fit, and to hold out.
MIN_SPLIT_PERIODS = 3
#: Periods recorded per share of the rate sweep (after the warm-up).
RATE_PERIODS = 4


def rate_levels(levels: Sequence[float], knob: ShareKnob | None = None) -> tuple[float, ...]:
    """The shares a rate sweep measures: the ones ``knob`` offers an outer loop (default:
    MPS percentages, :meth:`ShareKnob.candidates`) strictly between the lowest and the highest
    of ``levels``, other than those.

    >>> rate_levels((40, 100))[:3]
    (43.0, 46.0, 49.0)
    """
    lo, hi = min(levels), max(levels)
    knob = ShareKnob() if knob is None else knob
    return tuple(m for m in knob.candidates() if lo < m < hi and m not in set(levels))


def check_split(train_fraction: Any, periods: Any,
                names: tuple[str, str] = ("train_fraction", "periods")) -> None:
    """Refuse a fit/hold-out split that leaves fewer than :data:`MIN_SPLIT_PERIODS` periods
    on either side (or a fraction outside (0, 1)), naming the arguments as ``names`` (the
    command line passes its flags).

    Parameters
    ----------
    train_fraction : float
        Share of each record used for fitting.
    periods : int
        Recorded periods per level.
    names : tuple of str
        How the two are called in the message.

    Returns
    -------
    None
        It raises ``ValueError`` or returns.
    """
    f = number(names[0], train_fraction, 0.0, 1.0, lo_open=True, hi_open=True)
    n = int(periods)
    n_fit = int(f * n)
    if n_fit < MIN_SPLIT_PERIODS or n - n_fit < MIN_SPLIT_PERIODS:
        raise ValueError(f"{names[0]} {f:g} of {names[1]} {n} leaves {n_fit} periods to fit "
                         f"and {n - n_fit} to hold out; each needs at least "
                         f"{MIN_SPLIT_PERIODS}")

SUMMARY_COLUMNS = ("mps_pct", "gain", "offset", "r2", "r2_validation", "fit_pct_validation",
                   "gain_ci_low", "gain_ci_high", "true_gain", "gain_err_pct", "rmse_ms",
                   "residuals_white", "n_train", "n_validation", "iteration_s",
                   "true_iteration_s", "idle_ms", "duty_gain_ms", "fit_error", "bend_idle_ms",
                   "bend_gain_ms", "bend", "bend_fit_error")
#: The GPUColo paper (Chen et al., ICDCS 2024), Sec. V-A reports R² > 79 % for its linear model.
R2_BAR = 0.79
PERIOD_COLUMNS = ("mps_pct", "k", "t_s", "split", "sleep_s", "latency_ms", "predicted_ms",
                  "expected_ms")


def identify(*, plant: Any = "sim", preset: str = "fig8", seed: int = 0,
             mps_levels: Sequence[float] = (40.0, 60.0, 80.0, 100.0),
             sleep_range: tuple[float, float] = (0.1, 0.7), periods: int = 100,
             train_fraction: float = 0.6, period_s: float = 4.0, warmup: int = 3,
             excitation: str = "white", out_dir: str | Path | None = None,
             progress: bool | None = False, statistic: str = "mean",
             rate_levels: Sequence[float] = ()) -> ExperimentResult:
    """Identify ``latency = gain * sleep + offset`` per MPS level with white-noise excitation.

    Parameters
    ----------
    plant, preset, seed
        Which plant (a registry name: ``"sim"``, ``"gpu"``, ``"cpu"``; or a running plant
        object, which is used as is and left open), its preset and random seed.
    mps_levels
        Training MPS percentages, each in [1, 100] and none twice, identified in turn on the
        same plant.
    sleep_range
        Bounds of the white-noise sleep interval (s).
    periods
        Recorded control periods per level (after ``warmup``).
    train_fraction
        Share of each record used for fitting, in (0, 1); the rest validates. Each side
        needs at least 3 periods (:func:`check_split`).
    period_s
        Control period T (s).
    warmup
        Periods discarded after each MPS change (the training restarts, ~7 s).
    excitation : {'white', 'prbs'}
        Uniform white noise over ``sleep_range`` (the paper's), or a pseudo-random binary
        sequence at its two ends (three times the input power, for a noisy plant).
    out_dir
        Folder for CSV/PNG/JSON (nothing written when None).
    progress
        Show a progress bar (None: when stderr is a terminal).
    statistic : {'mean', 'p99'}
        The latency statistic modelled (a p99 controller needs the p99's model).
    rate_levels
        Shares, each in [1, 100], not among ``mps_levels``, where only the training's
        iteration time is measured (:data:`RATE_PERIODS` periods at the low end of the sleep
        range after ``warmup``): the rate sweep (module docstring; :func:`rate_levels`).

    Returns
    -------
    ExperimentResult
        ``records``: one row per period; ``summary``: one row per MPS level (see
        :data:`SUMMARY_COLUMNS`); ``meta`` holds the envelope, the recommended nominal gain,
        the stability verdict and the rate sweep's ``iteration_times`` (``[share, s]``
        pairs); ``family`` (:func:`family_of`) the model.json curves.
    """
    lo, hi = (float(sleep_range[0]), float(sleep_range[1]))
    if not (0.0 <= lo < hi):
        raise ValueError(f"sleep_range must satisfy 0 <= low < high, got {sleep_range!r}")
    if int(periods) != periods or periods < 10:
        raise ValueError(f"periods must be an integer >= 10, got {periods!r}")
    if excitation not in ("white", "prbs"):
        raise ValueError(f"excitation must be 'white' or 'prbs', got {excitation!r}")
    check_split(train_fraction, periods)
    # as --mps takes them: a level given twice would write a model.json the daemon refuses
    levels = distinct_numbers("mps_levels", mps_levels, *MPS_RANGE)
    sweep = distinct_numbers("rate_levels", rate_levels, *MPS_RANGE) if len(rate_levels) else []
    both = sorted(set(sweep) & set(levels))
    if both:
        raise ValueError(f"rate_levels: {', '.join(f'{m:g}' for m in both)} % also in "
                         "mps_levels (its iteration time comes with its latency model)")
    own = isinstance(plant, str)
    p = make_plant(plant, preset, seed=seed) if own else plant
    records = Records()
    summary: list[dict[str, Any]] = []
    fits: dict[str, sysid.StaticFit] = {}
    mid = 0.5 * (lo + hi)
    try:
        with Progress(len(levels) * (int(periods) + warmup)
                      + len(sweep) * (RATE_PERIODS + warmup), "identify",
                      enabled=progress) as bar:
            for i, m in enumerate(levels):
                u = (sysid.white_noise(int(periods), lo, hi, seed=seed * 1000 + i)
                     if excitation == "white" else
                     sysid.prbs(int(periods), lo, hi, seed=seed * 1000 + i + 1))
                for _ in range(warmup):
                    bar.advance()
                rec = _Recorder(p)
                data = _record(rec, u, m, {"period_s": period_s, "warmup": warmup,
                                           "statistic": statistic,
                                           "meta": {"preset": preset, "seed": seed},
                                           "progress": lambda _k, _n: bar.advance()},
                               train_fraction)
                row, rows, fit = _identify_level(p, data, m, train_fraction, mid)
                row["iteration_s"] = rec.iteration_s(warmup, period_s)
                row["true_iteration_s"] = _call(p, "expected_iteration_s", None, m)
                train = data.split(train_fraction)[0]
                row["idle_ms"], row["duty_gain_ms"] = _duty_law(train, row["iteration_s"])
                row.update(_bent_law(train, row["iteration_s"]))
                summary.append(row)
                records.extend(rows)
                fits[f"{m:g}"] = fit
            times = [[m, t] for m in sweep
                     if math.isfinite(t := _rate(p, m, lo, period_s, warmup, bar)) and t > 0]
        mps_on = plant_mps_enabled(p)
    finally:
        if own:
            close_plant(p)
    meta = {"experiment": "identify", "plant": plant if own else type(p).__name__,
            "share_name": share_name(p),
            "preset": str(preset), "seed": seed,
            "mps_levels": levels, "sleep_range_s": [lo, hi], "periods": int(periods),
            "train_fraction": train_fraction, "period_s": period_s, "warmup": warmup,
            "excitation": excitation, "statistic": statistic,
            "mps_enabled": mps_on, "iteration_times": times,
            "plant_params": p.describe() if hasattr(p, "describe") else {}}
    meta.update(_envelope(fits))
    res = ExperimentResult("identify", records, summary, meta=meta)
    if out_dir is not None:
        out = Path(out_dir)
        # the run's files replace the previous run's as a whole: a run that makes no model
        # leaves no model.json (an earlier run's would be read by the daemon as this one's)
        from harness.experiments.identify_figures import plot_fig6, plot_fig7, plot_rate

        with result_set(out):
            res.files += [
                write_csv(records, out / "identify_periods.csv", PERIOD_COLUMNS),
                write_csv(summary, out / "identify_summary.csv", SUMMARY_COLUMNS),
                write_markdown_table(summary, SUMMARY_COLUMNS, out / "identify_summary.md",
                                     title="System identification (GPUColo paper, Figs. 6/7)",
                                     digits=3),
                write_json(meta, out / "identify_meta.json"),
                plot_fig6(res, p, out / "identify_fig6.png"),
                plot_fig7(res, out / "identify_fig7.png"),
            ]
            if times:
                res.files.append(plot_rate(res, out / "identify_rate.png"))
            doc = model_document(summary, sleep_span_s=(lo, hi), iteration_times=times)
            if doc is not None:
                res.files.append(write_json(doc, out / "model.json"))
    return res


def _record(rec: _Recorder, u: np.ndarray, mps: float, kw: dict[str, Any],
            train_fraction: float) -> sysid.IdData:
    """One level's record (:func:`sysid.run_experiment`, the periods without a reading
    dropped). A record too short to fit and hold out :data:`MIN_SPLIT_PERIODS` each, or
    none at all, is refused naming the level and the count (the split's own message,
    "u is too short: 2 sample(s)", said neither)."""
    share = share_name(rec.plant)
    try:
        data = sysid.run_experiment(rec, u, mps_pct=mps, on_invalid="drop", **kw)
    except ValueError as exc:
        raise ValueError(f"{share} {mps:g}%: {exc}") from None
    n_fit = int(train_fraction * len(data))
    if n_fit < MIN_SPLIT_PERIODS or len(data) - n_fit < MIN_SPLIT_PERIODS:
        raise ValueError(f"{share} {mps:g}%: the plant gave a latency in only {len(data)} of "
                         f"{len(u)} periods ({data.meta['dropped']} without one), too few to "
                         f"fit and hold out {MIN_SPLIT_PERIODS} each at train_fraction "
                         f"{train_fraction:g}; record more periods or check the inference's "
                         "load")
    return data


def _duty_law(train: sysid.IdData, iteration_s: float) -> tuple[float, float]:
    """``(c, A)`` of the latency ``c + A d`` fitted on the running fraction
    ``d = t / (t + s)`` of the fit periods (NaNs without an iteration time or an ``A > 0``):
    the line in the sleep depends on where the white-noise sleeps fell, the law does not."""
    if not (math.isfinite(iteration_s) and iteration_s > 0) or len(train) < 3:
        return math.nan, math.nan
    d = iteration_s / (iteration_s + np.asarray(train.u, float))
    if np.ptp(d) <= 0:
        return math.nan, math.nan
    a, c = np.polyfit(d, np.asarray(train.y, float), 1)
    return (float(c), float(a)) if a > 0 else (math.nan, math.nan)


BENT = ("bend_idle_ms", "bend_gain_ms", "bend", "bend_fit_error")


def _bent_law(train: sysid.IdData, iteration_s: float) -> dict[str, float]:
    """The law ``(c + A d) / (1 - B d)`` on the same periods (:func:`sysid.fit_duty_law`):
    ``bend_idle_ms``, ``bend_gain_ms``, ``bend`` and its residual ``bend_fit_error`` (RMS of
    the log, a relative error like ``fit_error``); NaNs without an iteration time. Where the
    level is time-sliced (:func:`~harness.experiments.model_doc.time_sliced`) model.json
    keeps it as the level's ``bent_law``."""
    if math.isfinite(iteration_s) and iteration_s > 0 and len(train) >= 3:
        try:
            law = sysid.fit_duty_law(train.u, train.y, iteration_s)
        except ValueError:
            pass
        else:
            return dict(zip(BENT, (law.c, law.a, law.b, law.rms_log), strict=True))
    return dict.fromkeys(BENT, math.nan)


def _rate(p: Any, m: float, sleep_s: float, period_s: float, warmup: int, bar: Any) -> float:
    """The training's iteration time at share ``m`` alone (the rate sweep): after ``warmup``
    periods, :data:`RATE_PERIODS` at ``sleep_s``; NaN when nothing was counted or read."""
    rec = _Recorder(p)
    for _ in range(warmup):
        bar.advance()
    sysid.run_experiment(rec, np.full(RATE_PERIODS, sleep_s), period_s=period_s, mps_pct=m,
                         warmup=warmup, on_invalid="drop",
                         progress=lambda _k, _n: bar.advance())
    return rec.iteration_s(warmup, period_s)


class _Recorder:
    """The plant, stepped through, keeping each period's sleep and training progress."""

    def __init__(self, plant: Any) -> None:
        self.plant = plant
        self.periods: list[tuple[float, float, float]] = []   # (sleep, iterations, iteration_s)

    def __getattr__(self, item: str) -> Any:
        return getattr(self.plant, item)

    def step(self, actuation: Any, period_s: float) -> Any:
        r = self.plant.step(actuation, period_s)
        restarting = bool(getattr(r, "restarting", False))
        self.periods.append((float(actuation.sleep_s),
                             math.nan if restarting else float(
                                 getattr(r, "training_iterations", math.nan)),
                             float(getattr(r, "iteration_s", math.nan))))
        return r

    def iteration_s(self, warmup: int, period_s: float) -> float:
        """The training's iteration time over the recorded periods (after ``warmup``): the
        time balance of the iterations counted (:func:`sysid.fit_iteration_time`), else the
        median of the plant's own readings; NaN when neither is there."""
        rows = np.array(self.periods[warmup:], float).reshape(-1, 3)
        counted = np.isfinite(rows[:, 1]) & (rows[:, 1] > 0)
        if counted.sum() >= 2:
            try:
                return sysid.fit_iteration_time(rows[counted, 0], rows[counted, 1], period_s,
                                                 sleep_factor=1.0).iteration_s
            except ValueError:
                pass
        read = rows[:, 2][np.isfinite(rows[:, 2]) & (rows[:, 2] > 0)]
        return float(np.median(read)) if read.size else math.nan


def _identify_level(p: Any, data: sysid.IdData, mps: float, train_fraction: float,
                    mid: float) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    train, val = data.split(train_fraction)
    fit = sysid.fit_static(train.u, train.y)
    v_r2, v_fit, white = _scores(fit, train, val)
    true_gain = _call(p, "local_gain", mid, mps)
    row = {"mps_pct": mps, "gain": fit.gain, "offset": fit.offset, "r2": fit.r2,
           "r2_validation": v_r2, "fit_pct_validation": v_fit,
           "gain_ci_low": fit.ci95[0][0], "gain_ci_high": fit.ci95[0][1],
           "true_gain": true_gain, "gain_err_pct": 100.0 * (fit.gain / true_gain - 1.0)
           if true_gain else math.nan, "rmse_ms": fit.rmse, "residuals_white": white,
           "fit_error": _relative(fit.rmse, train.y),
           "n_train": len(train), "n_validation": len(val)}
    expected = _call(p, "expected_latency_ms", np.asarray(data.u), mps)
    expected = np.broadcast_to(np.asarray(expected, float), data.u.shape)
    rows = [{"mps_pct": mps, "k": k, "t_s": float(t), "split":
             "train" if k < len(train) else "validation", "sleep_s": float(s),
             "latency_ms": float(y), "predicted_ms": float(fit.predict(s)),
             "expected_ms": float(e)}
            for k, (t, s, y, e) in enumerate(zip(data.t, data.u, data.y, expected))]
    return row, rows, fit


def _scores(fit: sysid.StaticFit, train: sysid.IdData, val: sysid.IdData
            ) -> tuple[float, float, Any]:
    """Held-out R², fit % and the residuals' whiteness; NaN where undefined: a level whose
    held-out latency does not move (R²'s denominator is 0) or that the line fits exactly
    (no residual to test) is reported, not the end of the whole identification."""
    if float(np.ptp(val.y)) > 0:
        v = sysid.validate(fit, val)
        v_r2, v_fit = v.r2, v.fit_pct
    else:
        v_r2 = v_fit = math.nan
    try:
        white: Any = sysid.resid(fit, train, max_lag=min(20, len(train) // 4)).white
    except ValueError:   # residuals all zero, or max_lag too large for a short record
        white = math.nan
    return v_r2, v_fit, white


def _relative(rmse_ms: float, latency_ms: Any) -> float:
    """The residual's RMS as a fraction of the mean latency (NaN without a positive mean)."""
    mean = float(np.mean(latency_ms)) if len(latency_ms) else math.nan
    return rmse_ms / mean if mean > 0 else math.nan


def _call(p: Any, name: str, sleep: Any, mps: float) -> Any:
    """A noise-free view of the plant if it offers one (the simulator does), else NaN
    (``sleep`` None: a view of the MPS level alone)."""
    fn = getattr(p, name, None)
    if not callable(fn):
        return math.nan
    out = fn(mps) if sleep is None else fn(sleep, mps)
    return float(out) if np.ndim(out) == 0 else np.asarray(out, float)


def _envelope(fits: dict[str, Any]) -> dict[str, Any]:
    """Gain envelope over the identified levels and the P design on the best nominal."""
    usable = {k: f for k, f in fits.items() if f.gain < 0 and f.ci95[0][1] < 0}
    if not usable:
        return {"envelope": None, "note": "no level has a significantly negative gain"}
    choice = sysid.recommend_nominal(usable)
    env = sysid.gain_envelope(usable, nominal=choice.nominal_gain)
    offset = float(np.mean([f.offset for f in usable.values()]))
    model = LinearLatencyModel(gain=choice.nominal_gain, offset=offset)
    verdict = check_envelope(design_p(model), model, env.envelope)
    return {"envelope": list(env.envelope), "envelope_levels": list(usable),
            "nominal_gain": choice.nominal_gain, "worst_pole_abs": choice.worst_pole_abs,
            "p_design_stable": bool(verdict.stable), "verdict": str(verdict)}


def share_name(plant: Any) -> str:
    """What the plant's spatial share is, for labels: its ``share_name`` (the CPU plant's is
    ``"CPU share"``), else ``"MPS"`` (the simulated and GPU plants' active-thread share)."""
    return str(getattr(plant, "share_name", "MPS"))


# ---- command line ----------------------------------------------------------------------------
def _below(r2: float, bar: float = R2_BAR) -> str:
    """``r2`` (< ``bar``) with enough digits that it does not print as the bar itself."""
    for digits in range(2, 7):
        if float(f"{r2:.{digits}f}") < bar:
            return f"{r2:.{digits}f}"
    return f"{r2:.6f}"


def _bend_note(share: str, r: dict[str, Any]) -> str:
    """One line when the level's latency is hyperbolic in the training's duty (the training
    time-sliced beside the inference: ``1 / latency`` falls linearly as it runs more), where
    the line and the duty law miss; empty otherwise."""
    if not time_sliced(r):
        return ""
    b, e_bent = float(r["bend"]), float(r["bend_fit_error"])
    e_line = float(r["fit_error"])
    return (f"\n{share} {r['mps_pct']:g}%: the latency is hyperbolic in the training's duty d "
            f"(time-sliced): (c + A d) / (1 - B d) with B = {b:.2f} fits within "
            f"{100 * e_bent:.1f} % where the line misses by {100 * e_line:.0f} %")


def format_summary(res: ExperimentResult) -> str:
    """The printed report: per-level table, then the envelope and the design verdict."""
    share = res.meta.get("share_name", "MPS")
    cols = ("mps_pct", "gain", "offset", "r2", "r2_validation", "true_gain", "gain_err_pct",
            "iteration_s")
    heads = (f"{share} %", "gain (ms/s)", "offset (ms)", "R² fit", "R² held-out",
             "true slope", "gain err %", "iteration (s)")
    text = markdown_table(res.summary, cols, heads, digits=2)
    lo, hi = res.meta["sleep_range_s"]
    for r in res.summary:
        if r["gain"] == 0.0 and math.isnan(r["r2_validation"]):   # nothing moved it at all
            text += (f"\n{share} {r['mps_pct']:g}%: the latency did not move over the sleep "
                     f"range ({r['offset']:.2f} ms in every period): no gain to fit, so no R² "
                     "held out; the level is left out of model.json")
            continue
        bent = _bend_note(share, r)
        if r["r2_validation"] < R2_BAR:
            signal = abs(r["gain"]) * (hi - lo) / math.sqrt(12.0)  # std of gain * U(lo, hi)
            why = ("the latency is not a line in the sleep (below)" if bent else
                   "the sleep knob barely acts at this level" if signal < r["rmse_ms"] else
                   "the curve bends over this sleep range and the period means are noisy "
                   "(training iterations alias with the control period)")
            text += (f"\n{share} {r['mps_pct']:g}%: held-out R² {_below(r['r2_validation'])} < "
                     f"{R2_BAR:g} (the GPUColo paper's bar): the sleep moves latency by "
                     f"{signal:.2f} ms rms against {r['rmse_ms']:.2f} ms rms of residual; {why}")
        text += bent
    m = res.meta
    if m.get("envelope"):
        text += (f"\n\nGain envelope over {share} {', '.join(m['envelope_levels'])}%: "
                 f"{m['envelope'][0]:.2f}..{m['envelope'][1]:.2f} of the recommended nominal "
                 f"gain {m['nominal_gain']:.2f} ms/s (worst closed-loop |pole| "
                 f"{m['worst_pole_abs']:.2f})\nP controller on that nominal: {m['verdict']}\n")
    else:
        text += f"\n{m.get('note', '')}\n"
    return text
