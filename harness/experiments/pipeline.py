"""The user's pipeline on a live plant: identify -> model.json -> the daemon process -> a burst.

``gpucontrol demo --plant cpu`` runs :func:`run_pipeline` on the CPU plant
(:mod:`harness.hil.cpu`, reached through the plant registry): it starts the inference and
training services, identifies ``latency = gain * sleep + offset`` with a binary excitation
on the sleep (:func:`harness.experiments.identify.identify`, which writes ``model.json``),
chooses an SLO inside the measured latency range, hands the knobs over and starts
``python -m gpucontrol.daemon`` as its own process on the training -- latency scraped from the
service's Prometheus histogram, sleep by SIGSTOP/SIGCONT, share by the cgroup CPU quota --
applies a load burst, and stops everything cleanly.

Written to ``<out>/cpu_demo/``: ``periods.csv`` (one row per period of both phases, columns
:data:`PERIOD_COLUMNS`), ``daemon.jsonl`` (the daemon's JSON log), ``model.json`` and the
identification files under ``identify/``, ``summary.json`` and ``pipeline.png``.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpucontrol.node.actuators.procs import descendants
from harness.experiments.daemon_watch import LogProgress, watch_daemon
from harness.experiments.identify import identify
from harness.experiments.plants import ExperimentFailed, make_plant
from harness.results import final, result_set, save_figure, staged, write_csv, write_json

__all__ = ["PERIOD_COLUMNS", "choose_slo", "run_pipeline", "summarize"]

PERIOD_COLUMNS = ("period", "phase", "t_s", "slo_ms", "latency_ms", "p99_ms", "count",
                  "sleep_s", "share_pct", "training_iterations", "burst")


class _Recorder:
    """A plant proxy that keeps every :class:`~harness.sim.protocol.PeriodResult`."""

    def __init__(self, plant: Any) -> None:
        self._plant = plant
        self.results: list[Any] = []

    def step(self, actuation: Any, period_s: float) -> Any:
        r = self._plant.step(actuation, period_s)
        self.results.append(r)
        return r

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plant, name)


def choose_slo(sleep: Any, latency: Any, fraction: float = 0.5
               ) -> tuple[float, tuple[float, float]]:
    """An SLO ``fraction`` of the way down the measured latency range (the middle).

    The range is the median latency of the periods with the least sleep (the lower half of
    the excited sleeps) and of those with the most (the upper half): medians, because a
    shared machine throws single periods far off.

    Parameters
    ----------
    sleep, latency : array_like
        The identification periods' sleep (s) and mean latency (ms).
    fraction : float
        Where in the range, from its top (no sleep), in (0, 1).

    Returns
    -------
    tuple
        ``(slo_ms, (low_ms, high_ms))``: the SLO and the measured latency range.

    Examples
    --------
    >>> choose_slo([0, 0.5, 0, 0.5, 0, 0.5], [20, 10, 22, 11, 90, 10])
    (16.0, (10.0, 22.0))
    """
    u = np.asarray(sleep, float)
    y = np.asarray(latency, float)
    ok = np.isfinite(u) & np.isfinite(y)
    u, y = u[ok], y[ok]
    mid = 0.5 * (u.min() + u.max())
    hi = float(np.median(y[u <= mid]))
    lo = float(np.median(y[u > mid]))
    lo, hi = min(lo, hi), max(lo, hi)
    return hi - fraction * (hi - lo), (lo, hi)


def _daemon_cmd(plant: Any, model: Path, slo: float, period_s: float, duration_s: float,
                run_dir: str, log: Path, outer_every: int, detune: float | None,
                max_sleep_s: float | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "gpucontrol.daemon", "--training-pid", str(plant.training_pid),
           "--slo-ms", f"{slo:.4f}", "--model", str(model), "--period-s", str(period_s),
           "--duration-s", str(duration_s), "--outer-every", str(outer_every),
           "--latency-source", "prometheus", "--prometheus-url", plant.metrics_url,
           "--sleep-method", "signal", "--run-quantum-s", str(plant.config.run_quantum_s),
           "--socket", f"{run_dir}/g.sock", "--state", f"{run_dir}/g.state.json",
           "--hook", f"{run_dir}/g.hook", "--log", str(log),
           # the plant's services hold 10x the CPU weight of everything else here, the daemon
           # included, so a loaded 2-core machine can leave it off the CPU for seconds: a
           # stall means minutes here, not the default two periods
           "--stall-timeout-s", f"{max(10.0, 4 * period_s):g}"]
    if detune is not None:
        cmd += ["--detune", str(detune)]
    if max_sleep_s is not None:
        cmd += ["--max-sleep-s", f"{max_sleep_s:g}"]
    if plant.share is not None or plant.mps_enabled:
        cmd += ["--share-backend", "cpu", "--share-cgroup", plant.training_cgroup]
    else:
        cmd += ["--outer", "none"]
    return cmd


def _preload() -> None:
    """Import what the identification and the figures need (scipy.signal for the excitation,
    matplotlib's pyplot) before the plant starts: once it runs, its services hold ten times
    this process's CPU weight, and an import then takes seconds to tens of seconds."""
    import matplotlib.pyplot  # noqa: F401
    import scipy.signal  # noqa: F401


#: Periods run before the second identification, on a plant already warm.
RETRY_WARMUP = 1


def _identify_or_fail(rec: _Recorder, out: Path, say: Any, *, periods: int,
                      warmup: int, period_s: float, **kw: Any) -> tuple[Any, int]:
    """Identify (:func:`harness.experiments.identify.identify`, writing ``model.json`` when
    the gain is significantly negative); when it is not, once more with twice the periods --
    a shared machine's other load can hide the sleep's effect in one record and not in a
    longer one. Returns the identification and the index in ``rec.results`` of its first
    recorded period; raises :class:`~harness.experiments.plants.ExperimentFailed` (one line:
    both fits, the load, what to try) when neither found the gain."""
    tries: list[str] = []
    for n, w in ((periods, warmup), (2 * periods, RETRY_WARMUP)):
        first = len(rec.results) + w
        ident = identify(plant=rec, mps_levels=(100.0,), periods=n, period_s=period_s,
                         warmup=w, out_dir=out / "identify", **kw)
        if out / "identify" / "model.json" in ident.files:  # this run's model, never older
            return ident, first
        row = ident.summary[0]
        tries.append(f"gain {row['gain']:.1f} ms/s, R² {row['r2']:.2f} over {n} periods")
        if len(tries) == 1:
            say(f"no significant gain ({tries[0]}); identifying again with {2 * n} periods")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    raise ExperimentFailed(
        f"the identification found no significant gain twice ({tries[0]}; then {tries[1]}): "
        f"the sleep's effect on the latency was lost in the scatter the machine's other load "
        f"causes (load average {load:.1f} on {os.cpu_count()} CPUs), so there is no model to "
        f"control with and the daemon was not started; try again when the machine is "
        f"quieter, or with longer periods that average more batches (--period "
        f"{2 * period_s:g})")


def _sample_iterations(plant: Any, stop: threading.Event, out: list[tuple[float, int]]) -> None:
    while not stop.is_set():
        out.append((time.time(), plant.training_iterations()))
        stop.wait(0.1)


def _whole(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            int(value) != value or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")


def _check_pipeline_args(period_s: Any, identify_periods: Any, closed_periods: Any,
                         burst: Any, sleep_range: Any, slo_ms: Any, outer_every: Any,
                         excitation: Any, detune: Any) -> None:
    """Refuse a bad argument before any process starts, naming it and its range."""
    def num(v: Any) -> float:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan

    if not 0.05 <= num(period_s) <= 3600.0:
        raise ValueError(f"period_s must be in [0.05, 3600] s, got {period_s!r}")
    _whole("identify_periods", identify_periods, 10)   # what identification needs
    _whole("closed_periods", closed_periods, 1)
    _whole("outer_every", outer_every, 1)
    try:
        a, b = (num(x) for x in burst)
    except (TypeError, ValueError):
        a = b = math.nan
    if not 0.0 <= a <= b <= 1.0:
        raise ValueError(f"burst must be (start, end) fractions with 0 <= start <= end <= 1, "
                         f"got {burst!r}")
    if sleep_range is not None:
        try:
            lo, hi = (num(x) for x in sleep_range)
        except (TypeError, ValueError):
            lo = hi = math.nan
        if not 0.0 <= lo < hi <= 3600.0:
            raise ValueError(f"sleep_range must be (low, high) seconds with 0 <= low < high "
                             f"<= 3600, got {sleep_range!r}")
    if slo_ms is not None and not 0.0 < num(slo_ms) < math.inf:
        raise ValueError(f"slo_ms must be a finite number > 0, got {slo_ms!r}")
    if detune is not None and not 0.0 < num(detune) < 2.0:
        raise ValueError(f"detune must be in (0, 2), got {detune!r}")
    if excitation not in ("prbs", "white"):
        raise ValueError(f"excitation must be 'prbs' or 'white', got {excitation!r}")


def run_pipeline(out_dir: str | Path = "results", *, plant: str = "cpu",
                 preset: str = "default", period_s: float = 4.0, identify_periods: int = 24,
                 closed_periods: int = 30, burst: tuple[float, float] = (0.35, 0.7),
                 sleep_range: tuple[float, float] | None = None, slo_ms: float | None = None,
                 outer_every: int = 25, excitation: str = "prbs", detune: float | None = 0.35,
                 seed: int = 0, progress: bool = True, warmup_s: float = 8.0,
                 **plant_overrides: Any) -> dict[str, Any]:
    """Identify, write model.json, run the daemon process through a load burst.

    Parameters
    ----------
    out_dir : str or pathlib.Path
        Results go to ``<out_dir>/cpu_demo/``.
    plant, preset : str
        Registry plant (one with ``training_pid``, ``metrics_url``, ``release``) and preset.
    period_s : float
        Control period of both phases (s).
    identify_periods, closed_periods : int
        Periods of identification (after the start-up periods) and of closed loop.
    burst : tuple of float
        Start and end of the burst as fractions of the closed-loop phase, counted in the
        periods the daemon has logged.
    sleep_range : tuple of float or None
        Sleep range of the excitation (s); None: 0 to one run quantum of the plant's duty
        cycler (running fraction 1 to 1/2; 0.5 s for a plant without one). The latency is
        convex in the sleep (steep near none, flat beyond a few quanta): over a wider range
        the fitted slope is a fraction of the slope at the SLO and the loop overshoots.
    slo_ms : float or None
        The SLO; None chooses the middle of the measured range (:func:`choose_slo`).
    outer_every : int
        The daemon's outer (share) loop period, in inner periods.
    detune : float or None
        The daemon's ``--detune`` (inner gain as a fraction of deadbeat on the model; None:
        the daemon's default, 0.5): lower passes less of the plant's per-period scatter
        into the sleep and leaves margin for a local slope steeper than the fitted one.
    excitation : {'prbs', 'white'}
        Identification input: a pseudo-random binary sequence at the two ends of
        ``sleep_range`` (default; the most input power against this plant's noise) or the
        paper's uniform white noise.
    seed : int
        Seed of the identification's excitation (>= 0).
    progress : bool
        Print what happens to stderr.
    warmup_s : float
        Seconds of the services' start-up run and discarded before the identification, in
        [0, 3600] (at least two periods are).
    **plant_overrides : Any
        Plant settings (``backend="torch"``...).

    Returns
    -------
    dict
        The summary (also in ``summary.json``): SLO and why, R², median |l - SLO|/SLO,
        share of periods over 1.05 SLO, training throughput, the PIDs it started (services,
        loader worker, daemon), files.
    """
    _check_pipeline_args(period_s, identify_periods, closed_periods, burst, sleep_range,
                         slo_ms, outer_every, excitation, detune)
    _whole("seed", seed, 0)
    if not (isinstance(warmup_s, (int, float)) and not isinstance(warmup_s, bool)
            and 0.0 <= warmup_s <= 3600.0):
        raise ValueError(f"warmup_s must be in [0, 3600] s, got {warmup_s!r}")
    # the whole run works in the staging folder of <out>/cpu_demo, which replaces the previous
    # run's folder only when this one completes
    with result_set(Path(out_dir) / "cpu_demo") as dest:
        return _run_pipeline(staged(dest), plant=plant, preset=preset, period_s=period_s,
                             identify_periods=identify_periods, closed_periods=closed_periods,
                             burst=burst, sleep_range=sleep_range, slo_ms=slo_ms,
                             outer_every=outer_every, excitation=excitation, detune=detune,
                             seed=seed, progress=progress, warmup_s=warmup_s,
                             **plant_overrides)


def _run_pipeline(out: Path, *, plant: str, preset: str, period_s: float,
                  identify_periods: int, closed_periods: int, burst: tuple[float, float],
                  sleep_range: tuple[float, float] | None, slo_ms: float | None,
                  outer_every: int, excitation: str, detune: float | None, seed: int,
                  progress: bool, warmup_s: float, **plant_overrides: Any) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)

    def say(msg: str) -> None:
        if progress:
            sys.stderr.write(f"[cpu demo] {msg}\n")
            sys.stderr.flush()

    t_start = time.monotonic()
    warmup = max(2, math.ceil(warmup_s / period_s))  # the services' start-up transient
    log = out / "daemon.jsonl"
    log.unlink(missing_ok=True)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    daemon: subprocess.Popen[bytes] | None = None
    # what the run imports later, imported now: the plant's services hold ten times the CPU
    # weight of this process, which then took 20 s for scipy.signal on a 2-core machine
    _preload()
    say(f"starting the {plant} plant ({preset})")
    rec: _Recorder | None = None
    burst_at: list[float] = []
    pids: list[int] = []
    rc: int | None = None
    run_dir: str | None = None
    p = make_plant(plant, preset, workdir=out / "services", **plant_overrides)
    try:  # from here on, whatever ends the run (SIGTERM too) stops what it started
        if sleep_range is None:
            q = getattr(getattr(p, "config", None), "run_quantum_s", None)
            sleep_range = (0.0, float(q)) if q else (0.0, 0.5)
        rec = _Recorder(p)
        pids += [p.inference_pid, p.training_pid, *descendants([p.training_pid])]
        say(f"identifying: {identify_periods} periods of {period_s:g} s, {excitation} sleep in "
            f"[{sleep_range[0]:g}, {sleep_range[1]:g}] s")
        try:
            ident, first = _identify_or_fail(rec, out, say, sleep_range=sleep_range,
                                             periods=identify_periods, period_s=period_s,
                                             warmup=warmup, excitation=excitation,
                                             seed=int(seed))
        except ExperimentFailed:  # the periods it ran, with the partial output
            write_csv(_identify_rows(rec.results, math.nan), out / "periods.csv",
                      PERIOD_COLUMNS)
            raise
        row = ident.summary[0]
        (out / "model.json").write_text((out / "identify" / "model.json").read_text())
        kept = rec.results[first:]  # what the identification that found the gain recorded
        rng_slo = choose_slo([r.sleep_s for r in kept], [r.mean_ms for r in kept])
        slo = float(slo_ms) if slo_ms is not None else rng_slo[0]
        why = (f"given: {slo:.2f} ms" if slo_ms is not None else
               f"{slo:.2f} ms, the middle of the measured latency range "
               f"{rng_slo[1][0]:.2f}..{rng_slo[1][1]:.2f} ms (median latency at the most and "
               f"at the least sleep during identification)")
        say(f"model: latency = {row['gain']:.2f} * sleep + {row['offset']:.2f} ms "
            f"(R² {row['r2']:.2f}, held-out {row['r2_validation']:.2f}); SLO {why}")

        p.release()
        run_dir = tempfile.mkdtemp(prefix="gpucontrol-demo-")
        duration = closed_periods * period_s + 0.5 * period_s
        # the sleep's reach ends a few identified ranges out (the running fraction q/(q+s)
        # is then under a fifth): a higher bound only winds the integrator up while other
        # load holds the latency above the SLO, and unwinding it costs tens of periods
        cmd = _daemon_cmd(p, out / "model.json", slo, period_s, duration, run_dir, log,
                          outer_every, detune, min(1.0, 5.0 * sleep_range[1]))
        say("starting the daemon: " + " ".join(cmd[1:]))
        sampler = threading.Thread(target=_sample_iterations, args=(p, stop, samples),
                                   daemon=True)
        sampler.start()
        with open(out / "daemon.stderr", "wb") as err:
            daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=err)
        pids.append(daemon.pid)
        with contextlib.suppress(OSError):  # Nice=-5, as the systemd unit runs it (root only)
            os.setpriority(os.PRIO_PROCESS, daemon.pid, -5)
        watch_daemon(daemon, LogProgress(log), period_s, duration, p,
                     (burst[0] * closed_periods, burst[1] * closed_periods), burst_at, say)
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        rc = daemon.wait(30)
        say(f"daemon exited with {rc}")
    finally:
        stop.set()
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(5)
        p.close()
        if run_dir is not None:  # the daemon's socket, state and hook files
            shutil.rmtree(run_dir, ignore_errors=True)
        say("services stopped")
    assert rec is not None  # set before anything that can fail in the run
    rows = _identify_rows(rec.results, slo) + _closed_rows(log, slo, samples, burst_at,
                                                           len(rec.results), rec.results)
    summary = summarize(rows, slo)
    summary.update(slo_ms=slo, slo_choice=why, daemon_exit=rc, model=row["gain"],
                   # the plant's per-period scatter at a fixed sleep, relative to the SLO: a
                   # controller acting on per-period means cannot get its error much below it
                   noise_pct_of_slo=round(100 * float(row["rmse_ms"]) / slo, 2),
                   identify_r2=float(row["r2"]), identify_r2_validation=float(
                       row["r2_validation"]),
                   gain_ms_per_s=float(row["gain"]), offset_ms=float(row["offset"]),
                   period_s=period_s, seed=int(seed),
                   wall_s=round(time.monotonic() - t_start, 1),
                   share_backend=getattr(getattr(p, "share", None), "backend", None) or
                   "cfs_quota_us/cpu.max when writable",
                   backend=p.config.backend, pids=sorted(set(pids)))
    summary.pop("model")
    files = [write_csv(rows, out / "periods.csv", PERIOD_COLUMNS),
             plot_pipeline(rows, slo, out / "pipeline.png"), log, out / "model.json"]
    summary["files"] = [str(final(f)) for f in files]  # where they are once complete
    write_json(summary, out / "summary.json")
    return summary


