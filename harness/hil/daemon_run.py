"""The real node agent on the GPU, as its own process, through an inference burst:
``python -m harness.hil.daemon_run``.

Where ``gpucontrol burst --plant gpu`` runs the controllers inside the harness, this runs what a
node runs: ``python -m gpucontrol.daemon`` launching the training itself (``--training-cmd``,
the CuPy emulator or the PyTorch ResNet-18), the ResNet-50 inference reporting each batch's
latency to the daemon's socket, and a private MPS control daemon. One run per mode, same SLO,
same load (batch 105, 115 during the burst), same model:

* ``sleep`` -- the sleep only (``--outer none``: the default inner loop, the share held at
  100 %). The inference is no MPS client; the training the daemon launches is a client of the
  daemon's private MPS server (its default share backend), so the two run in separate
  contexts, time-sliced (on the H200 the training then kept its solo iteration time,
  docs/gpu.md);
* ``sleep-plain`` (run only when named) -- the sleep only with the training outside MPS too
  (``--share-backend none``): the two processes time-sliced as plain CUDA contexts, what
  ``sleep`` is measured against;
* ``mps-restart`` -- both processes MPS clients, the share an MPS restart with shadow
  pre-start (``--share-backend mps``), the outer loop every ``--outer-every`` periods (12);
* ``green-mps`` -- both processes MPS clients, the share a green-context partition
  (``--share-backend green-context``, partitions 25/50/75/100 %), no restart, so the outer loop
  may move every period (``--outer-every 1``).

Written to ``<out>/``: per mode ``runs/<mode>/`` (the daemon's JSON log, the processes' CSV
logs), ``periods.csv`` (one row per period and mode: latency, sleep, share, training
iterations), ``summary.csv`` / ``summary.md`` (per mode: mean latency, % of periods over 1.05
SLO, training it/s and its ratio to ``sleep``), ``meta.json`` and ``daemon_run.png``.
``--dry-run`` prints the plan and the expected time without a GPU. Runs made one mode at a
time (another SLO, another model) compare side by side without a GPU: ``--from LABEL=RUNDIR``
(repeatable, each a ``runs/<mode>`` folder) re-reads their logs into one ``periods.csv``,
summary and figure, and runs nothing.

The daemon's model (``--model``, default ``auto``): the latency slope of the sleep per share
level on the simulated preset (``--preset``, the H100-calibrated ``h100``), written to
``model.json`` -- or an identified ``model.json`` (``gpucontrol identify --plant gpu-green``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from harness.hil._accounting import TrainingAccount
from harness.hil._lazy import gpu_entry_point, require_gpu
from harness.hil._tail import CSVTail
from harness.results import atomic_write_text, markdown_table, save_figure, write_csv, write_int

__all__ = ["MODES", "main", "model_from_preset", "plan", "summarize"]

MODES = ("sleep", "mps-restart", "green-mps")
#: Modes run only when named: ``sleep-plain``, sleep only with the training outside MPS too.
EXTRA_MODES = ("sleep-plain",)
OUTER_EVERY = {"sleep": 0, "sleep-plain": 0, "mps-restart": 12, "green-mps": 1}
GREEN_SHARES = "25,50,75,100"
#: Seconds a run needs before its first period (MPS daemon, emulator sizing, ResNet-50
#: warm-up) and after its last (stopping): from the H100 run's logs, rounded up.
START_S, STOP_S = 40.0, 10.0
PERIOD_COLUMNS = ("mode", "period", "t_s", "latency_ms", "count", "sleep_s", "share_pct",
                  "training_iterations", "burst")


def plan(modes: list[str], duration_s: float, period_s: float) -> dict[str, Any]:
    """The runs and their expected wall time (s).

    Parameters
    ----------
    modes : list of str
        Any of :data:`MODES`.
    duration_s, period_s : float
        Closed-loop time per run and the control period.

    Returns
    -------
    dict
        ``runs`` and ``expected_s``.
    """
    bad = [m for m in modes if m not in MODES + EXTRA_MODES]
    if bad or not modes:
        raise ValueError(f"modes must be among {', '.join(MODES + EXTRA_MODES)}, got "
                         f"{', '.join(modes)}")
    if not (period_s > 0 and duration_s >= 5 * period_s):
        raise ValueError(f"need period_s > 0 and duration_s >= 5 periods, got {duration_s!r}, "
                         f"{period_s!r}")
    runs = [{"mode": m, "outer_every": OUTER_EVERY[m],
             "expected_s": START_S + duration_s + STOP_S} for m in modes]
    return {"runs": runs, "expected_s": sum(r["expected_s"] for r in runs)}


#: The simulated plant's backend matching each mode (its model's physics).
SIM_BACKEND = {"sleep": "sleep", "sleep-plain": "sleep", "mps-restart": "mps-restart",
               "green-mps": "green-context+mps"}


def model_from_preset(preset: str, shares: list[float], sleep_span: tuple[float, float],
                      backend: str | None = None) -> dict[str, Any]:
    """A ``model.json`` from a simulated preset: per share level the secant latency slope of
    the sleep over ``sleep_span`` (ms per s), the latency at the span's start and the
    training's iteration time (both curves, as ``gpucontrol identify`` writes them: without
    the times the controller reads the lines at an assumed one until the node reports them).

    Parameters
    ----------
    preset : str
        A simulated preset (``h100``) or a calibration file.
    shares : list of float
        Share levels, %.
    sleep_span : (float, float)
        The sleep range the slope is taken over, s.
    backend : str, optional
        The simulated plant's spatial-share backend (``"sleep"``, ``"mps-restart"``,
        ``"green-context+mps"``; default: the preset's).

    Returns
    -------
    dict
        The model document the daemon's ``--model`` reads.
    """
    from harness.sim.simulated import SimulatedColocation

    ref = SimulatedColocation.preset(preset, backend=backend) if backend else \
        SimulatedColocation.preset(preset)
    a, b = sleep_span
    points = []
    for m in shares:
        la, lb = (float(ref.expected_latency_ms(s, float(m))) for s in (a, b))
        points.append({"mps_pct": float(m), "gain": (lb - la) / (b - a),
                       "offset": la - (lb - la) / (b - a) * a,
                       "iteration_s": float(ref.expected_iteration_s(float(m)))})
    return {"points": points, "sleep_span_s": [float(a), float(b)],
            "source": f"simulated preset {preset}" + (f", backend {backend}" if backend else "")}


class _Run:
    """One mode: MPS, inference, the daemon (which launches the training), the burst."""

    def __init__(self, mode: str, args: argparse.Namespace, model: Path, work: Path) -> None:
        self.mode, self.args, self.model, self.work = mode, args, model, work
        self.procs: list[subprocess.Popen[bytes]] = []

    def _training_cmd(self) -> str:
        a, w = self.args, self.work
        if a.training == "torch":
            argv = [sys.executable, "-m", "harness.hil.torch_training"]
        else:
            argv = [sys.executable, "-m", "harness.hil.training_emulator",
                    "--backend", "cupy-green" if self.mode == "green-mps" else "cupy"]
            if a.training_backend:
                argv[-1] = a.training_backend
        argv += ["--target-iter-s", "0.2", "--calibration-file", str(w / "calibration.json"),
                 "--log", str(w / "training-{pid}.csv"), *shlex.split(a.training_extra or "")]
        if self.mode == "green-mps":
            argv += ["--green-shares", GREEN_SHARES, "--spatial-log", str(w / "spatial-{pid}.csv")]
        return shlex.join(argv)

    def daemon_argv(self, pipe: str | None) -> list[str]:
        """The daemon's command line for this mode (the one place it is built)."""
        a, w = self.args, self.work
        argv = [sys.executable, "-m", "gpucontrol.daemon", "--slo-ms", f"{a.slo_ms:g}",
                "--model", str(self.model), "--period-s", f"{a.period:g}",
                "--duration-s", f"{a.duration + 0.5 * a.period:g}",
                "--training-cmd", self._training_cmd(), "--sleep-method", "hook",
                "--socket", str(w / "g.sock"), "--state", str(w / "g.state.json"),
                "--hook", str(w / "g.hook"), "--log", str(w / "daemon.jsonl")]
        if self.mode == "sleep":
            return [*argv, "--outer", "none"]
        if self.mode == "sleep-plain":
            return [*argv, "--share-backend", "none"]
        argv += ["--outer-every", str(a.outer_every.get(self.mode, OUTER_EVERY[self.mode]))]
        if self.mode == "mps-restart":
            return [*argv, "--share-backend", "mps", "--shadow", "--mps-pipe-dir", str(pipe)]
        return [*argv, "--share-backend", "green-context", "--green-shares", GREEN_SHARES]

    def start_inference(self, env: dict[str, str]) -> None:
        a, w = self.args, self.work
        write_int(w / "batch", a.batch[0])
        argv = [*a.inference_argv, "--batch-size", str(a.batch[0]), "--batch-file",
                str(w / "batch"), "--log", str(w / "inference-{pid}.csv"), "--ready-file",
                str(w / "inference.ready"), "--report", "--socket", str(w / "g.sock")]
        with open(w / "inference.out", "ab") as out:
            self.procs.append(subprocess.Popen(argv, env=env, cwd=w, stdout=out,
                                               stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL,
                                               start_new_session=True))
        deadline = time.monotonic() + 600
        while not (w / "inference.ready").exists():
            if self.procs[-1].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the inference did not start; see {w / 'inference.out'}")
            time.sleep(0.05)

    def run(self) -> None:
        from harness.hil.mps_session import client_env, mps_session

        a, w = self.args, self.work
        w.mkdir(parents=True, exist_ok=True)
        base = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
        with mps_session(not self.mode.startswith("sleep") and not a.no_mps) as mps, \
                contextlib.ExitStack() as stack:
            stack.callback(self.stop)
            env = client_env(mps, None, base)  # MPS clients (the daemon's training inherits)
            self.start_inference(env)
            pipe = env.get("CUDA_MPS_PIPE_DIRECTORY")
            with open(w / "daemon.stderr", "ab") as err:
                daemon = subprocess.Popen(self.daemon_argv(pipe), env=env, cwd=w,
                                          stdout=subprocess.DEVNULL, stderr=err,
                                          stdin=subprocess.DEVNULL)
            self.procs.append(daemon)
            self._drive(daemon)

    def _first_period_ts(self) -> float | None:
        log = self.work / "daemon.jsonl"
        with contextlib.suppress(OSError):
            for line in log.read_text().splitlines():
                if line.startswith("{") and '"period"' in line and '"event"' not in line:
                    return float(json.loads(line)["ts"]) - self.args.period
        return None

    def _drive(self, daemon: subprocess.Popen[bytes]) -> None:
        """The load burst, timed from the daemon's first period (the closed loop's start)."""
        a, w = self.args, self.work
        deadline = time.time() + a.duration + START_S + 120
        t0: float | None = None
        on = False
        while daemon.poll() is None and time.time() < deadline:
            t0 = t0 if t0 is not None else self._first_period_ts()
            burst = t0 is not None and a.burst[0] <= time.time() - t0 < a.burst[1]
            if burst != on:
                on = burst
                write_int(w / "batch", a.batch[1] if on else a.batch[0])
                with open(w / "burst.jsonl", "a") as f:
                    f.write(json.dumps({"t_unix": time.time(), "on": on}) + "\n")
            time.sleep(0.1)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _records(path: Path, starts: tuple[str, ...], need: tuple[str, ...] = ()
             ) -> list[dict[str, Any]]:
    """The JSON objects of the lines of ``path`` that start with one of ``starts`` (none when
    the file is missing); a line that is not one (a log cut off mid-line, a corrupt file)
    raises ValueError naming the file and the line, as does an object without ``need``."""
    if not path.exists():
        return []
    out = []
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip() or not line.startswith(starts):
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}: line {i} is not a JSON record ({exc}): a partial or "
                             f"corrupt log") from None
        if not isinstance(rec, dict) or any(k not in rec for k in need):
            raise ValueError(f"{path}: line {i} is not a record with "
                             f"{', '.join(need) or 'fields'}: a corrupt log")
        out.append(rec)
    return out


