"""The CPU plant's training process: ``python -m harness.hil.cpu.training``.

A real training loop on the MLP of :mod:`harness.hil.cpu.workload` -- forward, backward,
optimizer step -- fed by a DataLoader-style worker child (a separate process that builds and
augments batches into a bounded queue). The iteration count goes to ``--progress-file`` (a
small text file replaced atomically about every 0.2 s: ``<iterations> <loss>``), which the
plant and the pipeline read. SIGTERM/SIGINT stop the loop and the worker; the worker also
exits when its parent disappears.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main"]


def _worker(q: Any, batch: int, dim: int, classes: int, seed: int, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # forked after the parent's SIGTERM handler, which only sets the parent's stop flag: with
    # it the worker outlived terminate() and the parent waited out its 5 s join on every stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((classes, dim)).astype(np.float32)
    while os.getppid() == parent:
        y = rng.integers(0, classes, batch)
        x = centers[y] + rng.standard_normal((batch, dim)).astype(np.float32)
        x = (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-6)
        try:
            q.put((x, y.astype(np.int64)), timeout=0.5)
        except queue.Full:
            continue


def _write_progress(path: str, it: int, loss: float) -> None:
    tmp = path + ".tmp"
    Path(tmp).write_text(f"{it} {loss:.6f}\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Train until SIGTERM/SIGINT or the duration.

    Parameters
    ----------
    argv : list of str or None
        Command line (None: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 after a clean stop.
    """
    from harness.hil.cpu.workload import make_model

    p = argparse.ArgumentParser(prog="python -m harness.hil.cpu.training")
    p.add_argument("--backend", default="numpy", choices=("auto", "numpy", "torch"))
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--sizes", default="512,1024,1024,10")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--progress-file", required=True)
    p.add_argument("--duration-s", type=float, default=0.0, help="0: until SIGTERM")
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")]
    stop = {"flag": False}

    def on_sig(_s: int, _f: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_sig)
    signal.signal(signal.SIGINT, on_sig)
    ctx = mp.get_context("fork")
    q = ctx.Queue(maxsize=4)
    worker = ctx.Process(target=_worker, args=(q, a.batch, sizes[0], sizes[-1], 2, os.getpid()),
                         daemon=True, name="cpu-plant-loader")
    worker.start()
    model = make_model(a.backend, sizes, seed=2)
    it, loss, last = 0, float("nan"), 0.0
    _write_progress(a.progress_file, 0, loss)
    t_end = time.monotonic() + a.duration_s if a.duration_s > 0 else float("inf")
    try:
        while not stop["flag"] and time.monotonic() < t_end:
            try:
                x, y = q.get(timeout=0.5)
            except queue.Empty:
                continue
            loss = model.train_step(x, y, a.lr)
            it += 1
            now = time.monotonic()
            if now - last > 0.2:
                _write_progress(a.progress_file, it, loss)
                last = now
        _write_progress(a.progress_file, it, loss)
    finally:
        worker.terminate()
        worker.join(5)
        if worker.is_alive():
            worker.kill()
            worker.join(5)
        q.cancel_join_thread()
    return 0


if __name__ == "__main__":
    sys.exit(main())
