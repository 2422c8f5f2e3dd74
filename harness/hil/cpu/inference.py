"""The CPU plant's inference service: ``python -m harness.hil.cpu.inference``.

Serves batches of the MLP of :mod:`harness.hil.cpu.workload` at a fixed rate (batches per
second on absolute deadlines; a late batch starts at once, no backlog is kept) and measures
each batch's wall-clock latency. The latency goes to

- a ``prometheus_client`` histogram ``inference_latency_seconds`` served on
  ``127.0.0.1:<port>/metrics`` (``--port 0``: any free port, written to ``--port-file``), which
  the daemon scrapes with ``--latency-source prometheus``;
- optionally the daemon's datagram socket (``--report``: :func:`gpucontrol.report_latency`,
  socket from ``GPUCONTROL_SOCKET``).

Load: ``--batch`` normally; SIGUSR1 switches to ``--burst-batch`` (the load burst), SIGUSR2
back. SIGTERM/SIGINT stop it cleanly. Its BLAS threads come from ``OMP_NUM_THREADS`` (the plant
gives it every core, so the training's CPU use moves its latency).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["BUCKETS_S", "main"]

#: Histogram bounds: 2 ms .. ~2 s in 6 % steps (p99 estimated to within a bucket).
BUCKETS_S = tuple(round(0.002 * 1.06 ** i, 6) for i in range(120))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.hil.cpu.inference",
                                description="CPU inference service with a latency histogram")
    p.add_argument("--backend", default="numpy", choices=("auto", "numpy", "torch"))
    p.add_argument("--rate", type=float, default=20.0, help="batches per second")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--burst-batch", type=int, default=384)
    p.add_argument("--sizes", default="512,1024,1024,10", help="MLP layer widths")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", help="write the metrics port here once serving")
    p.add_argument("--report", action="store_true", help="also gpucontrol.report_latency")
    p.add_argument("--duration-s", type=float, default=0.0, help="0: until SIGTERM")
    return p


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT or the duration.

    Parameters
    ----------
    argv : list of str or None
        Command line (None: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 after a clean stop.
    """
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

    from harness.hil.cpu.workload import make_model

    a = _parser().parse_args(argv)
    if not (a.rate > 0 and a.batch >= 1 and a.burst_batch >= 1):
        sys.stderr.write("inference: --rate must be > 0 and batches >= 1\n")
        return 2
    sizes = [int(x) for x in a.sizes.split(",")]
    model = make_model(a.backend, sizes, seed=1)
    reg = CollectorRegistry()
    hist = Histogram("inference_latency_seconds", "Per-batch inference latency",
                     buckets=BUCKETS_S, registry=reg)
    batches = Counter("inference_batches", "Batches served", registry=reg)
    images = Counter("inference_images", "Images served", registry=reg)
    gbatch = Gauge("inference_batch_size", "Current batch size", registry=reg)
    server = start_http_server(a.port, addr="127.0.0.1", registry=reg)
    port = server[0].server_port if isinstance(server, tuple) else a.port
    state = {"batch": a.batch, "stop": False}

    def on_sig(signum: int, _frame: object) -> None:
        if signum == signal.SIGUSR1:
            state["batch"] = a.burst_batch
        elif signum == signal.SIGUSR2:
            state["batch"] = a.batch
        else:
            state["stop"] = True

    for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_sig)
    report: Callable[[float], object] | None = None
    if a.report:
        from gpucontrol.node.client import report_latency

        report = report_latency
    rng = np.random.default_rng(0)
    pool = rng.standard_normal((max(a.batch, a.burst_batch) * 4, sizes[0])).astype(np.float32)
    model.forward(pool[:a.batch])  # warm up before announcing the port
    if a.port_file:
        tmp = Path(a.port_file + ".tmp")
        tmp.write_text(str(port))
        os.replace(tmp, a.port_file)
    interval = 1.0 / a.rate
    t_end = time.monotonic() + a.duration_s if a.duration_s > 0 else float("inf")
    nxt = time.monotonic()
    while not state["stop"] and time.monotonic() < t_end:
        b = int(state["batch"])
        gbatch.set(b)
        i = int(rng.integers(0, pool.shape[0] - b))
        t0 = time.perf_counter()
        model.forward(pool[i:i + b])
        dt = time.perf_counter() - t0
        hist.observe(dt)
        batches.inc()
        images.inc(b)
        if report is not None:
            report(dt * 1e3)
        nxt += interval
        wait = nxt - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            nxt = time.monotonic()
    return 0


if __name__ == "__main__":
    sys.exit(main())
