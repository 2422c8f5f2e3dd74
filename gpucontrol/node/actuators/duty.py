"""The timing core of the sleep actuators: :class:`DutyCycler` and :class:`DutyStats`.

A duty cycler lets its targets run for a *run quantum* (about one training iteration) and then
holds them paused for the commanded sleep, so the stopped fraction is
``sleep_s / (run_quantum_s + sleep_s)``. Subclasses say how to pause
(:class:`~gpucontrol.node.actuators.sleep.SignalDutyCycler`,
:class:`~gpucontrol.node.actuators.cgroup.CgroupFreezer`).

Timing uses absolute deadlines: cycle *k* pauses at ``t0 + k (q + s) + q``; a late wake-up
shortens the next phase instead of drifting, so the achieved stopped fraction over many cycles
tracks the commanded one. Every cycler measures what it achieved and how long a pause or a
resume took (:meth:`DutyCycler.stats`). Any failure inside the timing thread resumes the
targets and stops pausing (``error`` says why).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucontrol._validate import in_range, positive

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

__all__ = ["DutyCycler", "DutyStats"]


def _quantile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank quantile; NaN for no data."""
    if not xs:
        return math.nan
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))
    return s[k]


@dataclass(frozen=True)
class DutyStats:
    """What a cycler achieved over a window (since the last reset).

    Fractions are of wall-clock time; latencies are in milliseconds (time to issue the pause
    or resume to every target).

    Parameters
    ----------
    window_s : float
        Length of the window, s.
    commanded_fraction : float
        Stopped fraction commanded, ``sleep_s / (run_quantum_s + sleep_s)``.
    achieved_fraction : float
        Stopped fraction measured over the window.
    cycles : int
        Completed pause/resume cycles in the window.
    pause_p50_ms, pause_p99_ms : float
        Median and p99 time to pause every target, ms.
    resume_p50_ms, resume_p99_ms : float
        Median and p99 time to resume every target, ms.
    targets : int
        Number of targets at the end of the window.
    """

    window_s: float
    commanded_fraction: float
    achieved_fraction: float
    cycles: int
    pause_p50_ms: float
    pause_p99_ms: float
    resume_p50_ms: float
    resume_p99_ms: float
    targets: int

    @property
    def error(self) -> float:
        """Achieved minus commanded stopped fraction."""
        return self.achieved_fraction - self.commanded_fraction


#: How often the gate is consulted again while the targets are paused, seconds: a guardian
#: that dies during a long pause no longer leaves the rest of it unguarded.
GATE_POLL_S = 0.05


