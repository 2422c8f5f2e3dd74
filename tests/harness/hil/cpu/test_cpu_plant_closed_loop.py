"""End to end on the CPU plant: real services, identification -> model.json, the daemon as
its own process (Prometheus latency, SIGSTOP/SIGCONT, cgroup CPU share), a load burst. Short
and bounded (about 100 s); numpy workloads, the torch variant when torch is importable."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from harness.experiments.pipeline import run_pipeline


def _stopped_or_alive(pids):
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        if state != "Z":
            out.append((pid, state))
    return out


def _run(tmp_path, backend):
    # 1 s periods: the duty cycle (0.2 s run + up to 0.5 s stopped) must average within one
    return run_pipeline(tmp_path, preset="default", period_s=1.0, identify_periods=40,
                        closed_periods=36, burst=(0.4, 0.6), outer_every=200, progress=False,
                        backend=backend)


@pytest.mark.parametrize("backend", [
    "numpy",
    pytest.param("torch", marks=[
        pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                           reason="torch is not importable"),
        # measured with torch 2.13 CPU: the pipeline runs, but the training moves the
        # inference latency too little for a significant gain in 40 noisy periods (R² 0.10
        # and 0.19 in two runs); the torch preset needs its own sizes and threads
        pytest.mark.xfail(raises=RuntimeError, strict=False,
                          reason="torch CPU plant: identified gain not significant yet")]),
])
def test_latency_settles_near_the_slo_and_nothing_is_left_stopped(tmp_path, backend):
    res = _run(tmp_path, backend)
    out = tmp_path / "cpu_demo"
    assert res["daemon_exit"] == 0
    model = json.loads((out / "model.json").read_text())
    assert model["gain"] < 0  # more sleep, lower latency: identified on the live plant
    lo_hi = res["slo_choice"]
    assert "measured latency range" in lo_hi
    rows = (out / "periods.csv").read_text().splitlines()
    assert rows[0].startswith("period,phase,t_s,slo_ms,latency_ms,p99_ms,count,sleep_s,"
                              "share_pct,training_iterations")
    assert sum(",identify," in r for r in rows) >= 40
    assert sum(",closed-loop," in r for r in rows) >= 30
    # a real, noisy, shared machine (1 s periods of ~30 batches; single periods scatter by
    # 30-50 % of the SLO): the loop holds the latency's mean at the SLO, or -- when the
    # machine's other load dropped after identification and the SLO is met unslept -- below
    # it with the training unslept; it never throttles needlessly; the training progresses
    ratio = res["mean_latency_ms"] / res["slo_ms"]
    assert ratio < 1.10, res
    assert ratio > 0.90 or res["median_sleep_s"] < 0.05, res
    assert res["training_progressing"], res
    log = [json.loads(x) for x in (out / "daemon.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "cpu_share_ready" for r in log)
    assert log[-1].get("event") == "stopped"
    # nothing left running (services, loader worker, daemon), nothing left stopped
    assert len(res["pids"]) >= 4
    assert _stopped_or_alive(res["pids"]) == []
    assert not list(Path("/sys/fs/cgroup/cpu").glob(f"gpucontrol-cpuplant-{os.getpid()}*"))
