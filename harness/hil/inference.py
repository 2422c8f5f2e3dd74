"""Inference loop: ResNet-50 on random batches, per-batch latency (GPUColo paper, Sec. IV-B, VII-A).

``torchvision.models.resnet50(weights=None)`` (random weights, nothing downloaded) in eval mode
under ``torch.no_grad()``, optionally fp16 and channels-last. Batches of ``batch_size`` random
images (default 105, the GPUColo paper's Fig. 8/9 setting) run back to back. The batch size
can change
while the process runs: ``--batch-file`` holds an integer that is re-read (one ``stat`` per
batch) whenever it changes; the burst experiment writes 115 there and later 105.

Each batch is timed twice: with CUDA events around the forward pass (``gpu_ms``) and with the
wall clock from submission until the result is ready (``wall_ms``; what the service sees, and
what the controller uses by default). Each batch is logged to a CSV (``--log``: ``batch, t_unix,
batch_size, gpu_ms, wall_ms``, line-buffered so another process can tail it) and, with
``--report``, sent to the per-GPU daemon with ``gpucontrol.node.client.report_latency``
(``--socket`` or ``$GPUCONTROL_SOCKET`` names the daemon's socket). ``{pid}`` in the log
path becomes the process id.

Run ``python -m harness.hil.inference --help``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from harness.hil._lazy import GPUUnavailableError, gpu_entry_point, require
from harness.hil._signals import stop_on_signals
from harness.results import CSVLog, IntFile, json_line, write_json

LOG_FIELDS = ("batch", "t_unix", "batch_size", "gpu_ms", "wall_ms")


@dataclass(frozen=True)
class InferenceConfig:
    """What one inference process does. Validated at construction."""

    batch_size: int = 105
    image_size: int = 224
    fp16: bool = False
    channels_last: bool = False
    batches: int | None = None
    duration_s: float | None = None
    warmup: int = 5
    interval_s: float = 0.0
    batch_file: str | None = None
    log_path: str | None = None
    ready_file: str | None = None
    report: bool = False
    socket_path: str | None = None
    gpu: int = 0
    json_lines: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if not (1 <= self.batch_size <= 4096):
            raise ValueError(f"batch_size must be in [1, 4096], got {self.batch_size!r}")
        if not (32 <= self.image_size <= 1024):
            raise ValueError(f"image_size must be in [32, 1024], got {self.image_size!r}")
        if self.batches is not None and self.batches < 0:
            raise ValueError(f"batches must be >= 0, got {self.batches!r}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {self.duration_s!r}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup!r}")
        if not (0.0 <= self.interval_s <= 60.0):
            raise ValueError(f"interval_s must be in [0, 60], got {self.interval_s!r}")
        if self.gpu < 0:
            raise ValueError(f"gpu must be >= 0, got {self.gpu!r}")


@dataclass(frozen=True)
class BatchRecord:
    batch: int
    t_unix: float
    batch_size: int
    gpu_ms: float
    wall_ms: float

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class InferenceSummary:
    batches: int = 0
    wall_ms: list[float] = field(default_factory=list)
    gpu_ms: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        def stats(xs: list[float]) -> dict[str, float]:
            xs = sorted(x for x in xs if math.isfinite(x))
            if not xs:
                return {"mean": math.nan, "p50": math.nan, "p99": math.nan}
            p99 = xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)]
            return {"mean": statistics.fmean(xs), "p50": statistics.median(xs), "p99": p99}

        return {"batches": self.batches, "wall_ms": stats(self.wall_ms),
                "gpu_ms": stats(self.gpu_ms)}


class InferenceBackend(Protocol):
    def run_batch(self, batch_size: int) -> tuple[float, float]:
        """Run one batch; return ``(gpu_ms, wall_ms)``."""


class TorchResNet50:
    """ResNet-50 forward passes on random inputs, timed with CUDA events and the wall clock."""

    def __init__(self, *, fp16: bool = False, channels_last: bool = False,
                 image_size: int = 224, gpu: int = 0, seed: int = 0) -> None:
        torch = require("torch")
        tv_models = require("torchvision.models")
        if not torch.cuda.is_available():
            raise GPUUnavailableError("torch sees no CUDA device; the inference loop needs one")
        torch.manual_seed(seed)
        self._torch = torch
        self.device = torch.device("cuda", gpu)
        torch.cuda.set_device(self.device)
        torch.backends.cudnn.benchmark = True
        self.dtype = torch.float16 if fp16 else torch.float32
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        model = tv_models.resnet50(weights=None).eval().to(self.device, dtype=self.dtype)
        self.model = model.to(memory_format=self.memory_format)
        self.image_size = image_size
        self._inputs: dict[int, Any] = {}
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def _input(self, batch_size: int):
        x = self._inputs.get(batch_size)
        if x is None:
            x = self._torch.empty((batch_size, 3, self.image_size, self.image_size),
                                  device=self.device, dtype=self.dtype)
            x = x.contiguous(memory_format=self.memory_format)
            self._inputs = {batch_size: x}  # keep one size: free the old buffer
        return x

    def run_batch(self, batch_size: int) -> tuple[float, float]:
        torch = self._torch
        x = self._input(batch_size)
        with torch.no_grad():
            x.normal_()  # a fresh random batch, prepared before the clock starts
            torch.cuda.current_stream().synchronize()
            t0 = time.perf_counter()
            self._start.record()
            self.model(x)
            self._end.record()
            self._end.synchronize()
            wall_ms = (time.perf_counter() - t0) * 1e3
        return float(self._start.elapsed_time(self._end)), wall_ms


def resolve_reporter(socket_path: str | None = None) -> Callable[[float], Any]:
    """A callable sending one batch latency (ms) to the daemon with
    ``gpucontrol.node.client.report_latency`` (non-blocking; drops when no daemon listens); a
    no-op with a warning when that module is unavailable. ``socket_path`` None means
    ``$GPUCONTROL_SOCKET`` or the daemon's default for GPU 0."""
    try:
        from gpucontrol.node.client import report_latency
    except ImportError as exc:
        warnings.warn(f"gpucontrol.report_latency is unavailable ({exc}); latencies are "
                      "only logged", RuntimeWarning, stacklevel=2)
        return lambda ms: None

    def send(ms: float) -> Any:
        return report_latency(ms, socket_path=socket_path)

    return send


