"""Crash safety: whatever happens to the daemon, no training process stays paused.

Two mechanisms:

* **State file** (JSON, mode 0600, replaced atomically). Before the daemon pauses a process or
  freezes a cgroup it writes it here -- ``{"pid", "start"}`` identities (PID plus start time,
  so a recycled PID is never touched), cgroup paths, and the hook file. On start-up a daemon
  resumes everything a previous run left listed (:func:`resume_state`); a graceful shutdown
  resumes and removes the file.
* **Guardian**: a small separate process (stdlib only, in its own session, started before the
  first pause) that holds a pidfd on the daemon and blocks in ``poll``. When the daemon exits
  by any means -- SIGKILL included -- the pidfd becomes readable and the guardian resumes
  every listed process, thaws the cgroups and zeroes the hook file, within milliseconds.
  Where pidfds are missing it falls back to ``PR_SET_PDEATHSIG``. The daemon pauses only
  while its guardian is alive (the duty cycler's gate) and starts a new one if it dies.

Run by the daemon as ``python -I -S .../gpucontrol/guardian.py --daemon-pid PID --state FILE``;
it loads its few helpers by path so that it starts in about 0.1 s without importing numpy.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

STATE_VERSION = 1


def _sibling(relpath: str) -> ModuleType:
    """Import a stdlib-only sibling module: normally through the package, by path when this
    file runs as a script (so the guardian does not import the package and numpy)."""
    if __package__:
        return importlib.import_module("gpucontrol.node." + relpath.removesuffix(".py")
                                       .replace("/", "."))
    name = "_gpucontrol_" + relpath.replace("/", "_").removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / relpath)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------ state file
def write_state(path: str | os.PathLike[str], targets: Iterable[dict], *,
                hook: str | None = None, extra: dict[str, Any] | None = None) -> None:
    """Atomically write the state file (0600): the daemon's identity and its targets."""
    procs = _sibling("actuators/procs.py")
    runtime = _sibling("_runtime.py")
    me = procs.read_stat(os.getpid())
    doc = {"version": STATE_VERSION, "daemon_pid": os.getpid(),
           "daemon_start": me.start_ticks if me else None, "written": time.time(),
           "targets": list(targets), "hook": hook, **(extra or {})}
    runtime.write_private_atomic(path, json.dumps(doc).encode())


def read_state(path: str | os.PathLike[str]) -> dict | None:
    """Read a state file; None when absent. Raises ValueError when it is not ours (owner,
    mode) or not a state file -- such a file is never acted on."""
    runtime = _sibling("_runtime.py")
    try:
        doc = json.loads(runtime.read_private_file(path, 1 << 20))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a state file: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION or not isinstance(
            doc.get("targets"), list):
        raise ValueError(f"{path} is not a gpucontrol state file (version {STATE_VERSION})")
    return doc


def state_owner_alive(doc: dict) -> bool:
    """Whether the daemon that wrote ``doc`` is still running (same pid and start time)."""
    procs = _sibling("actuators/procs.py")
    try:
        pid = int(doc.get("daemon_pid", 0))
    except (TypeError, ValueError):
        return False
    if pid <= 0 or pid == os.getpid():
        return False
    st = procs.read_stat(pid)
    return st is not None and st.state not in ("Z", "X") and st.start_ticks == doc.get(
        "daemon_start")


def _thaw(cgroup: str) -> bool:
    p = os.path.join(cgroup, "cgroup.freeze")
    if not os.path.isabs(cgroup):
        return False
    try:
        fd = os.open(p, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, b"0")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def resume_targets(targets: Iterable[dict], hook: str | None = None) -> dict[str, int]:
    """SIGCONT every ``{"pid", "start"[, "ino"]}`` whose process still has that identity, thaw every
    ``{"cgroup"}``, zero the hook file. Returns counts (resumed, thawed, skipped, hook)."""
    procs = _sibling("actuators/procs.py")
    out = {"resumed": 0, "thawed": 0, "skipped": 0, "hook": 0}
    for t in targets:
        try:
            if "cgroup" in t:
                out["thawed" if _thaw(str(t["cgroup"])) else "skipped"] += 1
                continue
            ino = t.get("ino")
            h = procs.ProcessHandle.open(int(t["pid"]), expected_start=int(t["start"]),
                                         expected_ino=None if ino is None else int(ino),
                                         check=False)
        except (ProcessLookupError, KeyError, TypeError, ValueError, OSError):
            out["skipped"] += 1
            continue
        try:
            out["resumed" if h.signal(signal.SIGCONT) else "skipped"] += 1
        finally:
            h.close()
    if hook:
        out["hook"] = int(_sibling("hooks.py").clear_hook_file(hook))
    return out


