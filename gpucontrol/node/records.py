"""What a daemon owns besides paused targets, recorded in its state file, and its clean-up.

The state file (:mod:`gpucontrol.node.guardian`) carries, next to the targets to resume:

* ``owned``: identities ``{"pid", "start"[, "ino"], "group": true}`` of the training
  processes the daemon launched (``--training-cmd``), written the moment each is spawned;
  each leads its own process group, so its workers are ended with it;
* ``mps``: the private MPS control daemon it started (binary, pipe and log directories, the
  private root directory to remove);
* ``made_cgroup``: a cgroup directory it created for the training;
* ``share``: the CPU-share group it capped (``--share-backend cpu``): its path, backend
  (``cpu.max`` or ``cfs_quota_us``), whether the daemon made it, and for every process it moved
  in the group that process came from (``origins``, written before the move);
* ``controller``: the controller's last actuation (see :mod:`gpucontrol.node.persist`).

:func:`cleanup_owned` ends what the records list: it stops every owned training (SIGCONT,
SIGTERM, SIGKILL after a grace period, through pidfds so a recycled PID is never touched), quits
the MPS daemon and removes its directory, removes the made cgroup, and lifts the CPU-share cap,
each capped process back in the cgroup it came from (:func:`release_share`). The guardian runs it
right after resuming the targets when the daemon dies by any means, and a restarted daemon runs
it on the leftovers of a run whose guardian died too -- so a launched training never outlives
its daemon unthrottled and no private MPS daemon or temporary directory leaks.

Stdlib only: the guardian loads this module by path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterable

__all__ = ["cleanup_owned", "end_group_rest", "exit_status", "open_identity", "origin_of",
           "quit_mps", "release_share", "remove_cgroup", "return_members", "share_origins",
           "terminate_identity"]

MPS_ROOT_PREFIX = "gpucontrol-mps-"


def _stat_field(pid: int, index: int) -> int | None:
    """Field ``index`` (0: the state) after the command name in ``/proc/PID/stat``; None when
    the process is gone or the file is unreadable."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            raw = f.read()
        return int(raw[raw.rindex(b")") + 2:].split()[index])
    except (OSError, ValueError, IndexError):
        return None


def _start_ticks(pid: int) -> int | None:
    return _stat_field(pid, 19)


def open_identity(ident: dict) -> int | None:
    """A pidfd on the process ``{"pid", "start"[, "ino"]}`` names, or None when that process
    is gone (its PID free or recycled). Never PID <= 1 or ourselves."""
    try:
        pid, start = int(ident["pid"]), int(ident["start"])
    except (KeyError, TypeError, ValueError):
        return None
    if pid <= 1 or pid == os.getpid():
        return None
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        signal.pidfd_send_signal(fd, 0)  # alive now, so the stat below is the pidfd's process
        ino = ident.get("ino")
        if _start_ticks(pid) != start or (ino is not None and os.fstat(fd).st_ino != int(ino)
                                          and _pidfs()):
            raise ProcessLookupError(pid)
    except (OSError, ValueError, TypeError):
        os.close(fd)
        return None
    return fd


_PIDFS: bool | None = None


def _pidfs() -> bool:
    global _PIDFS
    if _PIDFS is None:
        a = b = -1
        try:
            a, b = os.pidfd_open(os.getpid()), os.pidfd_open(os.getppid() or 1)
            _PIDFS = os.fstat(a).st_ino != os.fstat(b).st_ino
        except OSError:
            _PIDFS = False
        finally:
            for fd in (a, b):
                if fd >= 0:
                    os.close(fd)
    return _PIDFS


def _exited(fd: int, timeout: float) -> bool:
    try:
        return bool(select.select([fd], [], [], max(0.0, timeout))[0])
    except (OSError, ValueError):
        return True


def _signal_group(pgid: int, sig: int) -> bool:
    """``killpg``; False when the group has no member left (or is not ours to signal)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def end_group_rest(pgid: int, grace_s: float = 5.0) -> int:
    """End what is left of process group ``pgid`` after its leader exited: the workers a
    launched training forked (SIGCONT + SIGTERM, SIGKILL after ``grace_s``). Returns 1 when
    members were left, else 0.

    Safe only right after the leader, started by us in its own session, exited: while any
    member lives, the kernel keeps the group's number from being reused."""
    if pgid <= 1 or not _signal_group(pgid, 0):
        return 0
    for sig in (signal.SIGCONT, signal.SIGTERM):
        _signal_group(pgid, sig)
    deadline = time.monotonic() + max(0.0, grace_s)
    while time.monotonic() < deadline:
        if not _signal_group(pgid, 0):
            return 1
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)
    return 1