def _identify_rows(results: list[Any], slo: float) -> list[dict[str, Any]]:
    return [{"period": k + 1, "phase": "identify", "t_s": round((k + 1) * r.period_s, 3),
             "slo_ms": slo, "latency_ms": r.mean_ms, "p99_ms": r.p99_ms, "count": r.count,
             "sleep_s": r.sleep_s, "share_pct": r.mps_pct,
             "training_iterations": r.training_iterations, "burst": 0}
            for k, r in enumerate(results)]


def _closed_rows(log: Path, slo: float, samples: list[tuple[float, int]],
                 burst_at: list[float], k0: int, ident: list[Any]) -> list[dict[str, Any]]:
    import json

    if not log.exists():
        return []
    recs = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    periods = [r for r in recs if "period" in r and "event" not in r]
    t_id = sum(r.period_s for r in ident)
    ts = np.array([s[0] for s in samples]) if samples else np.zeros(0)
    its = np.array([s[1] for s in samples], float) if samples else np.zeros(0)
    started = next((r["ts"] for r in recs if r.get("event") == "started"), None)
    prev = started if started is not None else (periods[0]["ts"] - 1.0 if periods else 0.0)
    rows = []
    for r in periods:
        n = (float(np.interp(r["ts"], ts, its) - np.interp(prev, ts, its))
             if len(ts) else math.nan)
        on = len(burst_at) >= 1 and r["ts"] > burst_at[0] and (
            len(burst_at) < 2 or prev < burst_at[1])
        rows.append({"period": k0 + r["period"], "phase": "closed-loop",
                     "t_s": round(t_id + (r["ts"] - (started or r["ts"])), 3), "slo_ms": slo,
                     "latency_ms": r.get("mean_ms"), "p99_ms": r.get("p99_ms"),
                     "count": r.get("count"), "sleep_s": r.get("sleep_s"),
                     "share_pct": r.get("mps_pct"), "training_iterations": n,
                     "burst": int(on)})
        prev = r["ts"]
    return rows