def read_periods(mode: str, work: Path, period_s: float) -> list[dict[str, Any]]:
    """One row per daemon period: its latency, the sleep and share applied during it, the
    training's iterations. A daemon record's ``sleep_s`` and ``mps_pct`` are what it commands
    for the next period: the row takes the previous record's (the first row: the sleep
    unknown, NaN, and the share the training started at)."""
    rows: list[dict[str, Any]] = []
    lines = _records(work / "daemon.jsonl", ("{",))
    bursts = _records(work / "burst.jsonl", ("",), need=("t_unix", "on"))
    acc = TrainingAccount()
    tail = CSVTail(work / "training-*.csv")
    acc.add(tail.read())
    for f in tail.incomplete():  # the run is over: that line stays cut
        warnings.warn(f"{f}: the last line has no newline (the training stopped mid-write); "
                      "that iteration is not counted", RuntimeWarning, stacklevel=2)
    periods = [r for r in lines if "period" in r and "event" not in r]
    for r in periods:
        if not all(isinstance(r.get(k), (int, float)) for k in ("ts", "period")):
            raise ValueError(f"{work / 'daemon.jsonl'}: a period record without a numeric "
                             f"'ts' and 'period' ({r!r:.120}): a corrupt log")
    t_first = periods[0]["ts"] - period_s if periods else 0.0
    start = next((r.get("mps_pct") for r in lines if r.get("event") == "training_started"), None)
    applied = [(math.nan, start)] + [(r.get("sleep_s"), r.get("mps_pct")) for r in periods]
    for r, (sleep, share) in zip(periods, applied):
        t1 = float(r["ts"])
        work_ = acc.period(t1 - period_s, t1, estimate=False)
        on = [b["on"] for b in bursts if b["t_unix"] <= t1 - period_s / 2]
        rows.append({"mode": mode, "period": r["period"], "t_s": t1 - t_first,
                     "latency_ms": r.get("mean_ms", math.nan), "count": r.get("count", 0),
                     "sleep_s": sleep, "share_pct": share,
                     "training_iterations": work_.iterations, "burst": bool(on and on[-1])})
    return rows


