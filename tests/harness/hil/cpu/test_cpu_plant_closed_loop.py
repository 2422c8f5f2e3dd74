"""End to end on the CPU plant: real services, identification -> model.json, the daemon as
its own process (Prometheus latency, SIGSTOP/SIGCONT, cgroup CPU share), a load burst. Short
and bounded (about 80 s; about 125 s when the machine's load makes the pipeline identify a
second time); numpy workloads, the torch variant when torch is importable.

A shared machine's other load can hide the sleep's effect on the latency in both of the
pipeline's identifications (the documented outcome: one line, no daemon, nothing left). The
test then checks that outcome against a reference from the same run: the knob acted (the
training ran measurably less at the high sleep than at none, in the very periods the fit
found no gain in) and the fits did not find the opposite sign; it reports the closed loop as
not reached (a skip, after those assertions) instead of failing on the machine's load."""

import csv
import importlib.util
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from harness.experiments.pipeline import run_pipeline
from harness.experiments.plants import ExperimentFailed
from harness.hil.cpu.plant import CPUPlantConfig

# the plant's latency is the machine's: another test beside it (make test's other worker)
# moves it in ways no busy loop does, so this runs alone (make test: the solo part)
pytestmark = pytest.mark.solo

QUANTUM_S = CPUPlantConfig().run_quantum_s
IDENTIFY_PERIODS = 32
CLOSED_PERIODS = 28


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
    # 1 s periods (the benchmark's are 4 s): each still averages about 30 run/stop cycles of
    # the duty cycler (a run quantum of 0.03 s, sleeps of 0..0.03 s identified); 3 s of
    # start-up discarded (the services' first period is the only one off: 8 s is the
    # demo's margin)
    return run_pipeline(tmp_path, preset="default", period_s=1.0,
                        identify_periods=IDENTIFY_PERIODS, closed_periods=CLOSED_PERIODS,
                        burst=(0.4, 0.6), outer_every=200, progress=False, backend=backend,
                        warmup_s=3.0)


def _services_of(tmp_path):
    """PIDs of live processes whose command line names a path under ``tmp_path`` (the
    services' files and the daemon's model live there)."""
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and str(tmp_path).encode() in _cmdline(p)
            and _stopped_or_alive([int(p.name)])]


def _set_point_over_slo(log, slo_ms):
    """The daemon's set point over the SLO, the median over its closed-loop periods past
    the first 5: each period's reading plus the error the loop reported for it."""
    recs = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    aims = [(r["mean_ms"] + r["error_ms"]) / slo_ms for r in recs
            if "period" in r and "event" not in r
            and str(r.get("reason") or "").startswith("inner")
            and isinstance(r.get("mean_ms"), (int, float))
            and isinstance(r.get("error_ms"), (int, float))
            and np.isfinite(r["mean_ms"] + r["error_ms"])][5:]
    assert aims, "no closed-loop period with a reading and an error in the daemon's log"
    return float(np.median(aims))


def _cmdline(p):
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


def _knob_bound(msg):
    """The most training the high sleep (one run quantum ``q``) may leave against none and
    still count as the knob acting, at the load average the refusal reports. A training that
    gets a fraction ``c`` of a CPU while runnable needs ``q / c`` of wall time per quantum, so
    sleeping ``q`` leaves ``1 / (1 + c)`` of its iterations: 1/2 on a quiet machine, 0.79 at
    load 7.5 on 2 CPUs (``c = CPUs / load``, at most 1); a knob that did nothing reads about
    1. The bound is half-way between the two, and never under 0.8."""
    words = msg.split("load average ", 1)[1].split()
    load, cpus = float(words[0]), float(words[2])
    c = min(1.0, cpus / max(load, 1e-9))
    return max(0.8, 0.5 * (1.0 + 1.0 / (1.0 + c)))