def exit_status(p: subprocess.Popen) -> int | None:
    """How a child ended, as :attr:`subprocess.Popen.returncode` reads it (its exit status, or
    minus the signal that killed it); None while it runs. Read without reaping it
    (``WNOWAIT``): its zombie keeps its process group's number from being reused until it is
    reaped, right before :func:`end_group_rest` ends the workers it left."""
    if p.returncode is not None:
        return p.returncode
    try:
        st = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped elsewhere
        return p.poll()
    if st is None:
        return None
    return st.si_status if st.si_code == os.CLD_EXITED else -st.si_status


def terminate_identity(ident: dict, grace_s: float = 10.0) -> bool:
    """SIGCONT + SIGTERM the process, SIGKILL after ``grace_s``; True when one was ended.

    An identity with ``"group": true`` is a training the daemon launched as the leader of
    its own process group: the signals go to the whole group (its workers too), and members
    that outlive the leader are ended after it."""
    fd = open_identity(ident)
    if fd is None:
        return False
    pid = int(ident["pid"])
    group = False
    if ident.get("group") is True:
        with contextlib.suppress(OSError):  # still its own group's leader (checked while alive)
            group = os.getpgid(pid) == pid
    try:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            if not (group and _signal_group(pid, sig)):
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, sig)
        if not _exited(fd, grace_s):
            if not (group and _signal_group(pid, signal.SIGKILL)):
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            _exited(fd, 5.0)
        if group:
            end_group_rest(pid, min(grace_s, 5.0))
        return True
    finally:
        os.close(fd)


def _private_mps_root(path: object) -> str | None:
    """``path`` when it is a real directory of ours made by MPSControl.start, else None."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return None
    if not os.path.basename(path).startswith(MPS_ROOT_PREFIX):
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return None
    return path


def quit_mps(rec: dict, timeout_s: float = 10.0) -> bool:
    """Quit a private MPS control daemon a state file lists and remove its directory."""
    root = _private_mps_root(rec.get("root"))
    binary, pipe, log = rec.get("binary"), rec.get("pipe_dir"), rec.get("log_dir")
    quit_ok = False
    if isinstance(binary, str) and isinstance(pipe, str) and os.access(binary, os.X_OK) and (
            root is None or pipe.startswith(root + os.sep)):
        env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe}
        if isinstance(log, str):
            env["CUDA_MPS_LOG_DIRECTORY"] = log
        try:
            r = subprocess.run([binary], input="quit\n", env=env, capture_output=True,
                               text=True, timeout=timeout_s, check=False)
            quit_ok = r.returncode == 0
        except (OSError, subprocess.SubprocessError):
            pass
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
    return quit_ok or root is not None


def remove_cgroup(path: object, timeout_s: float = 2.0) -> bool:
    """rmdir a cgroup the daemon made (once its members are gone); True when removed."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return False
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return False
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def _ppid(pid: int) -> int | None:
    return _stat_field(pid, 1)


def _inside(path: str, top: str) -> bool:
    return os.path.commonpath([path, top]) == top


def share_origins(rec: dict) -> dict[int, tuple[int, str]]:
    """The usable ``origins`` of a ``share`` record: pid -> (start ticks, cgroup directory).

    Kept: entries whose group lies under the record's controller ``root`` and outside the share
    group itself (a process that was already in it has no other home the record knows). The
    first entry is the training's first process.
    """
    out: dict[int, tuple[int, str]] = {}
    root, path, raw = rec.get("root"), rec.get("path"), rec.get("origins")
    if not (isinstance(root, str) and os.path.isabs(root) and isinstance(path, str)
            and isinstance(raw, list)):
        return out
    root, path = os.path.normpath(root), os.path.normpath(path)
    for o in raw:
        try:
            pid, start, group = int(o["pid"]), int(o["start"]), o["cgroup"]
        except (KeyError, TypeError, ValueError):
            continue
        if not isinstance(group, str) or not os.path.isabs(group):
            continue
        group = os.path.normpath(group)
        if _inside(group, root) and not _inside(group, path):
            out[pid] = (start, group)  # a PID listed twice (reused): its latest process
    return out


def origin_of(pid: int, origins: dict[int, tuple[int, str]]) -> str | None:
    """The group ``pid`` came from: its own recorded group when it is the recorded process
    (same start time), else that of its nearest recorded ancestor (a worker the training forked
    inside the share group); None when neither is recorded."""
    p: int | None = int(pid)
    for _ in range(256):  # a bounded walk up the process tree
        if p is None or p <= 1:
            return None
        hit = origins.get(p)
        if hit is not None and _start_ticks(p) == hit[0]:
            return hit[1]
        p = _ppid(p)
    return None