class DutyCycler:
    """Base class: the timing thread and the bookkeeping; subclasses say how to pause.

    Parameters
    ----------
    run_quantum_s : float
        How long the targets run between two pauses (about one training iteration), > 0.
    sleep_s : float
        Initial commanded sleep per quantum (0 = never pause), in ``[0, max_sleep_s]``.
    max_sleep_s : float
        Upper bound accepted by :meth:`set_sleep`.
    refresh_s : float
        How often the target set is re-read (new descendants, cgroup members).
    gate : callable, optional
        Consulted before every pause, and every :data:`GATE_POLL_S` during one; when it
        returns False the cycle is skipped, or the pause ended at once, and the targets keep
        running (the daemon uses it to pause only while its guardian is alive).
    name : str
        Name of the timing thread.
    """

    def __init__(self, *, run_quantum_s: float = 0.2, sleep_s: float = 0.0,
                 max_sleep_s: float = 60.0, refresh_s: float = 1.0,
                 gate: Callable[[], bool] | None = None, name: str = "gpucontrol-duty") -> None:
        self.max_sleep_s = positive("max_sleep_s", max_sleep_s)
        self._quantum = positive("run_quantum_s", run_quantum_s)
        self._sleep = in_range("sleep_s", sleep_s, 0.0, self.max_sleep_s)
        self.refresh_s = positive("refresh_s", refresh_s)
        self.gate = gate
        self.name = name
        self._cond = threading.Condition(threading.RLock())
        self._thread: threading.Thread | None = None
        self._stop_req = False
        self._paused = False
        self._paused_at = 0.0
        self._next_pause: float | None = None
        self._next_refresh = 0.0
        self._suspended = False
        self._held = False
        self.error: str | None = None
        self._reset_window(time.monotonic())

    # ---------------------------------------------------------------- subclass interface
    def _do_pause(self) -> None:
        raise NotImplementedError

    def _do_resume(self) -> None:
        raise NotImplementedError

    def _refresh(self) -> None:
        """Re-read the target set (called in the running phase only)."""

    def _has_targets(self) -> bool:
        return True

    def identities(self) -> list[dict]:
        """What a guardian needs to resume the targets (pid/start pairs or cgroup paths)."""
        return []

    # ---------------------------------------------------------------- commands
    @property
    def sleep_s(self) -> float:
        return self._sleep

    @property
    def run_quantum_s(self) -> float:
        return self._quantum

    @property
    def commanded_fraction(self) -> float:
        return self._sleep / (self._quantum + self._sleep)

    @property
    def lock(self) -> threading.Condition:
        """The cycler's lock: while it is held the target set cannot change and nothing is
        paused or resumed (a caller writing the state file takes it first)."""
        return self._cond

    @property
    def paused(self) -> bool:
        return self._paused

    def set_sleep(self, sleep_s: float) -> None:
        """Command a new sleep per quantum; takes effect at once (a pause in progress is
        shortened or lengthened)."""
        s = in_range("sleep_s", sleep_s, 0.0, self.max_sleep_s)
        with self._cond:
            self._account_command(time.monotonic())
            self._sleep = s
            self._cond.notify_all()

    def set_run_quantum(self, run_quantum_s: float) -> None:
        q = positive("run_quantum_s", run_quantum_s)
        with self._cond:
            self._account_command(time.monotonic())
            self._quantum = q
            self._cond.notify_all()

    def suspend(self, on: bool = True) -> None:
        """Resume the targets and stop pausing them until ``suspend(False)`` (used around a
        restart: a paused process cannot handle SIGTERM)."""
        with self._cond:
            self._suspended = bool(on)
            if on and self._paused:
                self.resume_now()
            self._cond.notify_all()

    # ---------------------------------------------------------------- direct actuation
    def pause_now(self) -> float:
        """Pause every target now; returns the time it took (s)."""
        with self._cond:
            t0 = time.perf_counter()
            self._do_pause()
            dt = time.perf_counter() - t0
            if not self._paused:
                self._paused = True
                self._paused_at = time.monotonic()
                self._cycles += 1
            self._pause_lat.append(dt)
            return dt

    def resume_now(self) -> float:
        """Resume every target now; returns the time it took (s)."""
        with self._cond:
            t0 = time.perf_counter()
            self._do_resume()
            dt = time.perf_counter() - t0
            if self._paused:
                self._paused = False
                self._stopped_total += time.monotonic() - self._paused_at
            self._resume_lat.append(dt)
            return dt

    # ---------------------------------------------------------------- statistics
    def _reset_window(self, now: float) -> None:
        self._window_start = now
        self._stopped_total = 0.0
        self._cmd_integral = 0.0
        self._cmd_since = now
        self._cycles = 0
        self._pause_lat: deque[float] = deque(maxlen=20000)
        self._resume_lat: deque[float] = deque(maxlen=20000)
        if self._paused:
            self._paused_at = now

    def _account_command(self, now: float) -> None:
        # while held (nothing may be paused) the cycler commands nothing: report 0
        cmd = 0.0 if self._held else self.commanded_fraction
        self._cmd_integral += cmd * (now - self._cmd_since)
        self._cmd_since = now

    def stats(self, reset: bool = True) -> DutyStats:
        """Achieved vs commanded stopped fraction and pause/resume latency since the last
        reset (the commanded fraction is time-weighted over the window)."""
        with self._cond:
            now = time.monotonic()
            self._account_command(now)
            window = now - self._window_start
            stopped = self._stopped_total + (now - self._paused_at if self._paused else 0.0)
            p = list(self._pause_lat)
            r = list(self._resume_lat)
            out = DutyStats(
                window_s=window,
                commanded_fraction=self._cmd_integral / window if window > 0 else math.nan,
                achieved_fraction=stopped / window if window > 0 else math.nan,
                cycles=self._cycles,
                pause_p50_ms=1e3 * _quantile(p, 0.50), pause_p99_ms=1e3 * _quantile(p, 0.99),
                resume_p50_ms=1e3 * _quantile(r, 0.50), resume_p99_ms=1e3 * _quantile(r, 0.99),
                targets=len(self.identities()))
            if reset:
                self._reset_window(now)
            return out

    # ---------------------------------------------------------------- the timing thread
    def start(self) -> Self:
        with self._cond:
            if self._thread is not None:
                return self
            self._stop_req = False
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop cycling and leave every target running (always resumes, even on error)."""
        with self._cond:
            self._stop_req = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            self._thread = None
            self.resume_now()

    def close(self) -> None:
        """Stop cycling and resume the targets (what :meth:`stop` does; subclasses also
        release what they hold)."""
        self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _maybe_refresh(self, now: float, force: bool = False) -> None:
        if force or now >= self._next_refresh:
            self._next_refresh = now + self.refresh_s
            try:
                self._refresh()
            except OSError as exc:
                # the state file could not be written ahead of a new target's first pause
                # (ENOSPC, EACCES...): hold every target running, retry at every refresh
                self._set_held(f"write-ahead failed, holding: {type(exc).__name__}: {exc}")
            except Exception as exc:
                # a refused member: pausing on would break a guarantee
                self.error = f"{type(exc).__name__}: {exc}"
                self._stop_req = True
            else:
                if self._held:
                    self._set_held(None)

    @property
    def held(self) -> bool:
        """True while a failed write-ahead keeps the targets running (retried every
        ``refresh_s``; ``error`` says why)."""
        return self._held

    def _set_held(self, why: str | None) -> None:
        with self._cond:
            self._account_command(time.monotonic())
            self._held = why is not None
            self.error = why
            if self._held and self._paused:
                self.resume_now()
            self._cond.notify_all()

    def _loop(self) -> None:
        try:
            self._run()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._cond:
                if self._paused:
                    try:
                        self.resume_now()
                    except Exception as exc:
                        self.error = f"resume failed: {exc}"

    def _run(self) -> None:
        c = self._cond
        with c:
            while not self._stop_req:
                now = time.monotonic()
                if (self._sleep <= 0.0 or self._suspended or self._held
                        or not self._has_targets()):
                    if self._paused:
                        self.resume_now()
                    self._next_pause = None
                    self._maybe_refresh(now)
                    c.wait(min(self.refresh_s, 0.5))
                    continue
                if self._next_pause is None:
                    self._next_pause = now + self._quantum
                if now < self._next_pause:
                    # run phase; refresh while the targets run, not while they are paused
                    if now >= self._next_refresh and self._next_pause - now > 0.02:
                        self._maybe_refresh(now)
                        continue
                    c.wait(self._next_pause - now)
                    continue
                if self.gate is not None and not self.gate():
                    self._next_pause = now + self._quantum
                    continue
                if now >= self._next_refresh + self.refresh_s:  # run phases too short
                    self._maybe_refresh(now)
                    if self._stop_req:
                        break
                    if self._held:
                        continue
                self.pause_now()
                pause_sched = self._next_pause
                resume_at = pause_sched + self._sleep
                while not (self._stop_req or self._suspended or self._held):
                    resume_at = pause_sched + self._sleep
                    left = resume_at - time.monotonic()
                    if left <= 0 or (self.gate is not None and not self.gate()):
                        break  # over, or the gate closed (the guardian died): resume now
                    c.wait(left if self.gate is None else min(left, GATE_POLL_S))
                self.resume_now()
                now = time.monotonic()
                self._next_pause = resume_at + self._quantum
                if self._next_pause < now:  # badly late (overload): re-anchor
                    self._next_pause = now + self._quantum