class InferenceLoop:
    """The batch loop; ``backend`` does the GPU work (a fake in the CPU tests)."""

    def __init__(self, config: InferenceConfig, backend: InferenceBackend, *,
                 reporter: Callable[[float], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, out=None) -> None:
        self.cfg = config
        self.backend = backend
        self.batch_size = IntFile(config.batch_file, config.batch_size, 1, 4096)
        if reporter is None and config.report:
            reporter = resolve_reporter(config.socket_path)
        self.reporter = reporter
        self.clock, self.wall, self.sleep = clock, wall, sleep
        self.out = out if out is not None else sys.stdout
        self.stop_requested = False

    def warm_up(self) -> None:
        for _ in range(self.cfg.warmup):
            self.backend.run_batch(self.batch_size.value())

    def signal_ready(self) -> None:
        if self.cfg.ready_file:
            write_json({
                "pid": os.getpid(), "time": self.wall(), "batch_size": self.batch_size.value(),
                "fp16": self.cfg.fp16, "channels_last": self.cfg.channels_last},
                self.cfg.ready_file)

    def _done(self, i: int, t0: float) -> bool:
        if self.stop_requested:
            return True
        if self.cfg.batches is not None and i >= self.cfg.batches:
            return True
        return self.cfg.duration_s is not None and self.clock() - t0 >= self.cfg.duration_s

    def run(self) -> InferenceSummary:
        self.warm_up()
        self.signal_ready()
        summary = InferenceSummary()
        with CSVLog(self.cfg.log_path, LOG_FIELDS) as log:
            t0 = self.clock()
            i = 0
            while not self._done(i, t0):
                bs = self.batch_size.value()
                gpu_ms, wall_ms = self.backend.run_batch(bs)
                rec = BatchRecord(i, self.wall(), bs, gpu_ms, wall_ms)
                summary.batches += 1
                summary.wall_ms.append(wall_ms)
                summary.gpu_ms.append(gpu_ms)
                log.write(rec.as_row())
                if self.reporter is not None:
                    try:
                        self.reporter(wall_ms)
                    except OSError as exc:  # daemon down: keep serving, say so once
                        warnings.warn(f"latency report failed: {exc}", RuntimeWarning,
                                      stacklevel=2)
                        self.reporter = None
                if self.cfg.json_lines:
                    self.out.write(json_line(rec.as_row()) + "\n")
                    self.out.flush()
                i += 1
                if self.cfg.interval_s > 0:
                    self.sleep(self.cfg.interval_s)
        return summary

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT finish the current step and stop cleanly."""
        stop_on_signals(self)


def build_parser() -> argparse.ArgumentParser:
    d = InferenceConfig()
    ap = argparse.ArgumentParser(
        prog="python -m harness.hil.inference",
        description="ResNet-50 inference on random batches with per-batch latency.")
    ap.add_argument("--batch-size", type=int, default=d.batch_size)
    ap.add_argument("--batch-file", default=None,
                    help="file holding the batch size; re-read when it changes")
    ap.add_argument("--image-size", type=int, default=d.image_size)
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--duration-s", type=float, default=None)
    ap.add_argument("--warmup", type=int, default=d.warmup)
    ap.add_argument("--interval-s", type=float, default=d.interval_s,
                    help="pause between batches (default: back to back)")
    ap.add_argument("--log", dest="log_path", default=None, help="per-batch CSV")
    ap.add_argument("--ready-file", default=None)
    ap.add_argument("--report", action="store_true",
                    help="send each latency to the daemon (gpucontrol.node.client.report_latency)")
    ap.add_argument("--socket", dest="socket_path", default=None,
                    help="the daemon's socket (default $GPUCONTROL_SOCKET or its default path)")
    ap.add_argument("--gpu", type=int, default=d.gpu)
    ap.add_argument("--json", dest="json_lines", action="store_true")
    ap.add_argument("--seed", type=int, default=d.seed)
    return ap


def config_from_args(args: argparse.Namespace) -> InferenceConfig:
    return InferenceConfig(
        batch_size=args.batch_size, image_size=args.image_size, fp16=args.fp16,
        channels_last=args.channels_last, batches=args.batches, duration_s=args.duration_s,
        warmup=args.warmup, interval_s=args.interval_s, batch_file=args.batch_file,
        log_path=args.log_path, ready_file=args.ready_file, report=args.report,
        socket_path=args.socket_path, gpu=args.gpu,
        json_lines=args.json_lines, seed=args.seed)


@gpu_entry_point("python -m harness.hil.inference")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        print(f"inference: error: {exc}", file=sys.stderr)
        return 2
    backend = TorchResNet50(fp16=cfg.fp16, channels_last=cfg.channels_last,
                            image_size=cfg.image_size, gpu=cfg.gpu, seed=cfg.seed)
    loop = InferenceLoop(cfg, backend)
    loop.install_signal_handlers()
    summary = loop.run()
    print(json_line({"summary": summary.as_dict()}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
