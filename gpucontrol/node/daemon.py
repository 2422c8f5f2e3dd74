"""The per-GPU control daemon: monitor -> TwoTierController -> actuators, crash-safe.

Run it as ``python -m gpucontrol.daemon ...`` (no harness needed on a node) or as
``gpucontrol daemon ...`` (the flags are in :mod:`gpucontrol.node.cli`). Every control period
it collects the inference latency reported over its Unix socket
(:func:`gpucontrol.node.client.report_latency`), asks the :class:`gpucontrol.TwoTierController`
for the next sleep and spatial share, applies them to the training (the sleep by signals, cgroup
freezer or the cooperative hook; the share through one backend, :mod:`gpucontrol.node.share`:
MPS by restart, a CPU quota, or a green-context partition), and writes one JSON line.
``fixed_sleep``/``fixed_mps`` run it open loop.

Crash safety (see :mod:`gpucontrol.node.guardian`): leftovers of a previous run are resumed first;
a guardian process is running before anything is paused; the state file lists every target
before it is paused; SIGTERM/SIGINT resume everything and exit cleanly (status 0 after SIGTERM,
130 after SIGINT, as for any Ctrl-C).

The daemon reads only its :class:`~gpucontrol.node.config.DaemonConfig`; from Python::

    from gpucontrol.node.config import DaemonConfig
    from gpucontrol.node.daemon import Daemon

    Daemon(DaemonConfig(training_pids=(4242,), slo_ms=90.0, model="model.json")).run()

Examples
--------
Command lines::

    python -m gpucontrol.daemon --slo-ms 90 --model model.json --training-pid 4242
    python -m gpucontrol.daemon --slo-ms 90 --model model.json --training-cmd "python train.py"
    python -m gpucontrol.daemon --fixed-sleep 0.2 --training-pid 4242      # open loop

Building a daemon starts nothing (no file, process or thread) until :meth:`Daemon.run`:

>>> from gpucontrol.node.config import DaemonConfig
>>> from gpucontrol.node.daemon import Daemon
>>> d = Daemon(DaemonConfig(training_cmd="python train.py", fixed_sleep=0.1,
...                         socket="/tmp/x/g.sock", state="/tmp/x/g.state.json",
...                         hook="/tmp/x/g.hook"))
>>> d.cfg.fixed_sleep, d.periods
(0.1, 0)
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import math
import os
import select
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from gpucontrol.errors import ConfigurationError, ControlLoopError, TargetRefused
from gpucontrol.node._runtime import ensure_private_dir, grant_group, unlink_quietly
from gpucontrol.node.actuators.cgroup import check_cgroup_holds
from gpucontrol.node.actuators.mps import MPSActuator, MPSControl, MPSError
from gpucontrol.node.actuators.procs import ProcessHandle
from gpucontrol.node.actuators.sleep import CgroupFreezer, DutyCycler, choose_sleep_actuator
from gpucontrol.node.actuators.spatial import detect_backends
from gpucontrol.node.config import DaemonConfig
from gpucontrol.node.daemon_safety import DaemonSafety
from gpucontrol.node.guardian import Guardian, read_state
from gpucontrol.node.health import Heartbeat, SilenceWatch
from gpucontrol.node.hooks import HookWriter
from gpucontrol.node.locks import FileLock, TargetLocks
from gpucontrol.node.logsink import LogSink, open_log
from gpucontrol.node.metrics import DaemonMetrics
from gpucontrol.node.model_file import load_model, load_sleep_span
from gpucontrol.node.monitor import LatencyMonitor, PeriodStats
from gpucontrol.node.mps_health import MPSHealthWatch
from gpucontrol.node.persist import restorable
from gpucontrol.node.pidfile import PidClaim, check_claim, resolve_pid_file
from gpucontrol.node.prom_source import PrometheusSource
from gpucontrol.node.share import ShareWiring, controller_restart_s, is_restart_free
from gpucontrol.two_tier import Actuation, TwoTierController

__all__ = ["Daemon", "load_model"]  # load_model lives in model_file (re-exported)

logger = logging.getLogger(__name__)


# errors that say a --socket/--state/--hook path is wrong (refused naming the flag, exit 2);
# any other OSError at set-up (no space, too many files) is the machine's (exit 1)
_PATH_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS,
                          errno.ELOOP, errno.ENAMETOOLONG, errno.EEXIST})


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class Daemon(DaemonSafety):
    """One GPU's daemon, built from its :class:`~gpucontrol.node.config.DaemonConfig`.

    Building it runs the configuration's environment checks
    (:meth:`DaemonConfig.check_environment`) and starts nothing; :meth:`run` sets up, loops
    and shuts down.

    Parameters
    ----------
    config : DaemonConfig
        Every setting; the daemon reads nothing else.
    log : TextIO or None
        Stream for the JSON-lines event log; None: the file ``config.log`` (appended to,
        opened by :meth:`run`) or standard output.

    Raises
    ------
    ValueError
        A training process that may not be paused, or ``allowed_uids`` without root.
    """

    def __init__(self, config: DaemonConfig, log: TextIO | None = None) -> None:
        if not isinstance(config, DaemonConfig):
            raise TypeError(f"Daemon needs a DaemonConfig, got {type(config).__name__} "
                            "(use DaemonConfig.from_args for parsed arguments)")
        config.check_environment()
        self.cfg = config
        self.log_file: TextIO = log or sys.stdout
        self._own_log = log is None and config.log is not None
        self._sink: LogSink | None = None  # non-blocking writer of log_file while run() runs
        # stopping: a flag and a self-pipe (made by run), no lock (a signal handler must never
        # take a lock the interrupted main thread may hold, as Event.set would)
        self._stopping = False
        self._ran = False  # run() is one-shot: a second call raises
        self._stop_signal: int | None = None  # the signal that asked for the stop
        self._emitted = False  # whether any line was logged (a refused start logs none)
        self._stop_r = self._stop_w = -1
        self._state_lock = threading.Lock()
        self.guardian: Guardian | None = None
        self.monitor: LatencyMonitor | PrometheusSource | None = None
        self.share: ShareWiring | None = None  # the spatial-share backend (--share-backend)
        self.hook: HookWriter | None = None
        self.cycler: DutyCycler | None = None
        self.mps_ctl: MPSControl | None = None
        self.trainer: MPSActuator | None = None
        self.controller: TwoTierController | None = None
        self.metrics: DaemonMetrics | None = None
        self.roots: list[ProcessHandle] = []
        self._restart_thread: threading.Thread | None = None
        self._restarted = False
        self._made_cgroup: str | None = None
        self._share_lock: str | None = None  # the CPU-share group's lock file, once claimed
        self._actuator_error = ""
        self.periods = 0
        self._owner: FileLock | None = None  # the state file is ours while this is held
        self._locks: TargetLocks | None = None
        self._records: dict[str, Any] = {}  # owned training, MPS daemon, made cgroup
        self._restored: dict[str, float] | None = None  # a fresh controller record
        self.mps_watch: MPSHealthWatch | None = None
        self.heartbeat = Heartbeat(config.period_s, config.stall_timeout_s)
        self.silence = SilenceWatch(config.silent_periods)
        self._reason = self._reason_detail = ""  # the latency source's, when it failed
        # the uids a target may run as (a PID file narrows them to its owner)
        self._uids: frozenset[int] = config.target_uids()

    # ------------------------------------------------------------------ output
    def emit(self, **rec: Any) -> None:
        self._emitted = True
        rec = {"ts": round(time.time(), 3), **{k: _clean(v) for k, v in rec.items()}}
        if self.metrics is not None:  # first: a reader of the line finds them updated
            self.metrics.observe(rec, log_dropped=self._sink.dropped if self._sink else 0)
        if self._sink is not None:  # never blocks: a stalled reader costs lines, not periods
            self._sink.write_line(json.dumps(rec) + "\n")
            return
        try:
            self.log_file.write(json.dumps(rec) + "\n")
            self.log_file.flush()
        except (OSError, ValueError):
            pass

    def _health(self) -> dict[str, Any]:
        n = self.silence.periods
        limit = self.cfg.unready_periods
        why = ""
        if limit and n >= limit:
            why = (f"no usable latency for {n} periods: "
                   + (f"{self._reason} ({self._reason_detail})" if self._reason
                      else "no latency reported"))
        return self.heartbeat.health(
            guardian_alive=self.guardian is not None and self.guardian.alive(),
            actuator_up=not self._actuator_error, latency_unready=why)

    @staticmethod
    def say(msg: str) -> None:
        """A message for the operator (a warning on the module logger)."""
        logger.warning("%s", msg)

    # ------------------------------------------------------------------ setup
    def _make_controller(self, mps_ok: bool) -> TwoTierController | None:
        cfg = self.cfg
        if cfg.fixed_sleep is not None:
            return None
        assert cfg.model is not None and cfg.slo_ms is not None  # DaemonConfig checked it
        try:
            return self._build_controller(cfg.model, cfg.slo_ms, mps_ok)
        except ValueError as exc:  # the model file, or the controller on that model
            msg = str(exc)
            raise ConfigurationError(f"--model {cfg.model}: {msg}" if cfg.model not in msg
                                     else f"--model: {msg}") from None

    def _build_controller(self, model: str, slo_ms: float, mps_ok: bool) -> TwoTierController:
        cfg = self.cfg
        outer = cfg.outer if mps_ok and cfg.fixed_mps is None else "none"
        kw: dict[str, Any] = {"identified_span_s": load_sleep_span(model)}
        if cfg.outer == "throughput":  # the default: delay-robust even without a share knob
            kw["detune"] = 0.5
            if (restart_s := controller_restart_s(cfg.share_backend)) is not None:
                kw["restart_s"] = restart_s  # the share backend's cost of a change
        if cfg.detune is not None:
            kw["detune"] = cfg.detune
        if cfg.sleep_method != "hook" and cfg.run_quantum_s != "auto":  # duty q / (q + s)
            kw["run_quantum_s"] = float(cfg.run_quantum_s)
        if cfg.green_shares:  # the training's partitions, and the whole device (no command)
            kw["mps_levels_pct"] = (*cfg.green_shares, 100.0)
        return TwoTierController(
            load_model(model), slo_ms, inner_period_s=cfg.period_s,
            outer_every=cfg.outer_every,
            sleep_bounds_s=(0.0, cfg.max_sleep_s), mode=cfg.mode, outer=outer, **kw,
            initial_mps_pct=(self._restored["mps_pct"] if self._restored and mps_ok
                             else cfg.initial_mps_pct),
            initial_sleep_s=self._restored["sleep_s"] if self._restored else None)

    def setup(self) -> None:
        cfg = self.cfg
        # the controller first: a bad model or setting fails before anything is touched
        mps_possible = (is_restart_free(cfg.share_backend)
                        or (bool(cfg.training_cmd) and MPSControl(cfg.mps_binary).available()))
        try:
            prev = read_state(cfg.state)
        except OSError:  # unreadable here: refused further down, with the flag named
            prev = None
        except ValueError as exc:  # not a file of ours: nothing is touched
            raise ConfigurationError(f"--state {cfg.state}: {exc}") from None
        with contextlib.suppress(ValueError):
            self._restored = restorable(prev, cfg)
            if self._restored is not None and prev is not None:  # kept until our first period
                self._records["controller"] = prev["controller"]
        try:
            self.controller = self._make_controller(mps_possible)
        except Exception:
            self._resume_leftovers_and_fail()
            raise
        claim = self._await_pid_file()  # refused before anything is touched
        for flag, p in (("--socket", cfg.socket), ("--state", cfg.state), ("--hook", cfg.hook)):
            try:
                ensure_private_dir(Path(p).parent)
            except (OSError, ValueError) as exc:  # the path's fault (not e.g. a full disk)
                if isinstance(exc, OSError) and exc.errno not in _PATH_ERRNOS:
                    raise
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise ConfigurationError(f"{flag} {p}: cannot use its directory "
                                         f"{Path(p).parent} ({why})") from None
        self._take_ownership()
        self._resume_leftovers()
        if cfg.share_backend == "cpu":  # one daemon per CPU-share group, before it is touched
            from gpucontrol.node.actuators.cpu_share import group_path

            self._share_lock = self._claim_share_group(group_path(cfg.share_cgroup))
        self.guardian = Guardian(
            cfg.state, heartbeat_timeout_s=self.heartbeat.guardian_timeout_s).start()
        if cfg.latency_source == "prometheus":
            assert cfg.prometheus_url is not None  # DaemonConfig checked it
            self.monitor = PrometheusSource(cfg.prometheus_url, cfg.prometheus_metric,
                                            timeout_s=cfg.scrape_timeout_s).start()
        else:
            self.monitor = LatencyMonitor(cfg.socket).start()
        self.hook = HookWriter(cfg.hook, stale_after_s=max(3 * cfg.period_s, 2.0),
                               max_sleep_s=min(cfg.max_sleep_s, 60.0))
        if cfg.sleep_method == "hook":  # before the training starts: its first iteration reads it
            self.hook.set_sleep(self._open_loop_sleep() if self.controller is None
                                else self.controller.initial_actuation().sleep_s)
        # what this machine offers for the spatial share and why not (no CUDA is initialised)
        infos = detect_backends(mps_binary=cfg.mps_binary)
        self.share = ShareWiring(cfg.share_backend, infos)
        initial_share = (self.controller.initial_actuation().mps_pct  # maybe restored
                         if self.controller and cfg.fixed_mps is None else cfg.initial_mps_pct)
        self.share.start_green(self.hook, initial_share, self.cfg.green_shares)  # before start
        self.write_state([])
        if cfg.socket_group is not None:  # before the training starts: it opens the hook
            from gpucontrol.node._runtime import resolve_group

            grant_group(resolve_group(cfg.socket_group), rw=(cfg.socket,), ro=(cfg.hook,))

        if cfg.cgroup and cfg.training_cmd and not os.path.isdir(cfg.cgroup):
            os.mkdir(cfg.cgroup)  # a group of our own for the training we launch
            self._made_cgroup = os.path.realpath(cfg.cgroup)
            self._record(made_cgroup=self._made_cgroup)
        mps_ok, mps_error = False, ""
        initial_mps = cfg.initial_mps_pct
        if cfg.training_cmd and cfg.share_backend == "mps":
            self.mps_ctl = MPSControl(cfg.mps_binary, pipe_dir=cfg.mps_pipe_dir)
            if not self.mps_ctl.available():
                self.say(f"{cfg.mps_binary} not found: MPS unavailable, running sleep-only")
                self.emit(event="mps_unavailable")
                self.mps_ctl = None
            else:
                try:
                    if cfg.mps_pipe_dir is None:
                        # recorded before `-d`: if we die from here on, it is quit and removed
                        self.mps_ctl.make_private_dirs()
                        self._record(mps=self.mps_ctl.record())
                        self.mps_ctl.start()
                    elif not self.mps_ctl.health():
                        raise MPSError(f"no MPS control daemon answers in {cfg.mps_pipe_dir}")
                    mps_ok = True
                    self.mps_watch = MPSHealthWatch(self.mps_ctl, interval_s=cfg.mps_health_s,
                                                    restart=cfg.mps_pipe_dir is None).start()
                    self.emit(event="mps_ready", pipe_dir=self.mps_ctl.pipe_dir)
                except MPSError as exc:
                    self.say(f"MPS unavailable ({exc}); running sleep-only")
                    self.emit(event="mps_unavailable", error=str(exc))
                    mps_error = str(exc)
                    if cfg.mps_pipe_dir is None:  # our private directories: gone, unlisted
                        with contextlib.suppress(MPSError, OSError):
                            self.mps_ctl.quit()
                        self._records.pop("mps", None)
                    self.mps_ctl = None
            if cfg.fixed_mps is not None and not mps_ok:  # never silently at 100 %
                raise ConfigurationError(f"--fixed-mps {cfg.fixed_mps:g} needs MPS, which is "
                                         "unavailable here (see the message above)")
            if self._restored is not None and mps_ok and cfg.fixed_mps is None:
                initial_mps = self._restored["mps_pct"]
        if cfg.training_cmd:
            env = {"GPUCONTROL_HOOK_FILE": cfg.hook, "GPUCONTROL_SOCKET": cfg.socket}
            self.trainer = MPSActuator(
                shlex.split(cfg.training_cmd), env=env, mps=self.mps_ctl, shadow=cfg.shadow,
                ready=cfg.ready, ready_timeout_s=cfg.ready_timeout_s,
                on_spawn=self._on_spawn, before_terminate=self._before_terminate,
                cancel_fd=self._stop_r, user=cfg.training_user)
            # no old process to hand over from: the first launch does not wait to be ready
            pids = [self.trainer.start(initial_mps, wait_ready=False)]
            self.emit(event="training_started", pid=pids[0], mps_pct=initial_mps)
        elif claim is not None:
            pids = [claim.pid]
        else:
            pids = list(cfg.training_pids)
        self.roots = [ProcessHandle.open(p, uids=self._uids) for p in pids]
        if claim is not None:  # the process held is the one the file named, in its cgroup
            check_claim(claim, cfg.training_cgroup)
            if not self.roots[0].alive():
                raise TargetRefused(f"pid {claim.pid} of {claim.path} exited")
        self._claim_targets(self.roots)
        if cfg.cgroup and cfg.sleep_method != "hook":
            check_cgroup_holds(cfg.cgroup, pids)  # never freeze a group without the training
        if cfg.share_backend == "cpu":  # restart-free share: the cgroup CPU quota
            self.emit(**self.share.start_cpu(pids, cgroup=cfg.share_cgroup,
                                             initial_pct=initial_share, record=self._record,
                                             lock=self._share_lock))
        self.share.start_mps(self.trainer, mps_ok=mps_ok, why_not=mps_error)

        quantum = 0.2 if cfg.run_quantum_s == "auto" else float(cfg.run_quantum_s)
        if cfg.sleep_method != "hook":
            self.cycler = choose_sleep_actuator(
                pids=pids, cgroup=cfg.cgroup, method=cfg.sleep_method,
                uids=self._uids, run_quantum_s=quantum,
                max_sleep_s=cfg.max_sleep_s, gate=self.guardian.alive,
                on_targets_changed=self.write_state)
            if isinstance(self.cycler, CgroupFreezer):
                self._claim_cgroup(self.cycler.path)
            self.write_state()  # write-ahead: listed before the first pause
            self.cycler.start()
        self.emit(event="started", pid=os.getpid(), socket=cfg.socket, state=cfg.state,
                  hook=cfg.hook, method=self._method(), training=pids, mps=mps_ok,
                  share_backend=cfg.share_backend)
        self.emit(event="spatial_backends", backends=[b.as_dict() for b in infos])
        self.emit(**self.share.chosen(cfg.period_s))  # which one drives the share, and why
        mps_ok = mps_ok or self.share.restart_free  # the controller's share knob, whichever

        if self.controller is not None and mps_ok != mps_possible:
            self.controller = self._make_controller(mps_ok)
        if self.controller is not None and self._restored is not None:
            self.emit(event="controller_resumed", **self._restored)
        if self.controller is not None:
            self._apply(self.controller.initial_actuation())
        else:
            self._apply_sleep(self._open_loop_sleep())
        if cfg.metrics_port is not None or cfg.metrics_textfile:
            self.metrics = DaemonMetrics.from_config(
                cfg, pids=pids, mps_ok=mps_ok, method=self._method(), health=self._health,
                backend=self.share.metrics_label())
            self.emit(event="metrics", url=self.metrics.url, textfile=cfg.metrics_textfile)

    def _await_pid_file(self) -> PidClaim | None:
        """``training_pid_file``: wait for it (until stopped) and check what it names; the
        targets may then run only as the file's owner."""
        cfg = self.cfg
        if cfg.training_pid_file is None:
            return None
        said = False
        while True:
            claim = resolve_pid_file(cfg.training_pid_file, cfg.pid_file_owners(),
                                     cfg.training_cgroup)
            if claim is not None:
                self._uids = frozenset({claim.owner})
                return claim
            if not said:
                self.say(f"waiting for the training's PID file {cfg.training_pid_file}")
                said = True
            self._wait(0.5)
            if self._stopping:
                raise RuntimeError(f"stopped while waiting for {cfg.training_pid_file}")

    def _open_loop_sleep(self) -> float:
        assert self.cfg.fixed_sleep is not None  # no controller means open loop
        return self.cfg.fixed_sleep

    def _method(self) -> str:
        if self.cycler is None:
            return "hook"
        return "cgroup" if isinstance(self.cycler, CgroupFreezer) else "signal"

    def _on_spawn(self, pid: int) -> None:
        # listed at once: if we die, the guardian (or the next daemon) ends it
        owned = list(self._records.get("owned", []))
        with contextlib.suppress(ProcessLookupError, OSError):
            h = ProcessHandle.open(pid, check=False)
            owned.append(h.identity() | {"group": True})  # it leads its process group
            h.close()
        self._record(owned=owned)
        if self.cfg.cgroup:  # an error here stops the new process (MPSActuator._spawn)
            with open(os.path.join(self.cfg.cgroup, "cgroup.procs"), "w") as f:
                f.write(str(pid))

    def _before_terminate(self, pid: int) -> None:
        if self.cycler is not None:
            self.cycler.suspend(True)

    # ------------------------------------------------------------------ actuation
    def _apply_sleep(self, sleep_s: float) -> None:
        use_hook = self.cycler is None
        if self.cycler is not None:
            self.cycler.set_sleep(sleep_s)
        if self.hook is not None:  # never above the hook's own cap (60 s)
            self.hook.set_sleep(min(sleep_s, self.hook.max_sleep_s) if use_hook else 0.0)

    def _apply(self, act: Actuation) -> None:
        self._apply_sleep(act.sleep_s)
        if act.mps_changed and self.share is not None and self.share.restart_free:
            self.emit(**self.share.change(act.mps_pct))  # no restart: done within a period
            return
        if act.mps_changed and self.share is not None and self.share.backend is not None:
            if self._restart_thread is not None and self._restart_thread.is_alive():
                return
            if self.mps_watch is not None and not self.mps_watch.healthy:
                self.emit(event="mps_restart", ok=False, new_pct=act.mps_pct,
                          error="the MPS control daemon is unhealthy: change skipped")
                return
            self._restart_thread = threading.Thread(target=self._restart, args=(act.mps_pct,),
                                                    name="gpucontrol-mps", daemon=True)
            self._restart_thread.start()

    def _restart(self, pct: float) -> None:
        assert self.trainer is not None and self.share is not None
        try:
            res = self.share.restart(pct)  # the mps-restart backend (MPSActuator.apply)
            if self.trainer.pid is not None:
                new = ProcessHandle.open(self.trainer.pid)
                for h in self.roots:
                    h.close()
                self.roots = [new]
                self._records["owned"] = [new.identity() | {"group": True}]
                self._claim_targets(self.roots)
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
        if self.controller is not None and res.ok and math.isfinite(res.total_s):
            self.controller.set_restart_duration(res.total_s)  # the hold and its cost

    # ------------------------------------------------------------------ the loop
    def training_alive(self) -> bool:
        if self._restart_thread is not None and self._restart_thread.is_alive():
            return True
        return any(h.alive() for h in self.roots)

    def step(self) -> None:
        """One control period."""
        assert self.monitor is not None
        self.periods += 1
        try:
            st: PeriodStats = self.monitor.collect()
        except Exception as exc:  # a source's bad reading costs a period, never the training
            now = time.time()
            st = PeriodStats(now, now, 0, math.nan, math.nan, math.nan, 1)
            self.emit(event="latency_source_error", error=f"{type(exc).__name__}: {exc}")
        source_reason = self._source_reason()
        restarting = self._restarted or (self._restart_thread is not None
                                         and self._restart_thread.is_alive())
        self._restarted = False
        if self.controller is not None:
            act = self.controller.update(st.to_measurement(restarting))
            self._apply(act)
        else:
            act = Actuation(self._open_loop_sleep(), self.cfg.fixed_mps or 100.0, reason="fixed")
            if self.hook is not None:
                self.hook.beat()
        if self.cfg.run_quantum_s == "auto" and self.cycler is not None and st.iter_count:
            self.cycler.set_run_quantum(min(max(st.iter_mean_ms / 1e3, 0.01), 10.0))
        if self.guardian is not None and not self.guardian.alive():
            ok = self.guardian.ensure()
            self.emit(event="guardian_restarted", ok=ok)
        self._check_actuator()
        if self.mps_watch is not None:
            for ev in self.mps_watch.take_events():
                self.emit(**ev)
        self._persist(act, closed_loop=self.controller is not None)
        duty = self.cycler.stats() if self.cycler is not None else None
        silent_n, silent, change = self.silence.observe(st.count)
        if change == "silent":
            if self.controller is not None:  # open loop needs no reports
                where = (f"is {self.cfg.prometheus_url} serving a growing "
                         f"{self.cfg.prometheus_metric} histogram?"
                         if self.cfg.latency_source == "prometheus" else
                         f"is the inference server reporting to {self.cfg.socket}?")
                why = f"the last scrape: {source_reason}; " if source_reason else ""
                self.say(f"no latency report for {silent_n} periods: {why}{where}")
            self.emit(event="inference_silent", periods=silent_n)
        elif change == "resumed":
            self.emit(event="inference_resumed")
        gain = act.gain_estimate
        if not math.isfinite(gain) and self.controller is not None:
            gain = self.controller.model.gain
        rec: dict[str, Any] = dict(period=self.periods, **st.as_dict(), sleep_s=act.sleep_s,
                   mps_pct=act.mps_pct, mps_changed=act.mps_changed, saturated=act.saturated,
                   reason=act.reason, error_ms=act.error_ms, restarting=restarting,
                   gain_estimate=gain, periods_without_samples=silent_n,
                   inference_silent=silent)
        if self.cfg.latency_source == "prometheus":
            rec["source_reason"] = source_reason or None
        if duty is not None:
            rec.update(stopped_fraction=round(duty.achieved_fraction, 5),
                       commanded_fraction=round(duty.commanded_fraction, 5),
                       pause_p99_ms=duty.pause_p99_ms, resume_p99_ms=duty.resume_p99_ms,
                       targets=duty.targets)
        self.emit(**rec)  # emit updates the metrics before it writes the line

    def _source_reason(self) -> str:
        """The latency source's reason for this period (a scrape's, :data:`REASONS` of
        :mod:`gpucontrol.node.prom_source`; "" when usable); one line and one
        ``latency_source_state`` event when it changes."""
        src = self.monitor
        reason = str(getattr(src, "reason", "") or "")
        if reason != self._reason:
            detail = str(getattr(src, "last_error", "") or "") if reason else ""
            where = self.cfg.prometheus_url or self.cfg.socket
            self.say(f"latency source {where}: {reason} ({detail})" if reason else
                     f"latency source {where}: usable again (was {self._reason})")
            self.emit(event="latency_source_state", reason=reason or None,
                      previous=self._reason or None, error=detail or None)
            self._reason, self._reason_detail = reason, detail
        return reason

    def request_stop(self, signum: int | None = None) -> None:
        """Ask the loop to stop (safe from a signal handler or another thread).

        Parameters
        ----------
        signum : int or None
            The signal that asks (SIGINT makes :meth:`run` return 130), if one does.
        """
        if not self._stopping:
            self._stop_signal = signum
        self._stopping = True
        if self._stop_w >= 0:
            try:
                os.write(self._stop_w, b"x")
            except OSError:
                pass

    def _wait(self, timeout: float) -> None:
        try:
            select.select([self._stop_r], [], [], timeout)
        except InterruptedError:
            pass

    def _wait_beating(self, until: float) -> None:
        """Wait until ``until`` (monotonic) or a stop request, beating the heartbeat."""
        while not self._stopping:
            self.heartbeat.beat(self.guardian)
            left = until - time.monotonic()
            if left <= 0:
                return
            self._wait(min(left, self.heartbeat.interval_s))

    def run(self) -> int:
        """Set up, loop until SIGTERM/SIGINT, the duration, or the training ending.

        Returns
        -------
        int
            The exit status of a clean stop: 0, or 130 when SIGINT asked for it (the shell's
            status of a Ctrl-C); setup errors raise. A start refused before anything was
            logged writes nothing: no line, and a ``log`` file it created is removed again.

        Raises
        ------
        ControlLoopError
            The control loop raised after set-up (the cause attached); the shutdown ran
            first, so every target was resumed.
        RuntimeError
            ``run()`` was called before on this object: a Daemon runs once; make a new one.
        """
        if self._ran:
            raise RuntimeError("a Daemon runs once; make a new one")
        self._ran = True
        with contextlib.ExitStack() as stack:
            if self._own_log:
                assert self.cfg.log is not None
                existed = os.path.lexists(self.cfg.log)
                self.log_file = stack.enter_context(open_log(self.cfg.log))
                if not existed:
                    stack.callback(self._remove_unused_log, os.fstat(self.log_file.fileno()))
            self._sink = LogSink(self.log_file)
            try:
                return self._run()
            finally:
                sink, self._sink = self._sink, None
                sink.close(timeout=1.0)

    def _remove_unused_log(self, made: os.stat_result) -> None:
        """The ``log`` file this run created, if no line went into it (a refused start)."""
        assert self.cfg.log is not None
        with contextlib.suppress(OSError):
            st = os.lstat(self.cfg.log)
            if (not self._emitted and st.st_size == 0
                    and (st.st_dev, st.st_ino) == (made.st_dev, made.st_ino)):
                os.unlink(self.cfg.log)

    def _exit_status(self) -> int:
        return 128 + signal.SIGINT if self._stop_signal == signal.SIGINT else 0

    def _run(self) -> int:
        self._stop_r, self._stop_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                handlers[sig] = signal.signal(sig, lambda n, _: self.request_stop(n))
        try:
            try:
                self.setup()
            except Exception as exc:
                if not self._stopping:
                    raise
                self.emit(event="start_cancelled", error=str(exc))  # SIGTERM during set-up
                return self._exit_status()
            self.heartbeat.ready(f"controlling {self._method()} targets")
            t0 = time.monotonic()
            duration, period = self.cfg.duration_s, self.cfg.period_s
            # --duration-s D: floor(D / T) whole periods (the last one included), and at
            # least D seconds (D < T: no period)
            left = math.floor(duration / period + 1e-9) if duration else math.inf
            nxt = t0 + period
            try:
                while not self._stopping:
                    if left <= 0:
                        if duration:
                            self._wait_beating(t0 + duration)
                        break
                    self._wait_beating(nxt)
                    if self._stopping:
                        break
                    self.step()
                    left -= 1
                    nxt += period
                    if nxt < time.monotonic():
                        nxt = time.monotonic() + period
                    if not self.training_alive():
                        self.emit(event="training_finished")
                        break
            except Exception as exc:  # a bug, not a setting: never reported as one
                what = f"{type(exc).__name__}: {exc}"
                self.emit(event="loop_failed", periods=self.periods, error=what)
                raise ControlLoopError(f"the control loop failed after {self.periods} periods "
                                       f"({what}); everything was resumed") from exc
            return self._exit_status()
        finally:
            self.shutdown()
            for sig, h in handlers.items():
                signal.signal(sig, h)

    def _shutdown_steps(self) -> list[Callable[[], object]]:
        cfg = self.cfg
        steps: list[Callable[[], object]] = []
        if self.cycler is not None:
            steps.append(self.cycler.close)
        if self.share is not None and self.share.flag == "green-context":
            steps.append(self.share.close)  # the full device again, while the hook is open
        if self.hook is not None:
            steps.append(self.hook.close)
        if self._restart_thread is not None:
            thread = self._restart_thread
            steps.append(lambda: thread.join(60))
        if self.trainer is not None:
            steps.append(self.trainer.stop)
        if self.share is not None and self.share.flag == "cpu":
            steps.append(self.share.close)  # the cap lifted, the group removed
        if self._made_cgroup:
            made = self._made_cgroup
            steps.append(lambda: os.rmdir(made))
        if self.mps_watch is not None:
            steps.append(self.mps_watch.close)
        if self.mps_ctl is not None and cfg.mps_pipe_dir is None:
            steps.append(self.mps_ctl.quit)
        if self.monitor is not None:
            steps.append(self.monitor.close)
        if self.metrics is not None:
            steps.append(self.metrics.close)
        if self._owner is not None:  # never a file another daemon owns
            steps.append(lambda: unlink_quietly(cfg.state))
        if self.guardian is not None:
            steps.append(self.guardian.stop)
        if self._locks is not None:
            steps.append(self._locks.release_all)
        if self._owner is not None:
            steps.append(self._owner.release)
        return steps

    def shutdown(self) -> None:
        """Resume everything, then release resources; each step runs even if one fails."""
        self.heartbeat.stopping(self.guardian)
        for step in self._shutdown_steps():
            try:
                step()
            except Exception as exc:
                self.say(f"shutdown step failed: {exc}")
        for h in self.roots:
            h.close()
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1
        if self._emitted:  # a start refused before its first line writes none
            self.emit(event="stopped", periods=self.periods)


if __name__ == "__main__":  # python -m gpucontrol.node.daemon (same as gpucontrol.daemon)
    from gpucontrol.node.cli import main

    sys.exit(main())
