"""Real child processes for the actuator and daemon tests, always cleaned up.

Every child starts in its own process group; :meth:`Children.cleanup` sends SIGCONT and then
SIGKILL to each group *before* reaping the leader (so the group id cannot have been reused),
so no test ever leaves a process stopped (state T) or frozen on the machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from gpucontrol.node.actuators.procs import descendants, stop_requested

__all__ = ["BUSY", "FORKER", "PRODUCT_NICE", "SLEEPER", "Children", "child_pids",
           "cpu_cgroup_of", "cpu_controller_writable", "daemon_argv", "group_pids",
           "histogram_text", "metrics_server", "product_priority", "read_events", "run_daemon",
           "send_body", "state", "stop_requested", "stopped_pids", "wait_for", "wait_state"]

BUSY = "while True: pass"
SLEEPER = "import time\nwhile True: time.sleep(1)"
#: Sleeps; forks one sleeping worker per line read from stdin (a training starting workers).
FORKER = ("import os, sys, time\n"
          "for _ in sys.stdin:\n"
          "    if os.fork() == 0:\n"
          "        break\n"
          "while True: time.sleep(1)")


#: The node agent's priority in production (deploy/systemd/gpucontrol@.service: Nice=-5).
PRODUCT_NICE = -5


def product_priority() -> None:
    """``preexec_fn`` of a daemon under test: the priority the product runs it at, where this
    user may set it (root; otherwise it stays at the test's own), so a loaded machine delays
    it as it would delay the deployed agent, not more."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, PRODUCT_NICE)
    except OSError:
        pass


def run_daemon(argv: list[str], **kw) -> subprocess.CompletedProcess:
    """``subprocess.run`` of a daemon command line at the product's priority (as
    :meth:`Children.popen` starts one)."""
    kw.setdefault("preexec_fn", product_priority)
    return subprocess.run(argv, **kw)


def _is_daemon(argv) -> bool:
    return any(a in ("gpucontrol.node.daemon", "gpucontrol.daemon") for a in argv[1:3])


class Children:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def spawn(self, code: str = BUSY, *args: str, **kw) -> subprocess.Popen:
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen([sys.executable, "-c", code, *args], start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        """Start ``argv`` in its own session; a daemon (``python -m gpucontrol.daemon``) at
        the product's priority (:func:`product_priority`)."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        if _is_daemon(argv):
            kw.setdefault("preexec_fn", product_priority)
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def adopt(self, p: subprocess.Popen) -> subprocess.Popen:
        self.procs.append(p)
        return p

    def cleanup(self) -> None:
        for p in self.procs:
            if p.returncode is None:  # not reaped: its pid (= pgid) cannot be reused yet
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.killpg(p.pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()
        self.procs.clear()


def state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2:].split()[0].decode()


def wait_state(pid: int, want: set[str], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state(pid) in want:
            return True
        time.sleep(0.001)
    return False


def wait_for(predicate, timeout: float = 10.0, every: float = 0.01):
    """Poll ``predicate`` until it returns a truthy value (returned) or ``timeout`` passes
    (returns the last falsy value). For conditions another process makes true "soon": a fixed
    sleep is a race on a loaded 2-core CI machine."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got or time.monotonic() >= deadline:
            return got
        time.sleep(every)


def stopped_pids(pids) -> list[int]:
    return [p for p in pids if state(p) in ("T", "t")]


def group_pids(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getpgid(int(name)) == pgid:
                    out.append(int(name))
            except ProcessLookupError:
                pass
    return out


def daemon_argv(tmp, name: str, *args: str) -> list[str]:
    """``python -m gpucontrol.daemon`` with private socket/state/hook files under ``tmp``."""
    return [sys.executable, "-m", "gpucontrol.daemon", "--socket", f"{tmp}/{name}.sock",
            "--state", f"{tmp}/{name}.state.json", "--hook", f"{tmp}/{name}.hook", *args]


def read_events(stream, until: str, timeout: float = 20.0) -> list[dict]:
    """Read JSON lines from a daemon's stdout until an event named ``until`` (inclusive)."""
    import json
    import select

    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = stream.readline()
        if not line:
            break
        rec = json.loads(line)
        out.append(rec)
        if rec.get("event") == until:
            return out
    raise AssertionError(f"no {until!r} event; got {out}")


def child_pids(pid: int) -> list[int]:
    """The direct children of ``pid`` (empty when it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def cpu_cgroup_of(pid: int) -> str:
    """The v1 ``cpu`` (or v2 unified) cgroup path of ``pid``, as /proc shows it."""
    with open(f"/proc/{pid}/cgroup") as f:
        rows = [line.rstrip("\n").split(":", 2) for line in f]
    for _id, ctrls, path in rows:
        if "cpu" in ctrls.split(","):
            return path
    return next(path for _id, ctrls, path in rows if ctrls == "")


def cpu_controller_writable() -> bool:
    """Whether this host has a cgroup CPU controller we may write (the CPU-share tests)."""
    from gpucontrol.errors import ConfigurationError
    from gpucontrol.node.actuators.cpu_share import detect_backend

    try:
        detect_backend()
    except ConfigurationError:
        return False
    return True


def fork_worker(p) -> int:
    """Make the ``FORKER`` child ``p`` fork one worker now; returns the worker's pid."""
    before = set(child_pids(p.pid))
    p.stdin.write("fork\n")
    p.stdin.flush()
    new = wait_for(lambda: set(child_pids(p.pid)) - before, 5.0)
    assert new, "the training did not fork"
    return new.pop()


def cgroup_rel(group) -> str:
    """A CPU-controller group directory as /proc/PID/cgroup names it (relative to the
    controller root)."""
    from gpucontrol.node.actuators.cpu_share import detect_backend

    rel = group.relative_to(detect_backend()[1]).as_posix()
    return "/" if rel == "." else "/" + rel


def cgroup_quota(group) -> str:
    """The group's CPU quota as the kernel shows it (v2 ``cpu.max``'s first field, else v1
    ``cpu.cfs_quota_us``)."""
    f = group / "cpu.max"
    return f.read_text().split()[0] if f.exists() else (group / "cpu.cfs_quota_us").read_text()


@contextlib.contextmanager
def slow_inference_metrics(latency_s: float = 0.2):
    """A Prometheus ``/metrics`` endpoint whose latency histogram observes ``latency_s`` every
    20 ms whatever happens (always over a smaller SLO: the outer loop lowers the share);
    yields its URL."""
    import threading

    from prometheus_client import CollectorRegistry, Histogram, start_http_server

    reg = CollectorRegistry()
    hist = Histogram("inference_latency_seconds", "x", buckets=(0.01, 0.05, 0.1, 0.5),
                     registry=reg)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=reg)
    stop = threading.Event()

    def feed() -> None:
        while not stop.wait(0.02):
            hist.observe(latency_s)

    threading.Thread(target=feed, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def histogram_text(count: float | str, total: float | str | None = None,
                   name: str = "lat_seconds") -> str:
    """A ``/metrics`` body with one histogram: ``count`` observations of 20 ms (all in the
    0.05 s bucket); ``count`` or ``total`` may be any text (``NaN``, ``+Inf``) for the
    ``_count`` and ``_sum`` lines."""
    n = count if isinstance(count, str) else f"{count:g}"
    c = 0.0 if isinstance(count, str) else float(count)
    s = total if total is not None else 0.02 * c
    return (f'{name}_bucket{{le="0.01"}} 0\n{name}_bucket{{le="0.05"}} {c:g}\n'
            f'{name}_bucket{{le="+Inf"}} {c:g}\n{name}_sum {s}\n{name}_count {n}\n')


def send_body(handler, body: str | bytes) -> None:
    """Answer a request of :func:`metrics_server` with ``200`` and ``body`` at once."""
    data = body.encode() if isinstance(body, str) else body
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain; version=0.0.4")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@contextlib.contextmanager
def metrics_server(respond):
    """A local HTTP server whose every GET calls ``respond(handler, n)`` (``n``: the request's
    index, from 0) on a thread of its own; yields its ``/metrics`` URL."""
    import http.server
    import itertools
    import threading

    counter = itertools.count()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                n = next(counter)
            try:
                respond(self, n)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def total_crash(d: subprocess.Popen) -> None:
    """The daemon ``d`` and its guardian gone at once while a training is paused: the daemon
    frozen first (a live daemon ends a pause within 50 ms of its guardian's death), then its
    descendants (the guardian) and itself SIGKILLed."""
    os.kill(d.pid, signal.SIGSTOP)
    for pid in descendants([d.pid]):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)
    d.kill()
    d.wait()
