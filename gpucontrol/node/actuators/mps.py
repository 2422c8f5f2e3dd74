"""The MPS knob: the training's active-thread percentage.

The knob of the GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-B and VI.

MPS fixes a client's share when the client starts (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``), so
a new percentage means restarting the training process. Two pieces:

* :class:`MPSControl` -- a client for the ``nvidia-cuda-mps-control`` binary: start a private
  control daemon with its own pipe and log directories (never the system's), get/set the
  default active thread percentage, list servers and clients, health check,
  ``terminate_client`` and ``quit``. No GPU package is imported: everything goes through the
  binary.
* :class:`MPSActuator` -- runs the training through a user-supplied launcher (command and
  environment) and applies a new percentage by restarting it, optionally with a *shadow*
  pre-start: start the new process, wait for its ready signal
  (:func:`gpucontrol.node.hooks.notify_ready`, sent by the first ``after_iteration()``), and only
  then stop the old one. It measures the downtime of every restart. A new process waits at a
  gate until ``on_spawn`` has recorded it (the daemon lists it in its state file, so its
  guardian ends it if the daemon dies); if the launcher dies first, the gate's pipe closes and
  the process exits before the training starts, so no training is ever left unowned.

When the binary is absent, :meth:`MPSControl.available` is False and the daemon says so once
and runs sleep-only.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucontrol._validate import in_range, positive
from gpucontrol.errors import MPSError, MPSUnavailable
from gpucontrol.node.actuators.procs import account_spec
from gpucontrol.node.records import end_group_rest

#: Run between fork and the training's exec: wait for the owner's go byte on the descriptor
#: ``argv[1]``, then exec the training in the same process (its PID and start time, which the
#: owner recorded, stay); end at once if the owner died before saying go. The ready descriptor
#: is tied to this PID (``GPUCONTROL_READY_PID``): only the training itself may signal on it.
#: The training does not keep the daemon's raised priority or OOM protection (the systemd unit
#: gives the daemon Nice=-5, OOMScoreAdjust=-500): a negative niceness or oom_score_adj is
#: reset to 0 (a positive one, a deliberately lowered daemon, is kept).
_GATE = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "try:\n"
    "    go = os.read(fd, 1)\n"
    "except OSError:\n"
    "    go = b''\n"
    "os.close(fd)\n"
    "if go != b'1':\n"
    "    os._exit(125)\n"
    "try:\n"
    "    if os.getpriority(os.PRIO_PROCESS, 0) < 0:\n"
    "        os.setpriority(os.PRIO_PROCESS, 0, 0)\n"
    "except OSError:\n"
    "    pass\n"
    "try:\n"
    "    with open('/proc/self/oom_score_adj', 'r+') as f:\n"
    "        if int(f.read() or 0) < 0:\n"
    "            f.seek(0)\n"
    "            f.write('0')\n"
    "except (OSError, ValueError):\n"
    "    pass\n"
    "if sys.argv[2]:\n"
    "    uid, gid, name, home = sys.argv[2].split(':', 3)\n"
    "    os.initgroups(name, int(gid))\n"
    "    os.setgid(int(gid))\n"
    "    os.setuid(int(uid))\n"
    "    os.environ.update(USER=name, LOGNAME=name, HOME=home)\n"
    "if 'GPUCONTROL_READY_FD' in os.environ:\n"
    "    os.environ['GPUCONTROL_READY_PID'] = str(os.getpid())\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

__all__ = [
    "DEFAULT_BINARY",
    "MPSActuator",
    "MPSControl",
    "MPSError",
    "MPSUnavailable",
    "RestartResult",
]

DEFAULT_BINARY = "nvidia-cuda-mps-control"


class MPSControl:
    """Client of one MPS control daemon (private by default).

    Parameters
    ----------
    binary : str
        The control binary (name on PATH or a path).
    pipe_dir, log_dir : path, optional
        ``CUDA_MPS_PIPE_DIRECTORY`` / ``CUDA_MPS_LOG_DIRECTORY``. When ``pipe_dir`` is None,
        :meth:`start` creates private temporary directories (mode 0700) and :meth:`quit`
        removes them; pass an existing daemon's pipe directory to talk to it instead (it is
        then never started or quit by us unless asked).
    timeout_s : float
        Limit for every command.

    Examples
    --------
    >>> MPSControl(binary="/nonexistent/nvidia-cuda-mps-control").available()
    False
    """

    def __init__(self, binary: str = DEFAULT_BINARY, *, pipe_dir: str | None = None,
                 log_dir: str | None = None, timeout_s: float = 10.0) -> None:
        self.binary = binary
        self.pipe_dir = pipe_dir
        self.log_dir = log_dir
        self.timeout_s = positive("timeout_s", timeout_s)
        self._private_root: str | None = None
        self.started = False

    # ------------------------------------------------------------------ environment
    def path(self) -> str | None:
        """Absolute path of the binary, or None when it is not installed."""
        if os.sep in self.binary:
            return self.binary if os.access(self.binary, os.X_OK) else None
        return shutil.which(self.binary)

    def available(self) -> bool:
        return self.path() is not None

    def env(self) -> dict[str, str]:
        """The variables a client (training or inference) needs to join this daemon."""
        out: dict[str, str] = {}
        if self.pipe_dir:
            out["CUDA_MPS_PIPE_DIRECTORY"] = self.pipe_dir
        if self.log_dir:
            out["CUDA_MPS_LOG_DIRECTORY"] = self.log_dir
        return out

    def _require(self) -> str:
        p = self.path()
        if p is None:
            raise MPSUnavailable(f"{self.binary} not found: MPS is unavailable on this machine")
        return p

    # ------------------------------------------------------------------ daemon lifecycle
    def start(self) -> Self:
        """Start a control daemon (``-d``) in private directories, and wait until it answers."""
        binary = self._require()
        self.make_private_dirs()
        env = {**os.environ, **self.env()}
        try:
            r = subprocess.run([binary, "-d"], env=env, capture_output=True, text=True,
                               timeout=self.timeout_s, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            self.started = True  # it may be up all the same: quit() then tries `quit`
            raise MPSError(f"{binary} -d did not return within {self.timeout_s:g} s") from None
        if r.returncode != 0:
            raise MPSError(f"{binary} -d failed ({r.returncode}): {r.stderr.strip()}")
        self.started = True
        deadline = time.monotonic() + self.timeout_s
        while not self.health():
            if time.monotonic() > deadline:
                raise MPSError("the MPS control daemon did not come up")
            time.sleep(0.05)
        return self

    def make_private_dirs(self) -> None:
        """Create the private pipe and log directories (mode 0700) when no ``pipe_dir`` was
        given; :meth:`start` does it, a caller that records them first may call it before."""
        if self.pipe_dir is not None:
            return
        self._private_root = tempfile.mkdtemp(prefix="gpucontrol-mps-")
        os.chmod(self._private_root, 0o700)
        self.pipe_dir = os.path.join(self._private_root, "pipe")
        self.log_dir = os.path.join(self._private_root, "log")
        os.mkdir(self.pipe_dir, 0o700)
        os.mkdir(self.log_dir, 0o700)

    def record(self) -> dict[str, str | None]:
        """What :func:`gpucontrol.node.records.quit_mps` needs to quit this daemon and
        remove its private directories (for the state file)."""
        return {"binary": self.path(), "pipe_dir": self.pipe_dir, "log_dir": self.log_dir,
                "root": self._private_root}

    def command(self, line: str) -> str:
        """Send one command to the control daemon; returns its output (stripped)."""
        binary = self._require()
        if "\n" in line:
            raise ValueError("one command per call")
        env = {**os.environ, **self.env()}
        try:
            r = subprocess.run([binary], input=line + "\n", env=env, capture_output=True,
                               text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise MPSError(f"MPS command {line!r} timed out after {self.timeout_s:g} s") from None
        if r.returncode != 0:
            raise MPSError(f"MPS command {line!r} failed ({r.returncode}): "
                           f"{(r.stderr or r.stdout).strip()}")
        return r.stdout.strip()

    def health(self) -> bool:
        """True when the control daemon answers ``get_server_list``."""
        try:
            self.server_list()
            return True
        except (MPSError, ValueError, OSError):
            return False

    def server_list(self) -> list[int]:
        return [int(x) for x in self.command("get_server_list").split()]

    def client_list(self, server_pid: int) -> list[int]:
        return [int(x) for x in self.command(f"get_client_list {int(server_pid)}").split()]

    def get_default_active_thread_percentage(self) -> float:
        out = self.command("get_default_active_thread_percentage")
        try:
            return float(out.split()[-1])
        except (ValueError, IndexError):
            raise MPSError(f"unexpected answer to get_default_active_thread_percentage: "
                           f"{out!r}") from None

    def set_default_active_thread_percentage(self, pct: float) -> float:
        """Set the default for servers spawned from now on; returns the value read back."""
        p = in_range("pct", pct, 1.0, 100.0)
        self.command(f"set_default_active_thread_percentage {p:g}")
        return self.get_default_active_thread_percentage()

    def terminate_client(self, server_pid: int, client_pid: int) -> None:
        self.command(f"terminate_client {int(server_pid)} {int(client_pid)}")

    def quit(self) -> None:
        """Stop the daemon we started (``quit``) and remove private directories.

        When ``quit`` fails while the daemon's control pipe is still there, the private
        directories are kept: without its pipe directory a daemon that is still running can
        no longer be told to quit (the error names the directory; ``echo quit |
        CUDA_MPS_PIPE_DIRECTORY=<pipe> nvidia-cuda-mps-control`` stops it, and the campaign
        runner's sweep of leftover private daemons finds it)."""
        keep = False
        try:
            if self.started:
                self.command("quit")
        except (MPSError, OSError):
            keep = self.pipe_dir is not None and os.path.exists(
                os.path.join(self.pipe_dir, "control"))
            raise
        finally:
            self.started = False
            if self._private_root is not None and not keep:
                shutil.rmtree(self._private_root, ignore_errors=True)
                self._private_root = None
                self.pipe_dir = self.log_dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.quit()


@dataclass(frozen=True)
class RestartResult:
    """One MPS change, as :meth:`MPSActuator.apply` reports it.

    Parameters
    ----------
    old_pct, new_pct : float
        MPS active-thread percentage before and after.
    old_pid, new_pid : int or None
        Training process before and after (None where there was none).
    shadow : bool
        Whether the new process was pre-started (shadow restart).
    downtime_s : float
        Time with no ready training process running (old one gone, new one not yet ready).
    overlap_s : float
        Time both processes ran (shadow mode).
    total_s : float
        Duration of the whole change.
    ok : bool
        Whether the new process runs at ``new_pct``.
    error : str
        What went wrong when not ``ok``.
    """

    old_pct: float
    new_pct: float
    old_pid: int | None
    new_pid: int | None
    shadow: bool
    downtime_s: float
    overlap_s: float
    total_s: float
    ok: bool
    error: str = ""


class MPSActuator:
    """Run the training through a launcher and restart it with a new MPS percentage.

    Parameters
    ----------
    argv : sequence of str
        The training command.
    env : mapping, optional
        Extra environment for the training (on top of ours).
    mps : MPSControl, optional
        Its :meth:`~MPSControl.env` joins the training to that daemon.
    shadow : bool
        Start the new process first and stop the old one only when the new one is ready.
    ready : "notify" or "spawn"
        ``"notify"``: ready when the process writes to ``$GPUCONTROL_READY_FD`` (the first
        ``gpucontrol.node.hooks.after_iteration()`` does), or after ``ready_timeout_s``;
        ``"spawn"``: ready as soon as it started.
    ready_timeout_s : float
        The longest wait for ``"notify"``, s, > 0.
    stop_timeout_s : float
        SIGTERM, then SIGKILL after this long.
    cwd : str or None
        Working directory of the training (None: ours).
    on_spawn : callable, optional
        Called with the new PID right after each start, before the training itself runs (it
        waits at a gate until this returns; e.g. to record it, or move it into a cgroup).
    before_terminate : callable, optional
        Called with the old PID just before it is stopped (e.g. to stop pausing it: a paused
        process cannot handle SIGTERM).
    cancel_fd : int or None
        A descriptor that becomes readable when the owner stops (the daemon's stop pipe):
        every wait for a ready signal ends at once, and the process being started is stopped.
    user : str or None
        Run the training as this user (a name or a uid; needs root): after the gate, its
        groups, gid and uid become the user's, and ``USER``, ``LOGNAME`` and ``HOME`` are set
        from the account.
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 mps: MPSControl | None = None, shadow: bool = False, ready: str = "notify",
                 ready_timeout_s: float = 120.0, stop_timeout_s: float = 30.0,
                 cwd: str | None = None, on_spawn: Callable[[int], None] | None = None,
                 before_terminate: Callable[[int], None] | None = None,
                 cancel_fd: int | None = None, user: str | None = None) -> None:
        if not argv:
            raise ValueError("argv must name the training command")
        if ready not in ("notify", "spawn"):
            raise ValueError(f"ready must be 'notify' or 'spawn', got {ready!r}")
        self.argv = list(argv)
        self.env = dict(env or {})
        self.mps = mps
        self.shadow = bool(shadow)
        self.ready = ready
        self.ready_timeout_s = positive("ready_timeout_s", ready_timeout_s)
        self.stop_timeout_s = positive("stop_timeout_s", stop_timeout_s)
        self.cwd = cwd
        self.on_spawn = on_spawn
        self.before_terminate = before_terminate
        self.cancel_fd = cancel_fd
        self._account = account_spec(user) if user is not None else ""
        self.proc: subprocess.Popen | None = None
        self.mps_pct: float | None = None
        self.history: list[RestartResult] = []
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _spawn(self, pct: float) -> tuple[subprocess.Popen, int]:
        env = {**os.environ, **self.env}
        if self.mps is not None:
            env.update(self.mps.env())
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = f"{pct:g}"
        if shutil.which(self.argv[0], path=env.get("PATH")) is None and not (
                os.sep in self.argv[0] and os.access(
                    os.path.join(self.cwd or "", self.argv[0]), os.X_OK)):
            raise FileNotFoundError(2, "training command not found", self.argv[0])
        r, w = os.pipe()
        gate_r, gate_w = os.pipe()
        env["GPUCONTROL_READY_FD"] = str(w)
        env.pop("GPUCONTROL_READY_PID", None)  # set by the gate to the training's own PID
        try:
            p = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GATE, str(gate_r),
                                  self._account, *self.argv], env=env, cwd=self.cwd,
                                 pass_fds=(w, gate_r), stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        except BaseException:
            os.close(r)
            os.close(gate_w)
            raise
        finally:
            os.close(w)
            os.close(gate_r)
        try:
            if self.on_spawn is not None:
                self.on_spawn(p.pid)
            os.write(gate_w, b"1")       # recorded: now the training may start
        except BaseException:  # e.g. it could not be moved into its cgroup: not started
            os.close(r)
            os.close(gate_w)
            p.kill()
            p.wait()
            raise
        os.close(gate_w)
        return p, r

    def cancelled(self) -> bool:
        """Whether ``cancel_fd`` says the owner is stopping."""
        if self.cancel_fd is None or self.cancel_fd < 0:
            return False
        try:
            return bool(select.select([self.cancel_fd], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def _wait_ready(self, p: subprocess.Popen, r: int) -> bool:
        """Wait for the ready byte (or readiness by policy); False if the process died or
        the wait was cancelled (the process then still runs: the caller stops it)."""
        try:
            if self.ready == "spawn":
                return p.poll() is None
            deadline = time.monotonic() + self.ready_timeout_s
            fds = [r] if self.cancel_fd is None or self.cancel_fd < 0 else [r, self.cancel_fd]
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return p.poll() is None  # no notification: ready by timeout
                ok, _, _ = select.select(fds, [], [], min(left, 0.1))
                if self.cancelled():
                    return False
                if ok:
                    if os.read(r, 1):
                        return True
                    # EOF without the byte: the process is exiting (its fds close before it
                    # is reaped), or it closed the descriptor and can no longer notify
                    try:
                        p.wait(1.0)
                        return False
                    except subprocess.TimeoutExpired:
                        return True
                if p.poll() is not None:
                    return False
        finally:
            os.close(r)

    def _terminate(self, p: subprocess.Popen) -> None:
        """End a training and the workers it forked: it leads its own process group (and
        session), so SIGCONT (a paused process cannot handle SIGTERM), SIGTERM and, after
        ``stop_timeout_s``, SIGKILL go to the group; members that outlive the leader are
        ended after it (only here, right after we reaped the leader: while a member lives,
        the group's number cannot be reused)."""
        if p.returncode is not None:  # reaped before: its group's number may be another's
            return
        if p.poll() is not None:  # it ended by itself; reaped just now: end what it left
            end_group_rest(p.pid, min(self.stop_timeout_s, 5.0))
            return
        if self.before_terminate is not None:
            self.before_terminate(p.pid)
        try:  # not reaped yet (we are its parent): the group is still the leader's
            for sig in (signal.SIGCONT, signal.SIGTERM):
                os.killpg(p.pid, sig)
        except OSError:  # it left its group: the process alone
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.terminate()
        try:
            p.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
            p.kill()
            p.wait()
        end_group_rest(p.pid, min(self.stop_timeout_s, 5.0))

    def start(self, pct: float, wait_ready: bool = True) -> int:
        """Launch the training at ``pct`` (1..100) and (unless ``wait_ready`` is false) wait
        until it is ready; its PID."""
        pct = in_range("mps_pct", pct, 1.0, 100.0)
        with self._lock:
            if self.running():
                raise RuntimeError("training already running; use apply()")
            p, r = self._spawn(pct)
            if not wait_ready:
                os.close(r)
                r = -1
            if r >= 0 and not self._wait_ready(p, r):
                if p.poll() is None:  # cancelled: the owner is stopping
                    self._terminate(p)
                    raise RuntimeError("training start-up cancelled")
                raise RuntimeError(f"training exited during start-up (code {p.returncode})")
            self.proc, self.mps_pct = p, pct
            return p.pid

    def apply(self, pct: float) -> RestartResult:
        """Restart the training with ``pct``; on failure the old percentage is restored
        (shadow: the old process simply keeps running)."""
        pct = in_range("mps_pct", pct, 1.0, 100.0)
        with self._lock:
            old, old_pct = self.proc, self.mps_pct if self.mps_pct is not None else pct
            old_pid = old.pid if old is not None else None
            t0 = time.monotonic()
            if self.shadow and old is not None and old.poll() is None:
                p: subprocess.Popen | None = None
                try:
                    p, r = self._spawn(pct)
                    ok = self._wait_ready(p, r)
                except OSError as exc:
                    p, ok, err = None, False, str(exc)
                else:
                    err = "" if ok else f"new process exited (code {p.returncode})"
                t_ready = time.monotonic()
                if not ok or p is None:
                    if p is not None:
                        self._terminate(p)
                    res = RestartResult(old_pct, pct, old_pid, old_pid, True, 0.0, 0.0,
                                        t_ready - t0, False, err)
                    self.history.append(res)
                    return res
                self._terminate(old)
                t_end = time.monotonic()
                self.proc, self.mps_pct = p, pct
                res = RestartResult(old_pct, pct, old_pid, p.pid, True, 0.0, t_end - t_ready,
                                    t_end - t0, True)
                self.history.append(res)
                return res
            if old is not None:
                self._terminate(old)
            t_gone = time.monotonic()
            res = self._restart_cold(pct, old_pct, old_pid, t0, t_gone)
            self.history.append(res)
            return res

    def _restart_cold(self, pct: float, old_pct: float, old_pid: int | None, t0: float,
                      t_gone: float) -> RestartResult:
        self.proc = None  # the old process is gone: nothing runs until a start succeeds
        err = ""
        for attempt_pct in (pct, old_pct):
            try:
                p, r = self._spawn(attempt_pct)
                ok = self._wait_ready(p, r)
            except OSError as exc:
                ok, err = False, str(exc)
                continue
            if ok:
                t = time.monotonic()
                self.proc, self.mps_pct = p, attempt_pct
                return RestartResult(old_pct, attempt_pct, old_pid, p.pid, False, t - t_gone,
                                     0.0, t - t0, attempt_pct == pct, err)
            self.proc = None
            if p.poll() is None:  # cancelled: the owner is stopping
                self._terminate(p)
                err = "cancelled"
                break
            err = f"new process exited (code {p.returncode})"
        t = time.monotonic()
        return RestartResult(old_pct, pct, old_pid, None, False, t - t_gone, 0.0, t - t0,
                             False, err)

    def stop(self) -> None:
        """Stop the training (SIGCONT, SIGTERM, then SIGKILL after ``stop_timeout_s``)."""
        with self._lock:
            if self.proc is not None:
                self._terminate(self.proc)