def summarize(rows: list[dict[str, Any]], slo_ms: float, period_s: float,
              warmup: int = 3) -> list[dict[str, Any]]:
    """Per mode: mean latency, % of periods over 1.05 SLO, training it/s, ratio to sleep.

    Parameters
    ----------
    rows : list of dict
        :func:`read_periods` rows of every mode.
    slo_ms, period_s : float
        The SLO and the period.
    warmup : int
        Periods left out at the start of each run.

    Returns
    -------
    list of dict
        One row per mode.
    """
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        rs = [r for r in rows if r["mode"] == mode][warmup:]
        lat = [float(r["latency_ms"]) for r in rs if isinstance(r["latency_ms"], (int, float))
               and math.isfinite(r["latency_ms"])]
        it = sum(float(r["training_iterations"]) for r in rs)
        out.append({"mode": mode, "periods": len(rs),
                    "latency_ms": sum(lat) / len(lat) if lat else math.nan,
                    "over_105_pct": 100 * sum(x > 1.05 * slo_ms for x in lat) / len(lat)
                    if lat else math.nan,
                    "training_it_s": it / (len(rs) * period_s) if rs else math.nan})
    base = next((r["training_it_s"] for r in out if r["mode"] == "sleep"), math.nan)
    for r in out:
        r["training_vs_sleep"] = r["training_it_s"] / base if base and base > 0 else math.nan
    return out


