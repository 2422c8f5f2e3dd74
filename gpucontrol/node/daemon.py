"""The per-GPU control daemon: latency source -> TwoTierController -> knobs, crash-safe.

Run it as ``python -m gpucontrol.daemon ...`` (no harness needed on a node) or as
``gpucontrol daemon ...`` (the flags are in :mod:`gpucontrol.node.cli`, the settings in
:class:`~gpucontrol.node.config.DaemonConfig`, read from ``--config`` and the flags). Every
control period it collects the inference latency from its source (the Unix socket
:func:`gpucontrol.node.client.report_latency` writes to, or a scraped histogram), asks the
:class:`gpucontrol.TwoTierController` for the next sleep and spatial share, applies them to the
training through its knobs (:mod:`gpucontrol.node.knobs`: a sleep method, a share backend,
each chosen from :mod:`gpucontrol.node.registry`), and writes one JSON line. ``fixed_sleep``
runs it open loop.

:meth:`Daemon.setup` is the ordered list of starts (:meth:`Daemon.starts`); each part's close is
registered before it starts, and :meth:`Daemon.shutdown` runs them in reverse order -- one undo
path for a clean stop, a refused start and a failing loop alike. Crash safety (see
:mod:`gpucontrol.node.guardian`): leftovers of a previous run are resumed first; a guardian is
running before anything is paused; the state file lists every target before it is paused; the
sleep knob starts last and closes first, so SIGTERM/SIGINT resume everything before anything
else is released (status 0 after SIGTERM, 130 after SIGINT, as for any Ctrl-C).

From Python::

    from gpucontrol.node.config import DaemonConfig
    from gpucontrol.node.daemon import Daemon

    Daemon(DaemonConfig(training_pids=(4242,), slo_ms=90.0, model="model.json")).run()

Examples
--------
Command lines::

    python -m gpucontrol.daemon --slo-ms 90 --model model.json --training-pid 4242
    python -m gpucontrol.daemon --config /etc/gpucontrol/gpu0.toml
    python -m gpucontrol.daemon --fixed-sleep 0.2 --training-pid 4242      # open loop

Building a daemon starts nothing (no file, process or thread) until :meth:`Daemon.run`:

>>> from gpucontrol.node.config import DaemonConfig
>>> from gpucontrol.node.daemon import Daemon
>>> d = Daemon(DaemonConfig(training_cmd="python train.py", fixed_sleep=0.1,
...                         socket="/tmp/x/g.sock", state="/tmp/x/g.state.json",
...                         hook="/tmp/x/g.hook"))
>>> d.cfg.fixed_sleep, d.periods, [s.__name__ for s in d.starts()][:3]
(0.1, 0, ['_start_controller', '_start_training_file', '_start_files'])
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from gpucontrol.errors import ConfigurationError
from gpucontrol.node._runtime import ensure_private_dir, grant_group
from gpucontrol.node.actuators.mps import MPSControl
from gpucontrol.node.actuators.spatial import detect_backends
from gpucontrol.node.config import DaemonConfig
from gpucontrol.node.controller import check_slo, make_controller
from gpucontrol.node.daemon_safety import DaemonSafety
from gpucontrol.node.guardian import Guardian, read_state
from gpucontrol.node.health import Heartbeat, SilenceWatch
from gpucontrol.node.hooks import HookWriter
from gpucontrol.node.lifecycle import DaemonLoop
from gpucontrol.node.locks import FileLock, TargetLocks
from gpucontrol.node.logsink import LogSink
from gpucontrol.node.metrics import DaemonMetrics, waiting_server
from gpucontrol.node.model_file import load_model
from gpucontrol.node.monitor import PeriodStats
from gpucontrol.node.mps_daemon import MPSDaemon
from gpucontrol.node.persist import restorable
from gpucontrol.node.registry import LATENCY_SOURCES, SHARE_BACKENDS, SLEEP_METHODS, knob_class
from gpucontrol.node.share import ShareKnob, make_share
from gpucontrol.node.training import Training
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


class Daemon(DaemonSafety, DaemonLoop):
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
        self._stopping = False
        self._ran = False  # run() is one-shot: a second call raises
        self._stop_signal: int | None = None  # the signal that asked for the stop
        self._emitted = False  # whether any line was logged (a refused start logs none)
        self._stop_r = self._stop_w = -1
        self._state_lock = threading.Lock()
        self._undo = contextlib.ExitStack()  # the closes of what was started, in order
        self.guardian: Guardian | None = None
        self.monitor: Any = None  # the latency source (a knob of LATENCY_SOURCES)
        self.hook: HookWriter | None = None
        self.share: ShareKnob | None = None  # the spatial share (a knob of SHARE_BACKENDS)
        self.sleep: Any = knob_class(SLEEP_METHODS, config.sleep_method)(config)
        self.training = Training(config)
        self.mps: MPSDaemon | None = None  # the MPS control daemon, when the share needs one
        self.cycler: Any = None  # the sleep knob's duty cycler (the state file's lock)
        self.controller: TwoTierController | None = None
        self.metrics: DaemonMetrics | None = None
        self.restarted = False  # an MPS restart ended since the last period
        self._actuator_error = ""
        self.periods = 0
        self._owner: FileLock | None = None  # the state file is ours while this is held
        self._locks: TargetLocks | None = None
        self._records: dict[str, Any] = {}  # owned training, MPS daemon, made cgroup
        self._restored: dict[str, float] | None = None  # a fresh controller record
        self._share_possible = False
        self.heartbeat = Heartbeat(config.period_s, config.stall_timeout_s)
        self.silence = SilenceWatch(config.silent_periods)
        self._reason = self._reason_detail = ""  # the latency source's, when it failed

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
        n, limit = self.silence.periods, self.cfg.unready_periods
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
    def _make_controller(self, share_ok: bool) -> TwoTierController | None:
        return make_controller(self.cfg, share_ok=share_ok, restored=self._restored)

    def initial_share(self) -> float:
        """The share the training starts at: the controller's first (maybe restored) unless
        the share is held (``fixed_mps``) or MPS is not running after all."""
        if (self.controller is None or self.cfg.fixed_mps is not None
                or (self.mps is not None and not self.mps.ok)):
            return float(self.cfg.initial_mps_pct)
        return float(self.controller.initial_actuation().mps_pct)

    def starts(self) -> list[Callable[[], None]]:
        """The set-up, in order: each start registers its close before it acts."""
        return [self._start_controller, self._start_training_file, self._start_files,
                self._start_ownership, self._start_guardian, self._start_source,
                self._start_hook, self._start_share_before_training, self._start_mps,
                self._start_training, self._start_share_after_training, self._start_metrics,
                self._start_sleep, self._announce]

    def setup(self) -> None:
        """Run :meth:`starts` in order (a failure leaves the rest unstarted; :meth:`shutdown`
        closes what was started)."""
        for start in self.starts():
            start()

    def _on_exit(self, close: Callable[[], object]) -> None:
        """Register ``close`` on the undo path (run in reverse order by :meth:`shutdown`; a
        failing close is said, and the others still run)."""
        def guarded() -> None:
            try:
                close()
            except Exception as exc:
                self.say(f"shutdown step failed: {exc}")

        self._undo.callback(guarded)

    def _start(self, knob: Any) -> None:
        self._on_exit(knob.close)
        knob.start(self)

    def _start_controller(self) -> None:
        """The controller first: a bad model or setting fails before anything is touched (a
        dead daemon's leftovers in this state file are still resumed)."""
        cfg = self.cfg
        self._on_exit(self._release_ownership)
        cls = knob_class(SHARE_BACKENDS, cfg.share_backend)
        self._share_possible = cls.changes_without_restart or (
            cls.needs_mps(cfg) and MPSControl(cfg.mps_binary).available())
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
            self.controller = self._make_controller(self._share_possible)
            if self.controller is not None:
                check_slo(self.controller, cfg)  # an SLO the model says no setting meets
        except Exception:
            self._resume_leftovers_and_fail()
            raise

    def _start_training_file(self) -> None:
        """A PID file: waited for and checked, nothing touched. While it is waited for, the
        metrics port answers the probes (a Kubernetes startup probe would otherwise kill an
        agent that waits for a training not scheduled yet): ``/healthz`` 200, ``/readyz``
        503 saying why."""
        with contextlib.ExitStack() as waiting:
            def serve(why: str) -> None:
                if self.cfg.metrics_port is not None:
                    waiting.enter_context(contextlib.closing(waiting_server(self.cfg, why)))

            self.training.resolve(self, on_wait=serve)

    def _start_files(self) -> None:
        cfg = self.cfg
        for flag, p in (("--socket", cfg.socket), ("--state", cfg.state), ("--hook", cfg.hook)):
            try:
                ensure_private_dir(Path(p).parent)
            except (OSError, ValueError) as exc:  # the path's fault (not e.g. a full disk)
                if isinstance(exc, OSError) and exc.errno not in _PATH_ERRNOS:
                    raise
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise ConfigurationError(f"{flag} {p}: cannot use its directory "
                                         f"{Path(p).parent} ({why})") from None

    def _start_ownership(self) -> None:
        self._take_ownership()
        self._resume_leftovers()

    def _start_guardian(self) -> None:
        self._on_exit(lambda: self.guardian.stop() if self.guardian is not None else None)
        self._on_exit(self._remove_state)
        self.guardian = Guardian(
            self.cfg.state, heartbeat_timeout_s=self.heartbeat.guardian_timeout_s).start()

    def _start_source(self) -> None:
        self.monitor = knob_class(LATENCY_SOURCES, self.cfg.latency_source)(self.cfg)
        self._start(self.monitor)

    def _start_hook(self) -> None:
        cfg = self.cfg
        self.hook = HookWriter(cfg.hook, stale_after_s=max(3 * cfg.period_s, 2.0),
                               max_sleep_s=min(cfg.max_sleep_s, 60.0))
        self._on_exit(self.hook.close)
        if cfg.sleep_method == "hook":  # before the training starts: its first iteration reads it
            self.hook.set_sleep(self._first_sleep())
        # what this machine offers for the spatial share and why not (no CUDA is initialised)
        self.share = make_share(cfg.share_backend, detect_backends(mps_binary=cfg.mps_binary),
                                cfg)

    def _first_sleep(self) -> float:
        if self.controller is None:
            assert self.cfg.fixed_sleep is not None  # no controller means open loop
            return self.cfg.fixed_sleep
        return self.controller.initial_actuation().sleep_s

    def _start_share_before_training(self) -> None:
        assert self.share is not None
        if self.share.before_training:
            self._start(self.share)
        self.write_state([])
        if self.cfg.socket_group is not None:  # before the training starts: it opens the hook
            from gpucontrol.node._runtime import resolve_group

            grant_group(resolve_group(self.cfg.socket_group), rw=(self.cfg.socket,),
                        ro=(self.cfg.hook,))

    def _start_mps(self) -> None:
        assert self.share is not None
        if not self.share.needs_mps(self.cfg):
            return
        self.mps = MPSDaemon(self.cfg, pipe_dir=self.share.mps_pipe_dir(self.cfg),
                             say=not self.share.changes_without_restart,
                             required_by=self.share.mps_required_by(self.cfg))  # never 100 %
        self._start(self.mps)

    def _start_training(self) -> None:
        self._start(self.training)

    def _start_share_after_training(self) -> None:
        assert self.share is not None
        if not self.share.before_training:
            self._start(self.share)
        self.share.confirm(self)  # what the backend needs of the running training

    def _start_metrics(self) -> None:
        cfg = self.cfg
        if cfg.metrics_port is None and not cfg.metrics_textfile:
            return
        assert self.share is not None
        self.metrics = DaemonMetrics.from_config(
            cfg, pids=self.training.pids, mps_ok=self.mps is not None and self.mps.ok,
            method=self.sleep.name, health=self._health, backend=self.share.metrics_label(),
            mps_up=self.mps is not None and self.mps.ok)
        self._on_exit(self.metrics.close)

    def _start_sleep(self) -> None:
        self._start(self.sleep)  # last: every target is listed, and it is the first resumed

    def _announce(self) -> None:
        """What runs and why; the controller on the share knob it got; the first actuation."""
        cfg, share = self.cfg, self.share
        assert share is not None
        self.emit(event="started", pid=os.getpid(), socket=cfg.socket, state=cfg.state,
                  hook=cfg.hook, method=self.sleep.method, training=self.training.pids,
                  mps=self.mps is not None and self.mps.ok, share_backend=cfg.share_backend)
        self.emit(event="spatial_backends",
                  backends=[b.as_dict() for b in detect_backends(mps_binary=cfg.mps_binary)])
        self.emit(**share.chosen(cfg.period_s))  # which one drives the share, and why
        share_ok = share.backend is not None  # the controller's share knob, whichever
        if self.controller is not None and share_ok != self._share_possible:
            self.controller = self._make_controller(share_ok)
        if self.controller is not None and self._restored is not None:
            self.emit(event="controller_resumed", **self._restored)
        self._apply(self.controller.initial_actuation() if self.controller is not None
                    else Actuation(self._first_sleep(), cfg.initial_mps_pct, reason="fixed"))
        if self.metrics is not None:
            self.metrics.set_info(method=self.sleep.method)
            self.emit(event="metrics", url=self.metrics.url, textfile=cfg.metrics_textfile)

    # ------------------------------------------------------------------ the loop
    def _apply(self, act: Actuation) -> None:
        self.sleep.apply(act.sleep_s)
        if act.mps_changed and self.share is not None:
            self.share.apply(act.mps_pct)

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
        restarting = self.restarted or self.training.restarting()
        self.restarted = False
        if self.controller is not None:
            act = self.controller.update(st.to_measurement(restarting))
            self._apply(act)
        else:
            assert self.cfg.fixed_sleep is not None
            act = Actuation(self.cfg.fixed_sleep, self.cfg.fixed_mps or 100.0, reason="fixed")
            if self.hook is not None:
                self.hook.beat()
        duty = self.sleep.period(st.iter_mean_ms, st.iter_count)
        self._supervise()
        self._persist(act, closed_loop=self.controller is not None)
        silent_n, silent = self._silence(st.count, source_reason)
        gain = act.gain_estimate
        if not math.isfinite(gain) and self.controller is not None:
            gain = self.controller.model.gain
        reason = self.share.words(act.reason) if self.share is not None else act.reason
        rec: dict[str, Any] = dict(
            period=self.periods, **st.as_dict(), sleep_s=act.sleep_s, share_pct=act.mps_pct,
            share_changed=act.mps_changed, mps_pct=act.mps_pct, mps_changed=act.mps_changed,
            saturated=act.saturated, reason=reason,
            error_ms=act.error_ms, restarting=restarting, gain_estimate=gain,
            periods_without_samples=silent_n, inference_silent=silent)
        if self.cfg.latency_source == "prometheus":
            rec["source_reason"] = source_reason or None
        self.emit(**rec, **duty)  # emit updates the metrics before it writes the line

    def _supervise(self) -> None:
        """The guardian (restarted when it died), the sleep actuator's and the MPS daemon's
        state changes."""
        if self.guardian is not None and not self.guardian.alive():
            ok = self.guardian.ensure()
            self.emit(event="guardian_restarted", ok=ok)
        self._check_actuator()
        if self.mps is not None:
            for ev in self.mps.take_events():
                self.emit(**ev)

    def _silence(self, count: int, source_reason: str) -> tuple[int, bool]:
        """Count the periods without a report; one line and one event when they begin (with
        the source's reason, and where to look) and when they end."""
        silent_n, silent, change = self.silence.observe(count)
        if change == "silent":
            if self.controller is not None:  # open loop needs no reports
                why = f"the last scrape: {source_reason}; " if source_reason else ""
                self.say(f"no latency report for {silent_n} periods: {why}"
                         f"{self.monitor.where()}")
            self.emit(event="inference_silent", periods=silent_n)
        elif change == "resumed":
            self.emit(event="inference_resumed")
        return silent_n, silent

    def _source_reason(self) -> str:
        """The latency source's reason for this period (a scrape's, ``REASONS`` of
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

    # ------------------------------------------------------------------ the end
    def shutdown(self) -> None:
        """The undo path: every close registered by a start, in reverse order (the sleep
        first: everything is resumed before anything else is released); each runs even if
        one fails."""
        self.heartbeat.stopping(self.guardian)
        undo, self._undo = self._undo, contextlib.ExitStack()
        undo.close()
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1
        if self._emitted:  # a start refused before its first line writes none
            self.emit(event="stopped", periods=self.periods)
