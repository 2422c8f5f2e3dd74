"""The daemon's life: set up, loop one period at a time, stop on a signal, shut down (a mixin
of :class:`gpucontrol.node.daemon.Daemon`).

Stopping is a flag and a self-pipe, never a lock: a signal handler must not take a lock the
interrupted main thread may hold. The loop waits for the next period on the pipe, beating the
heartbeat (guardian, systemd watchdog, ``/healthz``) several times per period; periods are
scheduled on absolute deadlines. Whatever happens -- a stop, the duration, the training's end,
a set-up error, a bug in the loop -- :meth:`Daemon.shutdown` runs: everything is resumed
before anything is released.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from gpucontrol.errors import ControlLoopError
from gpucontrol.node.logsink import LogSink, open_log

__all__ = ["DaemonLoop"]

logger = logging.getLogger(__name__)


class DaemonLoop:
    """Mixin: :meth:`run`, the period loop and the stop request."""

    cfg: Any
    heartbeat: Any
    guardian: Any
    training: Any
    sleep: Any
    periods: int
    log_file: TextIO
    _own_log: bool
    _sink: LogSink | None
    _emitted: bool
    _ran: bool
    _stopping: bool
    _stop_signal: int | None
    _stop_r: int
    _stop_w: int
    _training_failed: bool = False  # the launched training exited non-zero or was killed

    emit: Callable[..., None]  # the daemon's event log
    say: Callable[[str], None]  # an operator line
    setup: Callable[[], None]  # the ordered starts
    step: Callable[[], None]  # one control period
    shutdown: Callable[[], None]  # the one undo path

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

    def training_alive(self) -> bool:
        """Whether the training still runs (an MPS restart in progress counts)."""
        return bool(self.training.alive())

    def run(self) -> int:
        """Set up, loop until SIGTERM/SIGINT, the duration, or the training ending.

        Returns
        -------
        int
            The exit status of a clean stop: 0, or 130 when SIGINT asked for it (the shell's
            status of a Ctrl-C), or 1 when the training the daemon launched ended by itself
            and failed (exit status not 0, or killed by a signal); setup errors raise. A
            start refused before anything was logged writes nothing: no line, and a ``log``
            file it created is removed again.

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
        if self._stop_signal == signal.SIGINT:
            return 128 + signal.SIGINT
        return 1 if self._training_failed else 0

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
            self.heartbeat.ready(f"controlling {self.sleep.method} targets")
            try:
                self._loop()
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

    def _loop(self) -> None:
        """Periods on absolute deadlines until a stop, the duration or the training's end.

        ``--duration-s D``: floor(D / T) whole periods (the last one included), and at least
        D seconds (D < T: no period).
        """
        t0 = time.monotonic()
        duration, period = self.cfg.duration_s, self.cfg.period_s
        left = math.floor(duration / period + 1e-9) if duration else math.inf
        nxt = t0 + period
        while not self._stopping:
            if left <= 0:
                if duration:
                    self._wait_beating(t0 + duration)
                return
            self._wait_beating(nxt)
            if self._stopping:
                return
            self.step()
            left -= 1
            nxt += period
            if nxt < time.monotonic():
                nxt = time.monotonic() + period
            if not self.training_alive():
                self._training_ended()
                return

    def _training_ended(self) -> None:
        """The training ended by itself: log how (``training_finished``), one stderr line;
        a launched training that failed (exit status not 0, or killed by a signal) makes the
        daemon's exit status 1 (:meth:`_exit_status`)."""
        status = self.training.end_status()
        self._training_failed = bool(status["failed"])
        self.emit(event="training_finished", pids=list(self.training.pids), **status)
        how = (f"could not be started again by an MPS restart ({status['restart_error']})"
               if status["restart_error"] else
               f"was killed by {status['signal']}" if status["signal"] else
               f"exited with status {status['exit_code']}" if status["exit_code"] is not None
               else "ended (its exit status is its parent's to read)")
        line = f"the training (pid {', '.join(map(str, self.training.pids))}) {how}"
        if self._training_failed:
            self.say(line)
        else:
            logger.info("%s", line)