def _plot(rows: list[dict[str, Any]], slo_ms: float, path: Path) -> None:
    """Per mode, each period's latency, the sleep and share applied during it, and the
    training's iterations (the burst shaded)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10.5, 9), sharex=True)
    cols = ("latency_ms", "sleep_s", "share_pct", "training_iterations")
    labels = ("inference latency (ms)", "training sleep (s)", "training share (%)",
              "training iterations\nper period")
    for mode in dict.fromkeys(r["mode"] for r in rows):
        rs = [r for r in rows if r["mode"] == mode]
        for ax, col in zip(axes, cols):
            ax.plot([r["t_s"] for r in rs], [r[col] for r in rs], ".-", label=mode)
    burst = [r["t_s"] for r in rows if r["burst"]]    # (t_s: each period's end)
    step = min((b["t_s"] - a["t_s"] for a, b in itertools.pairwise(rows)
                if b["t_s"] > a["t_s"]), default=0.0)
    for ax, label in zip(axes, labels):
        ax.set(ylabel=label)
        if burst:
            ax.axvspan(min(burst) - step, max(burst), color="0.9", zorder=0)
    axes[0].axhline(slo_ms, color="k", ls=":", label="SLO")
    axes[0].axhline(1.05 * slo_ms, color="grey", ls=":", lw=0.8, label="1.05 x SLO (over)")
    axes[-1].set(xlabel="time (s)")
    # beside the panels, off the lines (inside, it covered the latency of the later periods)
    axes[0].legend(fontsize=8, title="burst shaded", title_fontsize=8, loc="upper left",
                   bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def _outer_every(text: str) -> dict[str, int]:
    """argparse type of ``--outer-every``: ``MODE=N,...``, each mode one with a share knob and
    N a whole number of periods >= 1."""
    knobbed = [m for m in MODES + EXTRA_MODES if OUTER_EVERY[m]]
    out: dict[str, int] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        mode, sep, n = item.partition("=")
        if not sep or mode.strip() not in knobbed or not n.strip().isdigit() \
                or int(n) < 1:
            raise argparse.ArgumentTypeError(
                f"expected MODE=N,... with MODE among {', '.join(knobbed)} and N a whole "
                f"number of periods >= 1, got {item!r}")
        out[mode.strip()] = int(n)
    return out


def _model_arg(text: str) -> str:
    """argparse type of ``--model``: ``auto`` or a readable model file the daemon takes."""
    if text == "auto":
        return text
    from gpucontrol.node.model_file import load_model

    try:
        load_model(text)
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a model file the daemon takes "
                                         f"({exc})") from None
    return text


def _preset_arg(text: str) -> str:
    """argparse type of ``--preset``: a named preset or a calibration file whose values make
    a plant (a calibration with a value out of range was taken, and each mode then failed
    after its start-up)."""
    from harness.sim.physics import ColocationParams
    from harness.sim.presets import preset_overrides

    try:
        overrides = preset_overrides(text)
    except ValueError as exc:       # (it names the presets and the file it could not read)
        raise argparse.ArgumentTypeError(str(exc)) from None
    try:
        ColocationParams(**overrides)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"preset {text!r}: {exc}") from None
    return text


def _parser() -> argparse.ArgumentParser:
    from harness.args import OneLineParser, name_list, number, out_dir, pair
    from harness.hil.campaign import H100_PRESET, H100_SLO_MS

    ap = OneLineParser(prog="python -m harness.hil.daemon_run",
                       description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=out_dir, default="results/daemon_burst")
    ap.add_argument("--modes", type=name_list(MODES + EXTRA_MODES), default=",".join(MODES),
                    help=f"any of {', '.join(MODES + EXTRA_MODES)}")
    ap.add_argument("--slo-ms", type=number(0, 10000, lo_open=True, unit="ms"),
                    default=H100_SLO_MS, help="SLO, ms in (0, 10000]")
    ap.add_argument("--preset", type=_preset_arg, default=H100_PRESET,
                    help="simulated preset of --model auto (h100 where it exists)")
    ap.add_argument("--model", type=_model_arg, default="auto",
                    help="model.json, or auto (from --preset)")
    ap.add_argument("--duration", type=number(0, 86400, lo_open=True, unit="s"), default=100.0,
                    help="closed loop per run, s (at least 5 periods)")
    ap.add_argument("--period", type=number(0, 3600, lo_open=True, unit="s"), default=4.0,
                    help="control period, s in (0, 3600]")
    ap.add_argument("--burst", type=pair(float, 0, None, increasing=True), default="30,70",
                    help="burst start,end, s into the run (0 <= start < end)")
    ap.add_argument("--batch", type=pair(int, 1, 4096), default="105,115",
                    help="normal,burst batch, each in [1, 4096]")
    ap.add_argument("--outer-every", type=_outer_every, default="",
                    help="per mode, e.g. green-mps=12")
    ap.add_argument("--training", choices=("emulator", "torch"), default="emulator")
    ap.add_argument("--training-backend", default=None, help=argparse.SUPPRESS)  # tests
    ap.add_argument("--training-extra", default="", help=argparse.SUPPRESS)  # tests
    ap.add_argument("--inference-cmd", default=None, help=argparse.SUPPRESS)  # tests
    ap.add_argument("--no-mps", action="store_true", help=argparse.SUPPRESS)  # tests
    ap.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    ap.add_argument("--from", dest="runs_from", action="append", default=[],
                    metavar="LABEL=RUNDIR",
                    help="compare runs made before (a runs/<mode> folder each, repeatable): "
                         "read their logs into one table and figure, run nothing")
    return ap


def _gpu_needs(args: argparse.Namespace) -> tuple[str, ...]:
    """The GPU packages the run's own processes need (none where the tests' stand-ins run)."""
    need = [] if args.inference_cmd else ["torch"]
    if args.training == "torch":
        need.append("torch")
    elif not (args.training_backend or "cupy").startswith("numpy"):
        need.append("cupy")
    return tuple(dict.fromkeys(need))


def _check_fresh(out: Path, modes: list[str]) -> None:
    """Refuse an ``--out`` that already holds a run of one of ``modes``: the daemon and the
    burst append to their logs, so a second run would be read as one with the first."""
    used = [m for m in modes if (out / "runs" / m / "daemon.jsonl").exists()]
    if used:
        raise ValueError(f"--out {str(out)!r} already holds a run of {', '.join(used)} "
                         f"(runs/<mode>/daemon.jsonl); give a new --out, or remove it")


@gpu_entry_point("python -m harness.hil.daemon_run")
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.runs_from:
        return compare(args.runs_from, Path(args.out), args.slo_ms, args.period, argv)
    out = Path(args.out)
    try:
        modes = list(args.modes)
        steps = plan(modes, args.duration, args.period)
        if not args.dry_run:
            _check_fresh(out, modes)
    except ValueError as exc:
        print(f"daemon_run: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(json.dumps({**steps, "slo_ms": args.slo_ms}, indent=2))
        return 0
    # before any folder or process: the GPU packages and a device
    require_gpu(*_gpu_needs(args), what="the daemon run")
    args.inference_argv = shlex.split(args.inference_cmd) if args.inference_cmd else \
        [sys.executable, "-m", "harness.hil.inference"]
    from harness.args import Terminated, terminate_cleanly

    try:
        with terminate_cleanly():  # SIGTERM: each run stops its processes and quits MPS
            return _run_modes(args, modes, steps, out, argv)
    except Terminated as exc:
        print(f"daemon_run: stopped by {exc.signame}", file=sys.stderr)
        return exc.exit_status


def _run_modes(args: argparse.Namespace, modes: list[str], steps: dict[str, Any], out: Path,
               argv: list[str] | None) -> int:
    """Run each mode in turn, keep the others' results when one fails, write the report."""
    out.mkdir(parents=True, exist_ok=True)
    models: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    errors = []
    for m in modes:
        print(f"[daemon_run] {m}: ~{START_S + args.duration:.0f} s", file=sys.stderr, flush=True)
        work = out / "runs" / m
        work.mkdir(parents=True, exist_ok=True)
        model = work / "model.json"
        try:
            if args.model == "auto":  # the mode's own physics on the simulated preset
                models[m] = model_from_preset(args.preset, [25, 50, 75, 100], (0.0, 0.4),
                                              SIM_BACKEND[m])
                atomic_write_text(model, json.dumps(models[m], indent=2))
            else:
                model.write_text(Path(args.model).read_text())
                models[m] = json.loads(model.read_text())
            _Run(m, args, model, work).run()
        except Exception as exc:  # keep the other modes' results
            errors.append(f"{m}: {type(exc).__name__}: {exc}")
        try:
            rows += read_periods(m, work, args.period)
        except (OSError, ValueError) as exc:  # a log cut off: said, the other modes kept
            errors.append(f"{m}: reading its logs: {exc}")
        write_csv(rows, out / "periods.csv")
    text = _report(rows, out, f"SLO {args.slo_ms:g} ms, batch {args.batch[0]} -> "
                   f"{args.batch[1]}", args.slo_ms, args.period, errors)
    atomic_write_text(out / "meta.json", json.dumps(
        {"command": _command(argv), "plan": steps, "slo_ms": args.slo_ms, "models": models,
         "errors": errors}, indent=2))
    print(text)
    return 1 if errors else 0


