"""CPU-side tests of the training emulator: sizing, the loop, the hook, the ready/start
handshake, calibration reuse and the per-iteration log, with a fake GPU backend."""

import csv
import json
import math
import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.hil.smid import summarize_smids
from harness.hil.training_emulator import (
    EmulatorConfig,
    IterationTiming,
    TrainingEmulator,
    build_parser,
    config_from_args,
    load_calibration,
    matmuls_for_target,
    mps_pct_from_env,
    resolve_hook,
    sm_share,
)


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class FakeBackend:
    """Matmuls cost ``per_matmul_s / share`` each; the copy costs ``copy_s``; the %smid sample
    reaches ``sms`` of ``multiprocessor_count`` SMs."""

    multiprocessor_count = 82

    def __init__(self, clock, per_matmul_s=0.004, copy_s=0.003, share=1.0, sms=30):
        self.clock, self.per, self.copy_s, self.share, self.sms = (clock, per_matmul_s, copy_s,
                                                                    share, sms)
        self.iterations = []
        self.timed = 0

    def time_matmuls(self, n):
        self.timed += 1
        dt = n * self.per / self.share
        self.clock.t += dt
        return dt

    def time_copy(self):
        self.clock.t += self.copy_s
        return self.copy_s

    def run_iteration(self, matmuls):
        self.iterations.append(matmuls)
        compute = matmuls * self.per / self.share
        self.clock.t += self.copy_s + compute
        return IterationTiming(self.copy_s, compute,
                               summarize_smids(range(self.sms), self.multiprocessor_count))


def make(cfg=None, *, share=1.0, hook=None, environ=None, **bk):
    clock = FakeClock()
    backend = FakeBackend(clock, share=share, **bk)
    emu = TrainingEmulator(cfg or EmulatorConfig(iterations=10), backend,
                           hook=hook or (lambda: None), environ=environ or {},
                           clock=clock, sleep=clock.sleep)
    return emu, backend, clock


# ---- pure helpers -----------------------------------------------------------------------------
@pytest.mark.parametrize("raw, expected", [("100", 100.0), ("30", 30.0), ("12.5", 12.5),
                                           ("", None), (None, None)])