def _check_the_refusal_came_from_the_load(tmp_path, exc):
    """Identification refused twice: the knob must still have acted in those very periods
    (training iterations at the high sleep well under those at none: the same run's
    reference, whatever the load), no fit may have found a significantly positive gain, and
    nothing is left of the run."""
    msg = str(exc)
    assert "no significant gain twice" in msg and "try again" in msg, msg
    assert not (tmp_path / "cpu_demo").exists()  # nothing half-written
    partial = next(tmp_path.glob(".cpu_demo.partial-*"))
    with open(partial / "periods.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] == "identify"]
    by_sleep = {}
    for r in rows[3:]:  # past the start-up periods
        by_sleep.setdefault(float(r["sleep_s"]), []).append(float(r["training_iterations"]))
    low, high = min(by_sleep), max(by_sleep)
    ran = np.median(by_sleep[high]) / np.median(by_sleep[low])
    assert high == QUANTUM_S and ran < _knob_bound(msg), (ran, _knob_bound(msg), by_sleep)
    with open(partial / "identify" / "identify_summary.csv") as f:
        fit = next(csv.DictReader(f))
    assert float(fit["gain_ci_low"]) < 0, fit  # not a significantly positive gain either
    assert _services_of(tmp_path) == []
    assert not list(Path("/sys/fs/cgroup/cpu").glob(f"gpucontrol-cpuplant-{os.getpid()}*"))


@pytest.mark.parametrize("backend", [
    "numpy",
    pytest.param("torch", marks=[
        pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                           reason="torch is not importable"),
        # torch 2.13 CPU: with the old 0.2 s run quantum the identification found no
        # significant gain (R² 0.10 and 0.19 in two runs); with 0.03 s it found one in two
        # of three runs so far (R² 0.81 on 4 s periods, 0.44 on this test's 1 s periods;
        # the third, in a full suite run, was refused): still expected to fail sometimes
        pytest.mark.xfail(raises=RuntimeError, strict=False,
                          reason="torch CPU plant: identified gain not significant yet")]),
])
def test_latency_settles_near_the_slo_and_nothing_is_left_stopped(tmp_path, backend):
    try:
        res = _run(tmp_path, backend)
    except ExperimentFailed as exc:
        _check_the_refusal_came_from_the_load(tmp_path, exc)
        if backend == "torch":
            raise
        pytest.skip(f"closed loop not reached, the machine's load hid the knob (checked): "
                    f"{exc}")
    out = tmp_path / "cpu_demo"
    assert res["daemon_exit"] == 0
    model = json.loads((out / "model.json").read_text())
    assert model["gain"] < 0  # more sleep, lower latency: identified on the live plant
    lo_hi = res["slo_choice"]
    assert "measured latency range" in lo_hi
    rows = (out / "periods.csv").read_text().splitlines()
    assert rows[0].startswith("period,phase,t_s,slo_ms,latency_ms,p99_ms,count,sleep_s,"
                              "share_pct,training_iterations")
    assert sum(",identify," in r for r in rows) >= IDENTIFY_PERIODS
    assert sum(",closed-loop," in r for r in rows) >= CLOSED_PERIODS - 6
    # the burst fell in the middle of the closed loop (0.4..0.6 of its periods), not on its
    # first periods: on a loaded machine the daemon's start took seconds, and a burst timed
    # from its launch wound the sleep up before the loop had settled
    burst = [r.split(",")[-1] == "1" for r in rows if ",closed-loop," in r]
    on = [k for k, b in enumerate(burst) if b]
    assert on and 0.3 * len(burst) <= on[0] <= 0.5 * len(burst), burst
    # a real, noisy, shared machine (1 s periods of ~30 batches; single periods scatter by
    # 5-30 % of the SLO, and other sessions' load can take the machine for a few periods:
    # hence a 10 %-trimmed mean): the loop holds the latency at the SLO, or -- when the
    # machine's other load dropped after identification and the SLO is met unslept -- below
    # it with the training (nearly) unslept; it never throttles needlessly; the training
    # progresses
    closed = [r.split(",") for r in rows if ",closed-loop," in r][5:]
    lat = sorted(float(r[4]) for r in closed if r[4])
    k = len(lat) // 10
    ratio = sum(lat[k:len(lat) - k]) / (len(lat) - 2 * k) / res["slo_ms"]
    # over it only when other load took the machine beyond the knob's reach for longer (seen
    # in the benchmark: the inference fell to half its batch rate): then the loop must have
    # pushed the right way, cutting the training to under half its time (median sleep of
    # the second half above one run quantum)
    late = [float(r[7]) for r in closed[len(closed) // 2:] if r[7]]
    late_sleep = sorted(late)
    assert ratio < 1.10 or late_sleep[len(late_sleep) // 2] > QUANTUM_S, (ratio, res)
    # under it only by what the loop aims under it (its set point: the SLO less the margin
    # that the readings' noise asks for, up to 10 %; read back from the daemon's log, the
    # reading plus the error it reported), with the training (nearly) unslept, or -- after
    # other load had wound the sleep up past the identified range (seen: 72-74 ms at the
    # start, sleep 0.07 s, then the load left) -- with the loop unwinding, the sleep falling
    # through the second half
    unwinding = late[-1] < late[0] - 0.1 * QUANTUM_S
    aim = _set_point_over_slo(out / "daemon.jsonl", res["slo_ms"])
    assert 0.89 <= aim <= 1.001, aim  # (the log rounds its figures)
    # "near" is 10 %, or three standard errors of the trimmed mean where the machine's noise
    # makes that wider (seen beside a busy loop: periods scattered by 23 % of the SLO, 26 %
    # of them over 1.05 SLO, and the trimmed mean 12 % under with a little sleep left)
    trimmed = np.array(lat[k:len(lat) - k]) / res["slo_ms"]
    se = float(np.std(trimmed, ddof=1) / math.sqrt(len(trimmed)))
    near = max(0.10, 3.0 * se)
    assert ratio > aim - near or res["median_sleep_s"] < 0.2 * QUANTUM_S or unwinding, (
        ratio, aim, near, res, late)
    assert res["training_progressing"], res
    log = [json.loads(x) for x in (out / "daemon.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "cpu_share_ready" for r in log)
    assert log[-1].get("event") == "stopped"
    # nothing left running (services, loader worker, daemon), nothing left stopped
    assert len(res["pids"]) >= 4
    assert _stopped_or_alive(res["pids"]) == []
    assert not list(Path("/sys/fs/cgroup/cpu").glob(f"gpucontrol-cpuplant-{os.getpid()}*"))