def resume_state(path: str | os.PathLike[str]) -> dict[str, int] | None:
    """Resume whatever the state file at ``path`` lists; None when there is no file."""
    doc = read_state(path)
    if doc is None:
        return None
    return resume_targets(doc["targets"], doc.get("hook"))


# ------------------------------------------------------------------------------ daemon side
class Guardian:
    """The daemon's handle on its guardian process: :meth:`start` spawns it and waits until
    it watches us, :meth:`alive`/:meth:`ensure` check and restart it, :meth:`stop` makes it
    resume whatever the state file still lists and exit."""

    def __init__(self, state_path: str | os.PathLike[str], *,
                 python: str = sys.executable) -> None:
        self.state_path = os.fspath(state_path)
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 10.0) -> Guardian:
        """Spawn the guardian and wait until it watches us (raises RuntimeError otherwise)."""
        r, w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [self.python, "-I", "-S", os.path.abspath(__file__), "--daemon-pid",
                 str(os.getpid()), "--state", self.state_path, "--ready-fd", str(w)],
                pass_fds=(w,), stdin=subprocess.DEVNULL, start_new_session=True)
            os.close(w)
            w = -1
            ready, _, _ = select.select([r], [], [], timeout)
            if not ready or os.read(r, 1) != b"R":
                self.stop()
                raise RuntimeError("the guardian process did not start")
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> bool:
        """Restart the guardian if it died; True when one is running afterwards."""
        if self.alive():
            return True
        try:
            self.start()
            return True
        except (RuntimeError, OSError):
            return False

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the guardian to resume (from the state file) and exit."""
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ------------------------------------------------------------------------------ guardian side
def _set_pdeathsig(sig: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(sig), 0, 0, 0) == 0  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpucontrol-guardian",
                                 description="Resume paused training if the daemon dies.")
    ap.add_argument("--daemon-pid", type=int, required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--ready-fd", type=int, default=-1)
    args = ap.parse_args(argv)

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)

    def wake(_sig: int, _frm: object) -> None:
        try:
            os.write(wake_w, b"x")
        except OSError:
            pass

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, wake)
    signal.signal(signal.SIGUSR1, wake)

    # load everything the resume needs now, so that it costs no imports when it matters
    for mod in ("_runtime.py", "hooks.py", "actuators/procs.py"):
        _sibling(mod)
    _sibling("actuators/procs.py").pidfs_unique_inodes()

    fds = [wake_r]
    try:
        fds.append(os.pidfd_open(args.daemon_pid))
    except (AttributeError, OSError):
        _set_pdeathsig(signal.SIGUSR1)  # fallback: the kernel signals us when it dies
    if os.getppid() == args.daemon_pid:  # still its child, so the pidfd (if any) is its
        if args.ready_fd >= 0:
            try:
                os.write(args.ready_fd, b"R")
                os.close(args.ready_fd)
            except OSError:
                pass
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        while True:
            try:
                if poller.poll():
                    break
            except InterruptedError:
                continue
    t0 = time.monotonic()
    try:
        result = resume_state(args.state)
    except (ValueError, OSError) as exc:
        print(f"gpucontrol-guardian: cannot resume from {args.state}: {exc}", file=sys.stderr)
        return 1
    if result is not None:
        print(json.dumps({"guardian": "resumed", "daemon_pid": args.daemon_pid,
                          "ms": round(1e3 * (time.monotonic() - t0), 3), **result}),
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