def test_mps_pct_from_env(raw, expected):
    env = {} if raw is None else {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": raw}
    assert mps_pct_from_env(env) == expected


@pytest.mark.parametrize("raw", ["0", "101", "-5", "abc", "nan"])
def test_mps_pct_from_env_rejects_bad_values(raw):
    with pytest.raises(ValueError, match="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"):
        mps_pct_from_env({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": raw})


@given(st.floats(0.01, 5.0), st.floats(1e-4, 0.5), st.floats(0.0, 0.05))
def test_matmuls_for_target_is_the_closest_count(target, per, copy_s):
    n = matmuls_for_target(target, per, copy_s)
    assert n >= 1
    err = abs(copy_s + n * per - target)
    if n > 1:
        assert err <= abs(copy_s + (n - 1) * per - target) + 1e-12
    assert err <= abs(copy_s + (n + 1) * per - target) + 1e-12


def test_matmuls_for_target_rejects_zero_cost():
    with pytest.raises(ValueError, match="per_matmul_s"):
        matmuls_for_target(0.2, 0.0)


@pytest.mark.parametrize("frac, run, slept, share", [(0.4, 0.2, 0.0, 0.4), (0.4, 0.2, 0.2, 0.2),
                                                     (0.328, 0.2, 0.8, 0.0656)])
def test_sm_share_weights_by_time_awake(frac, run, slept, share):
    assert sm_share(frac, run, slept) == pytest.approx(share, abs=1e-12)


def test_sm_share_nan_without_sample():
    assert math.isnan(sm_share(math.nan, 0.2, 0.1))


@pytest.mark.parametrize("kw, field", [
    ({"target_iter_s": 0}, "target_iter_s"), ({"matrix_n": 8}, "matrix_n"),
    ({"dtype": "int8"}, "dtype"), ({"copy_mb": -1}, "copy_mb"), ({"matmuls": 0}, "matmuls"),
    ({"iterations": -1}, "iterations"), ({"duration_s": 0}, "duration_s"),
    ({"start_timeout_s": 0}, "start_timeout_s")])
def test_config_validation_names_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        EmulatorConfig(**kw)


# ---- the loop ---------------------------------------------------------------------------------
@pytest.mark.parametrize("per", [0.0013, 0.004, 0.011])
def test_calibration_hits_the_target_within_one_matmul(per):
    emu, backend, _ = make(EmulatorConfig(iterations=5), per_matmul_s=per)
    summary = emu.run()
    assert summary.iterations == 5
    assert all(m == summary.matmuls for m in backend.iterations)
    for t in summary.iter_s:
        assert abs(t - 0.2) <= per / 2 + 1e-9


def test_lower_share_means_longer_iterations_with_fixed_work():
    emu, backend, _ = make(EmulatorConfig(iterations=3, matmuls=50), share=0.5,
                           environ={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"})
    summary = emu.run()
    assert backend.iterations == [50, 50, 50]
    assert summary.mps_pct == 40.0
    assert summary.as_dict()["median_iter_s"] == pytest.approx(0.003 + 50 * 0.008)


def test_hook_runs_after_every_iteration_and_its_sleep_is_recorded(tmp_path):
    clock_box = {}

    def hook():
        clock_box["clock"].sleep(0.2)
        clock_box["calls"] = clock_box.get("calls", 0) + 1

    log = tmp_path / "train.csv"
    emu, _, clock = make(EmulatorConfig(iterations=4, matmuls=49, log_path=str(log)),
                               hook=hook, sms=41)
    clock_box["clock"] = clock
    summary = emu.run()
    assert clock_box["calls"] == 4
    rows = list(csv.DictReader(log.read_text().splitlines()))
    assert len(rows) == 4
    for r in rows:
        assert float(r["sleep_s"]) == pytest.approx(0.2)
        assert float(r["iter_s"]) == pytest.approx(0.199)
        assert int(r["n_sms"]) == 41
        assert float(r["sm_fraction"]) == pytest.approx(0.5)
        assert float(r["sm_share"]) == pytest.approx(0.5 * 0.199 / 0.399)
    assert summary.as_dict()["mean_sm_share"] == pytest.approx(0.5 * 0.199 / 0.399)
    # iterations are spaced by work + sleep
    t = [float(r["t_s"]) for r in rows]
    assert t[1] - t[0] == pytest.approx(0.399)


def test_duration_stops_the_loop():
    emu, _, _ = make(EmulatorConfig(duration_s=1.0, matmuls=49))
    assert emu.run().iterations == 6  # 0.199 s each: stops after the one crossing 1 s


def test_stop_request_ends_after_the_current_iteration():
    emu, backend, _ = make(EmulatorConfig(matmuls=10))
    emu.hook = lambda: setattr(emu, "stop_requested", len(backend.iterations) >= 3)
    assert emu.run().iterations == 3


def test_ready_file_is_written_before_the_first_iteration_and_start_file_gates(tmp_path):
    ready, start = tmp_path / "ready.json", tmp_path / "go"
    cfg = EmulatorConfig(iterations=2, matmuls=20, ready_file=str(ready),
                         start_file=str(start))
    emu, backend, clock = make(cfg, environ={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30"})
    polls = []

    def sleep(s):
        polls.append(s)
        assert ready.exists() and backend.iterations == []
        info = json.loads(ready.read_text())
        assert info["mps_pct"] == 30.0 and info["matmuls"] == 20
        assert info["multiprocessor_count"] == 82
        if len(polls) == 5:
            start.touch()
        clock.sleep(s)

    emu.sleep = sleep
    assert emu.run().iterations == 2
    assert len(polls) == 5


def test_start_timeout_gives_up_without_iterating(tmp_path):
    cfg = EmulatorConfig(matmuls=20, start_file=str(tmp_path / "never"), start_timeout_s=0.1)
    emu, backend, _ = make(cfg)
    assert emu.run().iterations == 0
    assert backend.iterations == []


def test_calibration_file_is_saved_then_reused(tmp_path):
    cal = tmp_path / "cal.json"
    cfg = EmulatorConfig(iterations=1, calibration_file=str(cal))
    emu, _, _ = make(cfg, per_matmul_s=0.004)
    n = emu.run().matmuls
    saved = json.loads(cal.read_text())
    assert saved["matmuls"] == n and saved["matrix_n"] == 4096
    # a restart under MPS 20 %: slower GPU, but the same work per iteration
    emu2, backend2, _ = make(cfg, per_matmul_s=0.004, share=0.2,
                             environ={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "20"})
    assert emu2.run().matmuls == n
    assert backend2.iterations == [n]
    assert backend2.timed == 1  # warm-up only, no calibration


def test_calibration_for_another_shape_is_ignored(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"matmuls": 7, "matrix_n": 2048, "dtype": "float32",
                               "copy_mb": 64.0, "target_iter_s": 0.2}))
    assert load_calibration(cal, EmulatorConfig()) is None
    assert load_calibration(cal, EmulatorConfig(matrix_n=2048))["matmuls"] == 7


def test_calibrating_under_an_mps_cap_warns():
    emu, _, _ = make(EmulatorConfig(iterations=1),
                     environ={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"})
    with pytest.warns(RuntimeWarning, match="calibrat"):
        emu.run()


def test_json_lines_on_stdout():
    import io

    out = io.StringIO()
    emu, _, _ = make(EmulatorConfig(iterations=2, matmuls=5, json_lines=True))
    emu.out = out
    emu.run()
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["iteration"] for x in lines] == [0, 1]


# ---- hook resolution and CLI ------------------------------------------------------------------
def test_resolve_hook_uses_gpucontrol_hooks_when_present(monkeypatch):
    fake = types.ModuleType("gpucontrol.node.hooks")
    fake.after_iteration = lambda: "slept"
    monkeypatch.setitem(sys.modules, "gpucontrol.node.hooks", fake)
    assert resolve_hook()() == "slept"


def test_resolve_hook_falls_back_to_a_noop_with_a_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "gpucontrol.node.hooks", None)
    with pytest.warns(RuntimeWarning, match="after_iteration"):
        hook = resolve_hook()
    assert hook() is None


def test_cli_arguments_map_to_the_config():
    args = build_parser().parse_args([
        "--target-iter-s", "0.3", "--matmuls", "12", "--copy-mb", "0", "--iterations", "7",
        "--no-smid", "--ready-file", "r.json", "--start-file", "go", "--log", "x.csv", "--json"])
    cfg = config_from_args(args)
    assert cfg == EmulatorConfig(target_iter_s=0.3, matmuls=12, copy_mb=0.0, iterations=7,
                                 sample_sm=False, ready_file="r.json", start_file="go",
                                 log_path="x.csv", json_lines=True)
