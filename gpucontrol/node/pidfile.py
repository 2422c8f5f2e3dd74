"""The training's PID file: who may name a process for the daemon to pause.

On Kubernetes the training runs in another, unprivileged pod and tells the agent its PID
through a file on the node. A PID alone gives the file's writer the agent's power to SIGSTOP
any process on the node (a root process included): a confused deputy. So the agent reads the
file itself and accepts only a process its writer could have stopped anyway:

* **The file** is opened without following a link (``O_NOFOLLOW``, ``O_NONBLOCK``: a FIFO
  never blocks the agent), must be a regular file of at most 64 bytes holding one decimal
  PID, and may be written by its owner only (no group or other write bit). Its owner must be
  the daemon's own user, root, or one of the uids the operator lists (``--allow-uid``).
* **The process** must run as the file's owner: its real, effective and saved uids all equal
  the owner's. A user may stop their own processes, so the agent does nothing the writer
  could not do; a root process is accepted only from a root-owned file.
* **The pod**: with ``--training-cgroup PATTERN`` the process's cgroup must match the
  pattern (a shell glob, :func:`fnmatch.fnmatchcase`). ``{pod}`` in the pattern stands for the
  pod UID the file's path names: given ``/run/gpucontrol/training/{pod}/gpu0.pid`` as
  ``--training-pid-file`` the agent looks in every subdirectory of
  ``/run/gpucontrol/training``; the training pod
  mounts that directory with ``subPathExpr: $(POD_UID)``, so the kubelet, not the pod, names
  the subdirectory it writes into, and a pod can only ever write under its own UID. The
  pattern ``*pod{pod}*`` then accepts only a process in that pod's cgroup (the kubelet's
  cgroupfs driver names it ``pod<uid>``, its systemd driver ``pod<uid with _ for ->``; both
  spellings are tried). The uid rule alone would let a pod stop the processes of another pod
  that runs as the same uid; the cgroup rule closes that.

Which cgroup path is matched: the unified (v2) one, ``0::`` in ``/proc/PID/cgroup``; on a
host without one (only ``/`` there), every cgroup v1 path that is not the root must match.

Examples
--------
>>> pod_spellings("0f8d5c1e-2b3a-4c5d-8e9f-a0b1c2d3e4f5")
('0f8d5c1e-2b3a-4c5d-8e9f-a0b1c2d3e4f5', '0f8d5c1e_2b3a_4c5d_8e9f_a0b1c2d3e4f5')
>>> cgroup_matches(["/kubepods/besteffort/pod0f8d5c1e-2b3a-4c5d-8e9f-a0b1c2d3e4f5/abc"],
...                "*pod{pod}*", "0f8d5c1e-2b3a-4c5d-8e9f-a0b1c2d3e4f5")
True
>>> cgroup_matches(["/system.slice/sshd.service"], "*pod{pod}*",
...                "0f8d5c1e-2b3a-4c5d-8e9f-a0b1c2d3e4f5")
False
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpucontrol.errors import ConfigurationError, TargetRefused

__all__ = ["POD", "PidClaim", "PidFileNotWritten", "cgroup_matches", "check_claim",
           "check_pattern", "find_pid_files", "pod_spellings", "proc_cgroups", "read_claim",
           "resolve_pid_file"]

#: The placeholder of a pod UID in ``--training-pid-file`` and ``--training-cgroup``.
POD = "{pod}"
#: The longest PID file read, bytes.
MAX_PID_FILE = 64
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class PidClaim:
    """A PID file's claim, read and checked.

    Parameters
    ----------
    pid : int
        The process it names.
    path : str
        The file read.
    owner : int
        The file's owner (and so the only uid the process may run as).
    pod : str or None
        The pod UID its path names (with ``{pod}``), else None.
    """

    pid: int
    path: str
    owner: int
    pod: str | None


def pod_spellings(pod: str) -> tuple[str, str]:
    """A pod UID as the kubelet's cgroupfs driver and its systemd driver write it.

    Parameters
    ----------
    pod : str
        The pod UID.

    Returns
    -------
    tuple of str
        ``(uid, uid with '_' for '-')``.
    """
    return pod, pod.replace("-", "_")


def check_pattern(pid_file: str | None, pattern: str | None) -> None:
    """The placeholder rules of ``--training-pid-file`` and ``--training-cgroup``.

    Parameters
    ----------
    pid_file : str or None
        The ``--training-pid-file`` path.
    pattern : str or None
        The ``--training-cgroup`` pattern.

    Raises
    ------
    ConfigurationError
        ``{pod}`` that is not one whole directory component of the path, more than one, or
        ``{pod}`` in the pattern without one in the path.
    """
    if pid_file is not None and POD in pid_file:
        parts = pid_file.split("/")
        if pid_file.count(POD) != 1 or POD not in parts or parts[-1] == POD:
            raise ConfigurationError(
                f"--training-pid-file {pid_file}: {POD} must be one whole directory name "
                f"(e.g. /run/gpucontrol/training/{POD}/gpu0.pid), at most once")
    if pattern is not None and POD in pattern and (pid_file is None or POD not in pid_file):
        raise ConfigurationError(f"--training-cgroup {pattern}: {POD} names the pod of the "
                                 f"PID file's path; give --training-pid-file with {POD} in it")
    if pattern is not None and not pattern.strip():
        raise ConfigurationError("--training-cgroup is empty; give a shell pattern of the "
                                 "training's cgroup path, e.g. '*pod{pod}*'")


def proc_cgroups(pid: int) -> list[str]:
    """The cgroup paths a process is judged by: its unified (v2) path, or, on a host without
    one, its cgroup v1 paths that are not the root (empty when it is gone).

    Parameters
    ----------
    pid : int
        The process.

    Returns
    -------
    list of str
        The paths, as ``/proc/PID/cgroup`` shows them.
    """
    try:
        with open(f"/proc/{int(pid)}/cgroup", encoding="utf-8", errors="replace") as f:
            rows = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return []
    unified = [path for hid, ctrls, path in rows if hid == "0" and ctrls == ""]
    if unified and unified[0] not in ("", "/"):
        return unified[:1]
    return sorted({path for hid, _c, path in rows if hid != "0" and path not in ("", "/")})


def cgroup_matches(paths: Sequence[str], pattern: str, pod: str | None) -> bool:
    """Whether every path matches ``pattern`` (``{pod}`` filled in, either spelling).

    Parameters
    ----------
    paths : sequence of str
        A process's cgroup paths (:func:`proc_cgroups`).
    pattern : str
        A shell pattern (``*`` matches ``/`` too).
    pod : str or None
        The pod UID for ``{pod}``.

    Returns
    -------
    bool
        False for no paths (a process in the root group only, or gone).
    """
    if not paths:
        return False
    if POD in pattern:
        if pod is None:
            return False
        pats = [pattern.replace(POD, s) for s in pod_spellings(pod)]
    else:
        pats = [pattern]
    return any(all(fnmatch.fnmatchcase(p, pat) for p in paths) for pat in pats)


def find_pid_files(pattern: str) -> list[tuple[str, str | None]]:
    """The files a ``--training-pid-file`` path names now.

    Parameters
    ----------
    pattern : str
        The path, optionally with one ``{pod}`` directory component.

    Returns
    -------
    list of (str, str or None)
        ``(path, pod)`` of each existing entry (not checked yet); with ``{pod}``, one per
        subdirectory whose name is a pod UID and that is a real directory (not a link).
    """
    if POD not in pattern:
        return [(pattern, None)] if os.path.lexists(pattern) else []
    base, _, rest = pattern.partition("/" + POD + "/")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out: list[tuple[str, str | None]] = []
    for name in names:
        if not _UUID.match(name):
            continue
        d = os.path.join(base, name)
        try:
            if not stat.S_ISDIR(os.lstat(d).st_mode):
                continue
        except OSError:
            continue
        path = os.path.join(d, rest)
        if os.path.lexists(path):
            out.append((path, name))
    return out


class PidFileNotWritten(FileNotFoundError):
    """A PID file that exists and is empty: its writer is between creating and writing it."""


def read_claim(path: str, owners: Collection[int], pod: str | None = None) -> PidClaim:
    """Open and read one PID file, checking the file (not yet the process).

    Parameters
    ----------
    path : str
        The file.
    owners : collection of int
        The uids whose files are accepted.
    pod : str or None
        The pod UID its path names.

    Returns
    -------
    PidClaim
        The PID and the file's owner.

    Raises
    ------
    TargetRefused
        A link, not a regular file, writable by group or others, owned by a uid not in
        ``owners``, too long, or not one decimal PID.
    FileNotFoundError
        The file is gone, or empty (:class:`PidFileNotWritten`: its writer has created it
        and not yet written the PID, as ``echo $$ > gpu0.pid`` does; wait and read again).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TargetRefused(f"--training-pid-file {path} is a symbolic link; the training "
                                "must write the file itself") from None
        if exc.errno == errno.ENOENT:
            raise
        raise TargetRefused(f"--training-pid-file {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TargetRefused(f"--training-pid-file {path} is not a regular file")
        if st.st_mode & 0o022:
            raise TargetRefused(
                f"--training-pid-file {path} is writable by group or others (mode "
                f"{stat.S_IMODE(st.st_mode):o}): anyone could name a process; write it 0644")
        if st.st_uid not in owners:
            raise TargetRefused(
                f"--training-pid-file {path} is owned by uid {st.st_uid}, which may not name "
                f"a training (allowed: {', '.join(str(u) for u in sorted(owners))}; "
                "see --allow-uid)")
        raw = os.read(fd, MAX_PID_FILE + 1)
    finally:
        os.close(fd)
    text = raw.decode("ascii", "replace").strip()
    if not raw:
        raise PidFileNotWritten(errno.ENOENT, "created, the PID not written yet", path)
    if len(raw) > MAX_PID_FILE or not text.isdigit() or not 1 < int(text) < 1 << 22:
        shown = text[:20] + ("..." if len(text) > 20 else "")
        raise TargetRefused(f"--training-pid-file {path} must hold one PID, got {shown!r}")
    return PidClaim(int(text), path, st.st_uid, pod)


def _uids(pid: int) -> tuple[int, ...] | None:
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return tuple(int(x) for x in line.split()[1:4])
    except (OSError, ValueError):
        return None
    return None


def check_claim(claim: PidClaim, cgroup: str | None) -> None:
    """The process a claim names runs as the file's owner and, with a pattern, in the
    training's cgroup.

    Parameters
    ----------
    claim : PidClaim
        What :func:`read_claim` read.
    cgroup : str or None
        The ``--training-cgroup`` pattern.

    Raises
    ------
    TargetRefused
        Another uid (a root process from a file that is not root's included), another
        cgroup.
    ProcessLookupError
        No such process (yet, or any more).
    """
    uids = _uids(claim.pid)
    if uids is None:
        raise ProcessLookupError(claim.pid)
    if any(u != claim.owner for u in uids):
        who = "root" if 0 in uids else f"uid {uids[1]}"
        raise TargetRefused(
            f"--training-pid-file {claim.path} names pid {claim.pid}, which runs as {who}, but "
            f"the file is owned by uid {claim.owner}: a file may only name its owner's "
            "processes")
    if cgroup is not None:
        paths = proc_cgroups(claim.pid)
        if not cgroup_matches(paths, cgroup, claim.pod):
            where = ", ".join(paths) or "the root cgroup"
            raise TargetRefused(
                f"--training-pid-file {claim.path} names pid {claim.pid}, whose cgroup "
                f"({where}) does not match --training-cgroup {cgroup}"
                + (f" for pod {claim.pod}" if claim.pod else ""))


def resolve_pid_file(pattern: str, owners: Collection[int],
                     cgroup: str | None) -> PidClaim | None:
    """The training a ``--training-pid-file`` names now, checked; None while there is none.

    With ``{pod}``, files of pods whose process is gone are skipped (a deleted pod leaves its
    directory); when several name a live process, the one in its own pod's cgroup wins, and
    two such are refused.

    Parameters
    ----------
    pattern : str
        The ``--training-pid-file`` path.
    owners : collection of int
        The uids whose files are accepted.
    cgroup : str or None
        The ``--training-cgroup`` pattern.

    Returns
    -------
    PidClaim or None
        The accepted claim; None when no file names a live process yet (wait and retry).

    Raises
    ------
    TargetRefused
        The file or its process is refused (the message says why).
    """
    claims = []
    for path, pod in find_pid_files(pattern):
        try:
            claim = read_claim(path, owners, pod)
        except FileNotFoundError:
            continue
        if _uids(claim.pid) is not None:
            claims.append(claim)
    if len(claims) > 1 and cgroup is not None:
        claims = [c for c in claims if cgroup_matches(proc_cgroups(c.pid), cgroup, c.pod)] \
            or claims
    if len(claims) > 1:
        raise TargetRefused(f"--training-pid-file {pattern}: {len(claims)} files name a live "
                            f"process ({', '.join(c.path for c in claims)}); one training "
                            "per GPU")
    if not claims:
        return None
    try:
        check_claim(claims[0], cgroup)
    except ProcessLookupError:
        return None
    return claims[0]
