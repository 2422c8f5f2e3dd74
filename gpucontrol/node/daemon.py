"""The per-GPU control daemon: monitor -> TwoTierController -> actuators, crash-safe.

Run it as ``python -m gpucontrol.daemon ...`` (no harness needed on a node) or as
``gpucontrol daemon ...``. Every control period it collects the inference latency reported
over its Unix socket (:func:`gpucontrol.node.client.report_latency`), asks the
:class:`gpucontrol.TwoTierController` for the next sleep and MPS percentage, applies them to
the training (signals, cgroup freezer or the cooperative hook; MPS by restart), and writes one
JSON line. ``--fixed-sleep``/``--fixed-mps`` run it open loop.

Crash safety (see :mod:`gpucontrol.node.guardian`): leftovers of a previous run are resumed first;
a guardian process is running before anything is paused; the state file lists every target
before it is paused; SIGTERM/SIGINT resume everything and exit cleanly.

Examples
--------
::

    python -m gpucontrol.daemon --slo-ms 90 --model model.json --training-pid 4242
    python -m gpucontrol.daemon --slo-ms 90 --model model.json --training-cmd "python train.py"
    python -m gpucontrol.daemon --fixed-sleep 0.2 --training-pid 4242      # open loop
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import select
import shlex
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO

from gpucontrol.models import LatencyModelFamily, LinearLatencyModel
from gpucontrol.node._runtime import default_path, ensure_private_dir, unlink_quietly
from gpucontrol.node.actuators.mps import MPSActuator, MPSControl, MPSError
from gpucontrol.node.actuators.procs import ProcessHandle, check_target
from gpucontrol.node.actuators.sleep import CgroupFreezer, DutyCycler, choose_sleep_actuator
from gpucontrol.node.guardian import (
    Guardian,
    read_state,
    resume_targets,
    state_owner_alive,
    write_state,
)
from gpucontrol.node.hooks import HookWriter
from gpucontrol.node.monitor import LatencyMonitor, PeriodStats
from gpucontrol.two_tier import Actuation, TwoTierController

__all__ = ["Daemon", "build_parser", "load_model", "main"]


def load_model(path: str | os.PathLike[str]) -> LinearLatencyModel | LatencyModelFamily:
    """A model file: ``{"gain": g, "offset": n}`` (one linear model) or a list of
    ``{"mps_pct", "gain", "offset"[, "batch"]}`` rows (a family, gain-scheduled by MPS)."""
    try:
        text = Path(path).read_text()
        doc = json.loads(text)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read model {path}: {exc}") from None
    if isinstance(doc, dict) and "points" in doc:
        doc = doc["points"]
    if isinstance(doc, list):
        try:
            return LatencyModelFamily.from_json(json.dumps(doc))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"model {path}: bad family row ({exc})") from None
    if isinstance(doc, dict):
        return LinearLatencyModel.from_dict(doc)
    raise ValueError(f"model {path} must be a JSON object or list")


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class _Metrics:
    """Prometheus text exposition on 127.0.0.1 only."""

    def __init__(self, port: int) -> None:
        self.values: dict[str, float] = {}
        self.lock = threading.Lock()
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = metrics.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,),
                         name="gpucontrol-metrics", daemon=True).start()

    def set(self, **kv: float) -> None:
        with self.lock:
            self.values.update(kv)

    def render(self) -> str:
        with self.lock:
            items = sorted(self.values.items())
        lines = []
        for k, v in items:
            kind = "counter" if k.endswith("_total") else "gauge"
            lines.append(f"# TYPE gpucontrol_{k} {kind}")
            val = "NaN" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:g}"
            lines.append(f"gpucontrol_{k} {val}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Daemon:
    """One GPU's daemon; configured from parsed arguments (see :func:`build_parser`)."""

    def __init__(self, args: argparse.Namespace, log: TextIO | None = None) -> None:
        self.a = args
        self.log_file = log or sys.stdout
        # stopping: a flag and a self-pipe, no lock (a signal handler must never take a lock
        # the interrupted main thread may hold, as Event.set would)
        self._stopping = False
        self._stop_r, self._stop_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._state_lock = threading.Lock()
        self.guardian: Guardian | None = None
        self.monitor: LatencyMonitor | None = None
        self.hook: HookWriter | None = None
        self.cycler: DutyCycler | None = None
        self.mps_ctl: MPSControl | None = None
        self.trainer: MPSActuator | None = None
        self.controller: TwoTierController | None = None
        self.metrics: _Metrics | None = None
        self.roots: list[ProcessHandle] = []
        self._restart_thread: threading.Thread | None = None
        self._restarted = False
        self._made_cgroup: str | None = None
        self._actuator_error = ""
        self.periods = 0
        self._validate()

    # ------------------------------------------------------------------ configuration
    def _validate(self) -> None:
        a = self.a
        if bool(a.training_pid) == bool(a.training_cmd):
            raise ValueError("give either --training-pid (repeatable) or --training-cmd")
        if a.fixed_sleep is None and (a.slo_ms is None or a.model is None):
            raise ValueError("closed-loop operation needs --slo-ms and --model "
                             "(or run open loop with --fixed-sleep)")
        if a.slo_ms is not None and not a.slo_ms > 0:
            raise ValueError(f"--slo-ms must be > 0, got {a.slo_ms}")
        if not a.period_s > 0:
            raise ValueError(f"--period-s must be > 0, got {a.period_s}")
        if a.fixed_sleep is not None and not 0 <= a.fixed_sleep <= a.max_sleep_s:
            raise ValueError(f"--fixed-sleep must be in [0, {a.max_sleep_s:g}]")
        if a.fixed_mps is not None and not a.training_cmd:
            raise ValueError("--fixed-mps needs --training-cmd (MPS applies at process start)")
        if a.fixed_mps is not None and not 1 <= a.fixed_mps <= 100:
            raise ValueError("--fixed-mps must be in [1, 100]")
        if a.allow_other_users and os.geteuid() != 0:
            raise ValueError("--allow-other-users is for root only")
        for pid in a.training_pid or ():
            check_target(pid, allow_other_users=a.allow_other_users)
        if a.metrics_port is not None and not 0 <= a.metrics_port <= 65535:
            raise ValueError("--metrics-port must be in [0, 65535]")

    # ------------------------------------------------------------------ output
    def emit(self, **rec: Any) -> None:
        rec = {"ts": round(time.time(), 3), **{k: _clean(v) for k, v in rec.items()}}
        try:
            self.log_file.write(json.dumps(rec) + "\n")
            self.log_file.flush()
        except (OSError, ValueError):
            pass

    def say(self, msg: str) -> None:
        print(f"gpucontrol-daemon: {msg}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ state
    def write_state(self, targets: list[dict] | None = None) -> None:
        with self._state_lock:
            if targets is None:
                targets = self.cycler.identities() if self.cycler is not None else []
            write_state(self.a.state, targets, hook=self.a.hook,
                        extra={"socket": self.a.socket})

    def _resume_leftovers(self) -> None:
        doc = read_state(self.a.state)  # ValueError for a file that is not ours
        if doc is None:
            return
        if state_owner_alive(doc):
            raise ValueError(f"another daemon (pid {doc['daemon_pid']}) uses {self.a.state}")
        out = resume_targets(doc["targets"], doc.get("hook"))
        self.emit(event="leftovers_resumed", previous_pid=doc.get("daemon_pid"), **out)
        unlink_quietly(self.a.state)

    # ------------------------------------------------------------------ setup
    def _make_controller(self, mps_ok: bool) -> TwoTierController | None:
        a = self.a
        if a.fixed_sleep is not None:
            return None
        return TwoTierController(
            load_model(a.model), a.slo_ms, inner_period_s=a.period_s, outer_every=a.outer_every,
            sleep_bounds_s=(0.0, a.max_sleep_s), mode=a.mode,
            outer=a.outer if mps_ok and a.fixed_mps is None else "none",
            initial_mps_pct=a.fixed_mps if a.fixed_mps is not None else a.initial_mps)

    def setup(self) -> None:
        a = self.a
        # the controller first: a bad model or setting fails before anything is touched
        mps_possible = bool(a.training_cmd) and MPSControl(a.mps_binary).available()
        self.controller = self._make_controller(mps_possible)
        for p in (a.socket, a.state, a.hook):
            ensure_private_dir(Path(p).parent)
        self._resume_leftovers()
        self.guardian = Guardian(a.state).start()
        self.monitor = LatencyMonitor(a.socket).start()
        self.hook = HookWriter(a.hook, stale_after_s=max(3 * a.period_s, 2.0),
                               max_sleep_s=min(a.max_sleep_s, 60.0))
        if a.sleep_method == "hook":  # before the training starts: its first iteration reads it
            self.hook.set_sleep(a.fixed_sleep if self.controller is None
                                else self.controller.initial_actuation().sleep_s)
        self.write_state([])

        if a.cgroup and not os.path.isdir(a.cgroup):  # a group of our own for the training
            os.mkdir(a.cgroup)
            self._made_cgroup = a.cgroup
        mps_ok = False
        initial_mps = a.fixed_mps if a.fixed_mps is not None else a.initial_mps
        if a.training_cmd:
            self.mps_ctl = MPSControl(a.mps_binary, pipe_dir=a.mps_pipe_dir)
            if not self.mps_ctl.available():
                self.say(f"{a.mps_binary} not found: MPS unavailable, running sleep-only")
                self.emit(event="mps_unavailable")
                self.mps_ctl = None
            else:
                try:
                    if a.mps_pipe_dir is None:
                        self.mps_ctl.start()
                    elif not self.mps_ctl.health():
                        raise MPSError(f"no MPS control daemon answers in {a.mps_pipe_dir}")
                    mps_ok = True
                    self.emit(event="mps_ready", pipe_dir=self.mps_ctl.pipe_dir)
                except MPSError as exc:
                    self.say(f"MPS unavailable ({exc}); running sleep-only")
                    self.emit(event="mps_unavailable", error=str(exc))
                    self.mps_ctl = None
            env = {"GPUCONTROL_HOOK_FILE": a.hook, "GPUCONTROL_SOCKET": a.socket}
            self.trainer = MPSActuator(
                shlex.split(a.training_cmd), env=env, mps=self.mps_ctl, shadow=a.shadow,
                ready=a.ready, ready_timeout_s=a.ready_timeout_s,
                on_spawn=self._on_spawn, before_terminate=self._before_terminate)
            pids = [self.trainer.start(initial_mps)]
            self.emit(event="training_started", pid=pids[0], mps_pct=initial_mps)
        else:
            pids = list(a.training_pid)
        self.roots = [ProcessHandle.open(p, allow_other_users=a.allow_other_users)
                      for p in pids]

        quantum = 0.2 if a.run_quantum_s == "auto" else float(a.run_quantum_s)
        if a.sleep_method != "hook":
            self.cycler = choose_sleep_actuator(
                pids=pids, cgroup=a.cgroup, method=a.sleep_method,
                allow_other_users=a.allow_other_users, run_quantum_s=quantum,
                max_sleep_s=a.max_sleep_s, gate=self.guardian.alive,
                on_targets_changed=self.write_state)
            self.write_state()  # write-ahead: listed before the first pause
            self.cycler.start()
        self.emit(event="started", pid=os.getpid(), socket=a.socket, state=a.state,
                  hook=a.hook, method=self._method(), training=pids, mps=mps_ok)

        if self.controller is not None:
            if mps_ok != mps_possible:
                self.controller = self._make_controller(mps_ok)
            self._apply(self.controller.initial_actuation())
        else:
            self._apply_sleep(a.fixed_sleep)
        if a.metrics_port is not None:
            self.metrics = _Metrics(a.metrics_port)
            self.emit(event="metrics", url=f"http://127.0.0.1:{self.metrics.port}/metrics")

    def _method(self) -> str:
        if self.cycler is None:
            return "hook"
        return "cgroup" if isinstance(self.cycler, CgroupFreezer) else "signal"

    def _on_spawn(self, pid: int) -> None:
        if self.a.cgroup:
            with open(os.path.join(self.a.cgroup, "cgroup.procs"), "w") as f:
                f.write(str(pid))

    def _before_terminate(self, pid: int) -> None:
        if self.cycler is not None:
            self.cycler.suspend(True)

    # ------------------------------------------------------------------ actuation
    def _apply_sleep(self, sleep_s: float) -> None:
        use_hook = self.cycler is None
        if self.cycler is not None:
            self.cycler.set_sleep(sleep_s)
        if self.hook is not None:
            self.hook.set_sleep(sleep_s if use_hook else 0.0)

    def _apply(self, act: Actuation) -> None:
        self._apply_sleep(act.sleep_s)
        if act.mps_changed and self.trainer is not None:
            if self._restart_thread is not None and self._restart_thread.is_alive():
                return
            self._restart_thread = threading.Thread(target=self._restart, args=(act.mps_pct,),
                                                    name="gpucontrol-mps", daemon=True)
            self._restart_thread.start()

    def _restart(self, pct: float) -> None:
        assert self.trainer is not None
        try:
            res = self.trainer.apply(pct)
            if self.trainer.pid is not None:
                new = ProcessHandle.open(self.trainer.pid)
                for h in self.roots:
                    h.close()
                self.roots = [new]
                if self.cycler is not None and hasattr(self.cycler, "set_targets"):
                    self.cycler.set_targets([new.pid])
        except Exception as exc:
            self.emit(event="mps_restart", ok=False, new_pct=pct, error=str(exc))
            return
        finally:
            if self.cycler is not None:
                self.cycler.suspend(False)
            self._restarted = True
        self.emit(event="mps_restart", **dataclasses.asdict(res))

    # ------------------------------------------------------------------ the loop
    def training_alive(self) -> bool:
        if self._restart_thread is not None and self._restart_thread.is_alive():
            return True
        return any(h.alive() for h in self.roots)

    def step(self) -> None:
        """One control period."""
        assert self.monitor is not None
        self.periods += 1
        st: PeriodStats = self.monitor.collect()
        restarting = self._restarted or (self._restart_thread is not None
                                         and self._restart_thread.is_alive())
        self._restarted = False
        if self.controller is not None:
            act = self.controller.update(st.to_measurement(restarting))
            self._apply(act)
        else:
            act = Actuation(self.a.fixed_sleep, self.a.fixed_mps or 100.0, reason="fixed")
            if self.hook is not None:
                self.hook.beat()
        if self.a.run_quantum_s == "auto" and self.cycler is not None and st.iter_count:
            self.cycler.set_run_quantum(min(max(st.iter_mean_ms / 1e3, 0.01), 10.0))
        if self.guardian is not None and not self.guardian.alive():
            ok = self.guardian.ensure()
            self.emit(event="guardian_restarted", ok=ok)
        if self.cycler is not None and self.cycler.error and not self._actuator_error:
            self._actuator_error = self.cycler.error  # it resumed the training and stopped
            self.say(f"sleep actuator stopped: {self.cycler.error}")
            self.emit(event="actuator_error", error=self.cycler.error)
        duty = self.cycler.stats() if self.cycler is not None else None
        rec = dict(period=self.periods, **st.as_dict(), sleep_s=act.sleep_s,
                   mps_pct=act.mps_pct, mps_changed=act.mps_changed, saturated=act.saturated,
                   reason=act.reason, error_ms=act.error_ms, restarting=restarting)
        if duty is not None:
            rec.update(stopped_fraction=round(duty.achieved_fraction, 5),
                       commanded_fraction=round(duty.commanded_fraction, 5),
                       pause_p99_ms=duty.pause_p99_ms, resume_p99_ms=duty.resume_p99_ms,
                       targets=duty.targets)
        self.emit(**rec)
        if self.metrics is not None:
            self.metrics.set(latency_mean_ms=st.mean_ms, latency_p99_ms=st.p99_ms,
                             latency_samples=st.count, sleep_seconds=act.sleep_s,
                             mps_percent=act.mps_pct, periods_total=self.periods,
                             malformed_total=self.monitor.total_malformed,
                             samples_total=self.monitor.total_count,
                             slo_ms=self.a.slo_ms if self.a.slo_ms else math.nan,
                             stopped_fraction=duty.achieved_fraction if duty else math.nan)

    def request_stop(self) -> None:
        """Ask the loop to stop (safe from a signal handler or another thread)."""
        self._stopping = True
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass

    def _wait(self, timeout: float) -> None:
        try:
            select.select([self._stop_r], [], [], timeout)
        except InterruptedError:
            pass

    def run(self) -> int:
        """Set up, loop until SIGTERM/SIGINT, the duration, or the training ending."""
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                handlers[sig] = signal.signal(sig, lambda *_: self.request_stop())
        try:
            self.setup()
            t0 = time.monotonic()
            deadline = t0 + self.a.duration_s if self.a.duration_s else math.inf
            nxt = t0 + self.a.period_s
            while not self._stopping:
                self._wait(max(0.0, min(nxt, deadline) - time.monotonic()))
                if self._stopping:
                    break
                if time.monotonic() >= deadline:
                    break
                self.step()
                nxt += self.a.period_s
                if nxt < time.monotonic():
                    nxt = time.monotonic() + self.a.period_s
                if not self.training_alive():
                    self.emit(event="training_finished")
                    break
            return 0
        finally:
            self.shutdown()
            for sig, h in handlers.items():
                signal.signal(sig, h)

    def shutdown(self) -> None:
        """Resume everything, then release resources; each step runs even if one fails."""
        steps = [
            lambda: self.cycler and self.cycler.close(),
            lambda: self.hook and self.hook.close(),
            lambda: self._restart_thread and self._restart_thread.join(60),
            lambda: self.trainer and self.trainer.stop(),
            lambda: self._made_cgroup and os.rmdir(self._made_cgroup),
            lambda: self.mps_ctl and self.a.mps_pipe_dir is None and self.mps_ctl.quit(),
            lambda: self.monitor and self.monitor.close(),
            lambda: self.metrics and self.metrics.close(),
            lambda: unlink_quietly(self.a.state),
            lambda: self.guardian and self.guardian.stop(),
        ]
        for step in steps:
            try:
                step()
            except Exception as exc:
                self.say(f"shutdown step failed: {exc}")
        for h in self.roots:
            h.close()
        for fd in (self._stop_r, self._stop_w):
            os.close(fd)
        self.emit(event="stopped", periods=self.periods)


# ---------------------------------------------------------------------------------- CLI
def _quantum(text: str) -> float | str:
    if text == "auto":
        return text
    v = float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError("must be > 0 or 'auto'")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("control")
    g.add_argument("--slo-ms", type=float, help="latency set point (ms per batch)")
    g.add_argument("--model", help="model.json: {gain, offset} or a list of MPS-level rows")
    g.add_argument("--period-s", type=float, default=4.0, help="control period (default 4)")
    g.add_argument("--outer-every", type=int, default=25, help="outer loop every N periods")
    g.add_argument("--outer", choices=("paper", "mid-range", "none"), default="paper")
    g.add_argument("--mode", choices=("mean", "p99"), default="mean")
    g.add_argument("--max-sleep-s", type=float, default=1.0, help="sleep upper bound (s)")
    g.add_argument("--initial-mps", type=float, default=100.0)
    g.add_argument("--fixed-sleep", type=float, help="open loop: this sleep (s) always")
    g.add_argument("--fixed-mps", type=float, help="open loop: start training at this MPS %%")
    g.add_argument("--duration-s", type=float, help="stop after this long")
    t = p.add_argument_group("training")
    t.add_argument("--training-pid", type=int, action="append", help="repeatable")
    t.add_argument("--training-cmd", help="command the daemon launches (and restarts for MPS)")
    t.add_argument("--sleep-method", choices=("auto", "signal", "cgroup", "hook"),
                   default="auto", help="auto: cgroup freezer when possible, else signals")
    t.add_argument("--cgroup", help="cgroup v2 directory holding the training (with "
                   "--training-cmd it is created if missing and the training started in it)")
    t.add_argument("--run-quantum-s", type=_quantum, default=0.2,
                   help="run time between pauses (about one iteration), or 'auto'")
    t.add_argument("--shadow", action="store_true", help="MPS change: pre-start the new one")
    t.add_argument("--ready", choices=("notify", "spawn"), default="notify")
    t.add_argument("--ready-timeout-s", type=float, default=120.0)
    t.add_argument("--mps-binary", default="nvidia-cuda-mps-control")
    t.add_argument("--mps-pipe-dir", help="use this existing MPS daemon instead of a private one")
    t.add_argument("--allow-other-users", action="store_true",
                   help="root only: allow training processes of other users")
    f = p.add_argument_group("files")
    f.add_argument("--gpu", type=int, default=0, help="GPU index (names the default files)")
    f.add_argument("--socket", help="latency socket (default <runtime dir>/gpuN.sock)")
    f.add_argument("--state", help="state file (default <runtime dir>/gpuN.state.json)")
    f.add_argument("--hook", help="hook file (default <runtime dir>/gpuN.hook)")
    f.add_argument("--log", help="JSON-lines log file (default stdout)")
    f.add_argument("--metrics-port", type=int,
                   help="serve Prometheus metrics on 127.0.0.1:PORT (off by default)")


def run_from_args(args: argparse.Namespace) -> int:
    for kind, attr in (("sock", "socket"), ("state", "state"), ("hook", "hook")):
        if getattr(args, attr) is None:
            setattr(args, attr, str(default_path(kind, args.gpu)))
        else:
            setattr(args, attr, os.path.abspath(getattr(args, attr)))
    if args.log:
        with open(args.log, "a", encoding="utf-8") as log:
            return Daemon(args, log).run()
    return Daemon(args).run()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpucontrol.daemon",
                                description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_from_args(args)
    except ValueError as exc:
        print(f"gpucontrol-daemon: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
