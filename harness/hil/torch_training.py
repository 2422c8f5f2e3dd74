"""A real PyTorch training loop on restart-free SM shares: ``python -m harness.hil.torch_training``.

The example to copy is :func:`train_loop`; everything else here (sizing, the log rows, the
start-up handshake) is what the hardware harness needs to use it as the GPU plant's training
(``GPUPlantConfig(training="torch")``, ``spatial_study --training torch``)::

    parts = GreenPartitions(shares_pct=(25, 50, 75))     # green contexts, made up front
    for step in range(steps):
        with parts.iteration():                           # the commanded partition's stream
            loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
        after_iteration()                                 # the commanded sleep

A torchvision ResNet-18 (``weights=None``: nothing is downloaded) trains on random images and
labels made once in pinned host memory; each iteration copies them to the GPU (the data
loading a real job does) and runs ``accumulate`` forward/backward passes before one optimizer
step. ``accumulate`` is sized on the idle, full GPU so an iteration takes ``--target-iter-s``
(0.2 s, as the matmul emulator's), and saved with ``--calibration-file`` so that a process
restarted under another MPS share does the same work per iteration.

The share: :class:`gpucontrol.node.green_torch.GreenPartitions` reads the commanded share from
the hook file at each iteration boundary and runs the iteration on that partition:
``torch.cuda.green_contexts`` where PyTorch has it (``--green-pool torch``, the default), the
harness's cuda.core or ctypes pool otherwise (``--green-pool auto``), the dry-run pool on the
CPU (``--green-pool simulated --device cpu --model tiny``: the tests, no GPU, no torchvision).
Each switch goes to ``--spatial-log`` (the columns of the emulator's). Per iteration one CSV row
(``--log``, the emulator's columns; no %smid sample here, so the SM columns are empty).

torch (and torchvision for ResNet-18) are imported when the command runs, not on import.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from harness.hil._lazy import gpu_entry_point, require
from harness.hil.green_emulator import SWITCH_FIELDS, parse_shares
from harness.hil.training_emulator import LOG_FIELDS, mps_pct_from_env
from harness.results import CSVLog, json_line, write_json

__all__ = ["TorchTraining", "main", "train_loop"]

MODELS = ("resnet18", "tiny")


def train_loop(model: Any, opt: Any, loss_fn: Any, batches: Callable[[], tuple[Any, Any]],
               parts: Any, after_iteration: Callable[[], Any], steps: int) -> None:
    """The loop a user writes: each step on the commanded partition, then the commanded sleep.

    Parameters
    ----------
    model, opt, loss_fn : torch objects
        The network, its optimizer and the loss.
    batches : callable
        Returns the next ``(inputs, labels)`` on the device.
    parts : GreenPartitions
        The partitions (:class:`gpucontrol.node.green_torch.GreenPartitions`).
    after_iteration : callable
        The sleep hook (:func:`gpucontrol.hooks.after_iteration`).
    steps : int
        Iterations to run.
    """
    for _ in range(steps):
        with parts.iteration():
            x, y = batches()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        after_iteration()


def build_model(torch: Any, name: str, num_classes: int = 10) -> Any:
    """``resnet18`` (torchvision, untrained) or ``tiny`` (a few layers, for CPU tests).

    Parameters
    ----------
    torch : module
        torch.
    name : str
        One of :data:`MODELS`.
    num_classes : int
        Output classes.

    Returns
    -------
    torch.nn.Module
        The model.
    """
    if name == "resnet18":
        models = require("torchvision.models")
        return models.resnet18(weights=None, num_classes=num_classes)
    if name == "tiny":
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))
    raise ValueError(f"model must be one of {', '.join(MODELS)}, got {name!r}")


class TorchTraining:
    """The harness's side of the loop: sizing, logging, the start-up handshake.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed command line (:func:`build_parser`).
    torch : module, optional
        torch (imported when None).
    """

    def __init__(self, args: argparse.Namespace, torch: Any = None) -> None:
        self.args = args
        self.torch = torch if torch is not None else require("torch")
        t = self.torch
        self.device = t.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.model = build_model(t, args.model).to(self.device)
        self.opt = t.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = t.nn.CrossEntropyLoss()
        gen = t.Generator().manual_seed(args.seed)
        shape = (args.batch_size, 3, args.image_size, args.image_size)
        self.host_x = t.randn(shape, generator=gen)
        self.host_y = t.randint(0, 10, (args.batch_size,), generator=gen)
        if self.cuda:
            self.host_x, self.host_y = self.host_x.pin_memory(), self.host_y.pin_memory()
        self.mps_pct = mps_pct_from_env()
        self.stop_requested = False
        self.switch_log = CSVLog(args.spatial_log.replace("{pid}", str(os.getpid()))
                                 if args.spatial_log else None, SWITCH_FIELDS).__enter__()
        self.parts = self._partitions()

    def _partitions(self) -> Any:
        from gpucontrol.node.green_torch import GreenPartitions

        a = self.args
        shares = [s for s in parse_shares(a.green_shares) if s < 100]
        pool = None
        if a.green_pool not in ("torch", "none"):
            from harness.hil.green_pools import SimulatedPool, open_pool

            pool = SimulatedPool(tuple(shares)) if a.green_pool == "simulated" else \
                open_pool(tuple(shares), device=self.device.index or 0, backend=a.green_pool)
        return GreenPartitions(shares, device=self.device.index or 0, pool=pool,
                               torch=self.torch, on_switch=self._switched)

    def _switched(self, cmd: int | None, share: float, sms: int, switch_s: float) -> None:
        self.switch_log.write({"t_unix": time.time(), "share_cmd_pct": cmd, "share_pct": share,
                               "sm_count": sms, "select_s": switch_s, "switch_s": switch_s})

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.current_stream(self.device).synchronize()

    def iteration(self, accumulate: int) -> tuple[float, float]:
        """One iteration on the commanded partition: copy, ``accumulate`` passes, a step.

        Parameters
        ----------
        accumulate : int
            Forward/backward passes per optimizer step.

        Returns
        -------
        tuple[float, float]
            Copy and compute seconds (synchronized: the GPU is idle when this returns).
        """
        with self.parts.iteration():
            t0 = time.perf_counter()
            x = self.host_x.to(self.device, non_blocking=True)
            y = self.host_y.to(self.device, non_blocking=True)
            self._sync()
            t1 = time.perf_counter()
            for _ in range(accumulate):
                loss = self.loss_fn(self.model(x), y) / accumulate
                loss.backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self._sync()
            t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    def size(self) -> int:
        """Passes per iteration: given, saved, or sized now to ``target_iter_s``."""
        a = self.args
        if a.accumulate:
            return int(a.accumulate)
        cal = _read_json(a.calibration_file) if a.calibration_file else None
        key = {"model": a.model, "batch_size": a.batch_size, "image_size": a.image_size,
               "target_iter_s": a.target_iter_s}
        if cal and all(cal.get(k) == v for k, v in key.items()) and cal.get("accumulate"):
            return int(cal["accumulate"])
        self.iteration(1)  # warm-up: cuDNN autotuning, allocator
        per = statistics.median(sum(self.iteration(1)) for _ in range(3))
        k = max(1, round(a.target_iter_s / max(per, 1e-6)))
        if a.calibration_file:
            write_json({**key, "accumulate": k, "per_pass_s": per, "mps_pct": self.mps_pct},
                       a.calibration_file)
        return k

    def run(self) -> int:
        """Size, signal ready, wait for the start file, then iterate and log."""
        from gpucontrol.node.hooks import after_iteration, notify_ready

        a = self.args
        k = self.size()
        if a.ready_file:
            write_json({"pid": os.getpid(), "time": time.time(), "mps_pct": self.mps_pct,
                        "accumulate": k, "model": a.model}, a.ready_file)
        notify_ready()
        if a.start_file:
            deadline = time.monotonic() + a.start_timeout_s
            while not os.path.exists(a.start_file):
                if self.stop_requested or time.monotonic() > deadline:
                    return 0
                time.sleep(0.002)
        i, t_start = 0, time.monotonic()
        log_path = a.log_path.replace("{pid}", str(os.getpid())) if a.log_path else None
        with CSVLog(log_path, LOG_FIELDS) as log:
            while not self._done(i, t_start):
                t0, w0 = time.monotonic(), time.time()
                copy_s, compute_s = self.iteration(k)
                t1 = time.monotonic()
                after_iteration()
                row = {"iteration": i, "t_s": t0 - t_start, "t_unix": w0, "iter_s": t1 - t0,
                       "copy_s": copy_s, "compute_s": compute_s,
                       "sleep_s": time.monotonic() - t1, "n_sms": None,
                       "sm_fraction": math.nan, "sm_share": math.nan, "mps_pct": self.mps_pct,
                       "n_sms_peak": None, "sm_peak_fraction": math.nan}
                log.write(row)
                if a.json_lines:
                    print(json_line({**row, "share_pct": self.parts.current}), flush=True)
                i += 1
        self.switch_log.__exit__()
        return i

    def _done(self, i: int, t0: float) -> bool:
        a = self.args
        return self.stop_requested or (a.iterations is not None and i >= a.iterations) or \
            (a.duration_s is not None and time.monotonic() - t0 >= a.duration_s)


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def build_parser() -> argparse.ArgumentParser:
    """The command line (the emulator's flags where they mean the same)."""
    ap = argparse.ArgumentParser(prog="python -m harness.hil.torch_training",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="resnet18")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--target-iter-s", type=float, default=0.2,
                    help="iteration time on the idle, full GPU the sizing aims at")
    ap.add_argument("--accumulate", type=int, default=None,
                    help="forward/backward passes per iteration (skip the sizing)")
    ap.add_argument("--calibration-file", default=None)
    ap.add_argument("--iterations", type=int, default=None,
                    help="iterations to run (0: size, save the calibration, exit)")
    ap.add_argument("--duration-s", type=float, default=None)
    ap.add_argument("--green-shares", default="25,50,75,100",
                    help="partitions made up front, %% (default %(default)s)")
    ap.add_argument("--green-pool", default="torch",
                    choices=("torch", "auto", "cuda.core", "ctypes", "simulated", "none"),
                    help="torch.cuda.green_contexts (default), another pool, the CPU dry run "
                         "(simulated) or none (the full device always)")
    ap.add_argument("--spatial-log", default=None, help="CSV of partition switches ({pid})")
    ap.add_argument("--log", dest="log_path", default=None, help="per-iteration CSV ({pid})")
    ap.add_argument("--ready-file", default=os.environ.get("GPUCONTROL_READY_FILE"))
    ap.add_argument("--start-file", default=os.environ.get("GPUCONTROL_START_FILE"))
    ap.add_argument("--start-timeout-s", type=float, default=600.0)
    ap.add_argument("--json", dest="json_lines", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def _check(args: argparse.Namespace) -> None:
    for name, lo in (("batch_size", 1), ("image_size", 16)):
        if getattr(args, name) < lo:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {lo}, "
                             f"got {getattr(args, name)}")
    if not 0.001 <= args.target_iter_s <= 60:
        raise ValueError(f"--target-iter-s must be in [0.001, 60], got {args.target_iter_s}")
    if args.accumulate is not None and args.accumulate < 1:
        raise ValueError(f"--accumulate must be >= 1, got {args.accumulate}")
    if args.iterations is not None and args.iterations < 0:
        raise ValueError(f"--iterations must be >= 0, got {args.iterations}")
    parse_shares(args.green_shares)
    mps_pct_from_env()


@gpu_entry_point("python -m harness.hil.torch_training")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check(args)
    except ValueError as exc:
        print(f"torch_training: error: {exc}", file=sys.stderr)
        return 2
    from harness.hil._signals import stop_on_signals

    job = TorchTraining(args)
    stop_on_signals(job)
    n = job.run()
    print(json_line({"summary": {"iterations": n, "model": args.model,
                                 "partitions": job.parts.backend,
                                 "why_not": job.parts.reason or None}}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