#: Closed-loop periods a summary leaves out at the start (the loop settling from no sleep).
SETTLING = 5


def summarize(rows: list[dict[str, Any]], slo: float, skip: int = SETTLING) -> dict[str, Any]:
    """Closed-loop figures: median |l - SLO|/SLO, share of periods over 1.05 SLO.

    Parameters
    ----------
    rows : list of dict
        ``periods.csv`` rows.
    slo : float
        The SLO (ms).
    skip : int
        Closed-loop periods left out at the start (the loop settling from no sleep).

    Returns
    -------
    dict
        ``median_abs_err_pct``, ``over_105_pct``, ``closed_periods``, ``mean_latency_ms``,
        ``median_sleep_s``,
        ``training_it_per_period`` (closed loop) and ``identify_it_per_period_unslept``.
    """
    cl = [r for r in rows if r["phase"] == "closed-loop"][skip:]
    lat = np.array([r["latency_ms"] if r["latency_ms"] is not None else np.nan for r in cl],
                   float)
    ok = np.isfinite(lat)
    err = np.abs(lat[ok] - slo) / slo
    it = np.array([r["training_iterations"] for r in cl], float)
    sl = np.array([np.nan if r["sleep_s"] is None else r["sleep_s"] for r in cl], float)
    ident0 = [r["training_iterations"] for r in rows
              if r["phase"] == "identify" and r["sleep_s"] < 0.05]
    return {"closed_periods": int(ok.sum()),
            "median_abs_err_pct": round(100 * float(np.median(err)), 2) if ok.any() else None,
            "over_105_pct": round(100 * float(np.mean(lat[ok] > 1.05 * slo)), 2)
            if ok.any() else None,
            "mean_latency_ms": round(float(np.mean(lat[ok])), 3) if ok.any() else None,
            "median_sleep_s": round(float(np.nanmedian(sl)), 4) if len(sl) else None,
            "training_it_per_period": round(float(np.nanmean(it)), 2) if len(it) else None,
            "training_progressing": bool(len(it) and np.nansum(it) > 0),
            "identify_it_per_period_unslept": round(float(np.mean(ident0)), 2)
            if ident0 else None}