def _command(argv: list[str] | None) -> str:
    return shlex.join([sys.executable, "-m", "harness.hil.daemon_run",
                       *(argv if argv is not None else sys.argv[1:])])


def _report(rows: list[dict[str, Any]], out: Path, title: str, slo_ms: float, period_s: float,
            errors: list[str]) -> str:
    """Write ``summary.csv``, ``summary.md`` and ``daemon_run.png``; return the summary."""
    summary = summarize(rows, slo_ms, period_s)
    write_csv(summary, out / "summary.csv")
    text = (f"# Daemon burst ({title})\n\n"
            + markdown_table(summary, list(summary[0]) if summary else ["mode"], digits=3)
            + "\n" + "".join(f"- failed: {e}\n" for e in errors))
    atomic_write_text(out / "summary.md", text)
    with contextlib.suppress(Exception):
        _plot(rows, slo_ms, out / "daemon_run.png")
    return text


def compare(specs: list[str], out: Path, slo_ms: float, period_s: float,
            argv: list[str] | None = None) -> int:
    """Runs made one mode at a time, side by side: each ``LABEL=RUNDIR`` names a ``runs/<mode>``
    folder a run left behind; its periods are re-read (:func:`read_periods`) under the label,
    and ``periods.csv``, the summary and the figure are written to ``out`` as a run writes
    them (the ratio column against the run labelled ``sleep``, if any). Nothing is run."""
    rows: list[dict[str, Any]] = []
    for spec in specs:
        label, sep, folder = spec.partition("=")
        work = Path(folder)
        if not (sep and label.strip() and (work / "daemon.jsonl").is_file()):
            print(f"daemon_run: error: --from takes LABEL=RUNDIR, RUNDIR a run's runs/<mode> "
                  f"folder holding daemon.jsonl, got {spec!r}", file=sys.stderr)
            return 2
        try:
            rows += read_periods(label.strip(), work, period_s)
        except (OSError, ValueError) as exc:
            print(f"daemon_run: error: --from {spec!r}: {exc}", file=sys.stderr)
            return 2
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "periods.csv")
    text = _report(rows, out, f"SLO {slo_ms:g} ms, runs compared", slo_ms, period_s, [])
    atomic_write_text(out / "COMMAND.txt", _command(argv) + "\n")  # as a run's meta.json
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