def _move(pid: str, group: str) -> int:
    """Write ``pid`` into ``group``'s ``cgroup.procs``: 0, or the errno of the refusal."""
    try:
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(pid)
        return 0
    except OSError as exc:
        return exc.errno or -1


def return_members(rec: dict) -> int:
    """Move a share group's members back to the groups they came from.

    Each member goes to its recorded group (``origins``), or to that of its nearest recorded
    ancestor; a member neither names (an orphaned worker) goes to the group of the training's
    first process when the daemon made the share group, and stays where it is otherwise (it
    was put there by someone else). A group that is gone or refuses the process: the share
    group's parent. A record without ``origins`` (an older daemon's): every member to the
    parent.

    Parameters
    ----------
    rec : dict
        The ``share`` record (:func:`release_share`).

    Returns
    -------
    int
        How many processes were moved.
    """
    path = os.path.normpath(str(rec["path"]))
    parent = os.path.dirname(path)
    legacy = "origins" not in rec
    origins = share_origins(rec)
    default = next(iter(origins.values()))[1] if origins else parent
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            members = f.read().split()
    except OSError:
        return 0
    moved = 0
    for pid in members:
        try:
            home = parent if legacy else origin_of(int(pid), origins)
        except ValueError:
            continue
        if home is None:
            if not rec.get("made"):
                continue  # not ours, in a group we did not make: left alone
            home = default
        err = _move(pid, home)
        if err and err != errno.ESRCH and home != parent:
            err = _move(pid, parent)  # its group is gone, or refuses it
        moved += not err
    return moved


def _claimed_by_another(lock: object) -> bool:
    """Whether a live process holds the ``flock`` of the lock file ``lock`` (a daemon that took
    the share group over since the record was written). The file is neither made nor removed."""
    if not isinstance(lock, str) or not os.path.isabs(lock):
        return False
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # drops our probe lock too
    return False


def release_share(rec: object) -> bool:
    """Lift a CPU-share cap a dead daemon left (``share`` record), move the group's members
    back to the groups they came from (:func:`return_members`) and remove the group when the
    daemon made it. :meth:`gpucontrol.node.actuators.cpu_share.CpuShare.close` does the same.

    Parameters
    ----------
    rec : dict
        ``{"path": abs path, "backend": "cpu.max" | "cfs_quota_us", "made": bool,
        "root": the controller's root, "origins": [{"pid", "start", "cgroup"}, ...],
        "lock": the daemon's lock file of the group}``: ``origins`` lists each process the
        daemon moved in, with its start time (clock ticks) and the absolute group it came
        from. A group whose ``lock`` a live process holds belongs to another daemon now and is
        left alone.

    Returns
    -------
    bool
        True when the cap was lifted.
    """
    if not isinstance(rec, dict):
        return False
    path, backend = rec.get("path"), rec.get("backend")
    if (not isinstance(path, str) or not os.path.isabs(path) or not os.path.isdir(path)
            or backend not in ("cpu.max", "cfs_quota_us") or _claimed_by_another(rec.get("lock"))):
        return False
    lifted = True
    try:
        if backend == "cpu.max":
            with open(os.path.join(path, "cpu.max")) as f:
                period = [*f.read().split(), "100000", "100000"][1]
            with open(os.path.join(path, "cpu.max"), "w") as f:
                f.write(f"max {period}")
        else:
            with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
                f.write("-1")
    except OSError:
        lifted = False
    return_members(rec)  # even when the cap stayed: out of the capped group
    if rec.get("made"):
        remove_cgroup(path)
    return lifted


def cleanup_owned(doc: dict, grace_s: float = 10.0) -> dict[str, int]:
    """End whatever a state document's records list; returns counts (terminated, mps, cgroup).

    Parameters
    ----------
    doc : dict
        A state document (:func:`gpucontrol.node.guardian.read_state`).
    grace_s : float
        SIGTERM to SIGKILL, s.

    Returns
    -------
    dict
        ``{"terminated": n, "mps_quit": 0/1, "cgroup_removed": 0/1, "share_released": 0/1}``.
    """
    owned = doc.get("owned")
    idents: Iterable[dict] = owned if isinstance(owned, list) else []
    out = {"terminated": sum(terminate_identity(i, grace_s) for i in idents
                             if isinstance(i, dict)),
           "mps_quit": 0, "cgroup_removed": 0, "share_released": 0}
    mps = doc.get("mps")
    if isinstance(mps, dict):
        out["mps_quit"] = int(quit_mps(mps))
    out["cgroup_removed"] = int(remove_cgroup(doc.get("made_cgroup")))
    out["share_released"] = int(release_share(doc.get("share")))
    return out