def plot_pipeline(rows: list[dict[str, Any]], slo: float, path: str | Path) -> Path:
    """Latency and SLO, sleep, share and training progress over both phases.

    Parameters
    ----------
    rows : list of dict
        ``periods.csv`` rows.
    slo : float
        The SLO (ms).
    path : str or pathlib.Path
        The PNG.

    Returns
    -------
    pathlib.Path
        The written file.
    """
    import matplotlib.pyplot as plt

    def col(k: str) -> np.ndarray:
        return np.array([np.nan if r[k] is None else r[k] for r in rows], float)

    t = col("t_s")
    fig, ax = plt.subplots(4, 1, figsize=(9, 8.5), sharex=True)
    ax[0].plot(t, col("latency_ms"), ".-", lw=0.8, ms=3, label="mean latency")
    ax[0].plot(t, col("p99_ms"), lw=0.6, alpha=0.5, label="p99 (histogram estimate)")
    ax[0].axhline(slo, color="k", ls="--", lw=1, label=f"SLO {slo:.1f} ms")
    ax[0].axhline(1.05 * slo, color="r", ls=":", lw=0.8, label="1.05 SLO")
    ax[0].set_ylabel("ms per batch (log scale)")
    # log scale, limits from the data: the p99 runs at several times the mean on this
    # plant (and far higher in the unslept periods) and must stay on the figure
    ys = np.concatenate([col("latency_ms"), col("p99_ms"), [slo]])
    ys = ys[np.isfinite(ys) & (ys > 0)]
    ax[0].set_yscale("log")
    ax[0].set_ylim(0.8 * float(ys.min()), 3.0 * float(ys.max()))  # room for the legend
    ax[1].plot(t, col("sleep_s"), ".-", lw=0.8, ms=3)
    ax[1].set_ylabel("sleep (s)")
    ax[2].plot(t, col("share_pct"), ".-", lw=0.8, ms=3)
    ax[2].set_ylabel("training CPU share %")
    ax[3].plot(t, col("training_iterations"), ".-", lw=0.8, ms=3)
    ax[3].set_ylabel("training it / period")
    ax[3].set_xlabel("time (s)")
    phase = [r["phase"] for r in rows]
    if "closed-loop" in phase:
        t_cl = t[phase.index("closed-loop")]
        for a in ax:
            a.axvline(t_cl, color="g", lw=1)
        ax[0].text(t_cl, ax[0].get_ylim()[0] * 1.05, " daemon starts", color="g",
                   va="bottom", fontsize=8)  # at the bottom: the legend takes the top
    b = col("burst")
    if np.nansum(b) > 0:
        on = t[b > 0]
        for a in ax:
            a.axvspan(on.min(), on.max(), color="orange", alpha=0.15)
        ax[0].text(on.min(), ax[0].get_ylim()[0] * 1.05, " load burst", color="darkorange",
                   fontsize=8, va="bottom")
    ax[0].legend(fontsize=7, loc="upper right", ncol=4, framealpha=0.7)
    ax[0].set_title("CPU plant: identification (excited sleep), then the daemon "
                    "(Prometheus latency, SIGSTOP/SIGCONT, cgroup CPU share)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)


