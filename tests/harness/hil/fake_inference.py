"""A stand-in for ``python -m harness.hil.inference`` used by the CPU plant tests.

Same command line and logs as the real inference loop (it *is* the real loop), with a
synthetic backend: each batch takes ``(base + k * busy) * batch / 105`` ms of wall time, where
``busy`` is the training's current GPU duty, read from the newest training log in the working
directory: ``(mps_pct / 100) * iter_s / (iter_s + sleep_s)``. So the latency answers the real
knobs (the hook-driven sleep and the MPS restart) through the real training emulator.
"""

from __future__ import annotations

import glob
import os
import sys
import time

from harness.hil._tail import first_and_last_rows
from harness.hil.inference import InferenceLoop, build_parser, config_from_args

BASE_MS = float(os.environ.get("FAKE_INF_BASE_MS", "20"))
K_MS = float(os.environ.get("FAKE_INF_K_MS", "40"))


class SyntheticBackend:
    def __init__(self) -> None:
        self._busy = 0.0
        self._next = 0.0

    def busy(self) -> float:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + 0.02
            logs = sorted(glob.glob("training-*.csv"), key=os.path.getmtime)
            if logs:
                _, last = first_and_last_rows(logs[-1])
                if last and last.get("iter_s"):
                    it, sl = last["iter_s"], last["sleep_s"] or 0.0
                    self._busy = (last.get("mps_pct") or 100.0) / 100.0 * it / (it + sl)
        return self._busy

    def run_batch(self, batch_size: int) -> tuple[float, float]:
        ms = (BASE_MS + K_MS * self.busy()) * batch_size / 105.0
        t = time.perf_counter()
        time.sleep(ms / 1e3)
        wall = (time.perf_counter() - t) * 1e3
        return ms, wall


def main() -> int:
    cfg = config_from_args(build_parser().parse_args(sys.argv[1:]))
    loop = InferenceLoop(cfg, SyntheticBackend())
    loop.install_signal_handlers()
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
