"""The MPS client against a fake nvidia-cuda-mps-control, and restarts through a launcher."""

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _children import state

from gpucontrol.node.actuators import MPSActuator, MPSControl, MPSError, MPSUnavailable

# A stand-in for nvidia-cuda-mps-control: "-d" starts a "daemon" (a state file in the pipe
# directory), stdin commands are answered from that state; every call is logged.
FAKE = r'''
import json, os, sys
pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
log = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
state_f = os.path.join(pipe, "control.json")
def record(line):
    with open(os.path.join(log, "control.log"), "a") as f:
        f.write(line + "\n")
if sys.argv[1:] == ["-d"]:
    if os.path.exists(state_f):
        print("An instance of this daemon is already running", file=sys.stderr); sys.exit(1)
    json.dump({"pct": 100.0, "servers": {"4242": [777, 778]}}, open(state_f, "w"))
    open(os.path.join(pipe, "nvidia-cuda-mps-control.pid"), "w").write(str(os.getpid()))
    record("-d"); sys.exit(0)
if not os.path.exists(state_f):
    print("Cannot find MPS control daemon process", file=sys.stderr); sys.exit(1)
st = json.load(open(state_f))
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    record(line.strip())
    if cmd[0] == "get_server_list":
        print("\n".join(st["servers"]))
    elif cmd[0] == "get_client_list":
        print("\n".join(map(str, st["servers"].get(cmd[1], []))))
    elif cmd[0] == "get_default_active_thread_percentage":
        print(f"{st['pct']:.1f}")
    elif cmd[0] == "set_default_active_thread_percentage":
        v = float(cmd[1])
        if not 0 < v <= 100:
            print("invalid percentage"); sys.exit(1)
        st["pct"] = v; print(f"{v:.1f}")
    elif cmd[0] == "terminate_client":
        st["servers"][cmd[1]].remove(int(cmd[2]))
    elif cmd[0] == "quit":
        os.unlink(state_f); sys.exit(0)
    else:
        print(f"unknown command {cmd[0]}"); sys.exit(1)
json.dump(st, open(state_f, "w"))
'''

# A fake training: records its MPS share, loads for a while, then says it is ready.
TRAIN = r'''
import os, sys, time, signal
from gpucontrol.node.hooks import after_iteration
out, load_s = sys.argv[1], float(sys.argv[2])
pct = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
if pct == "13":
    sys.exit(3)  # this share "fails" (e.g. out of memory)
with open(out, "a") as f:
    f.write(f"{os.getpid()} {pct} {os.environ.get('CUDA_MPS_PIPE_DIRECTORY')}\n")
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
time.sleep(load_s)
while True:
    time.sleep(0.01)
    after_iteration()
'''


@pytest.fixture
def fake_binary(tmp_path):
    p = tmp_path / "nvidia-cuda-mps-control"
    p.write_text(f"#!{sys.executable}\n{FAKE}")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def test_unavailable_binary_is_reported():
    ctl = MPSControl("/nonexistent/nvidia-cuda-mps-control")
    assert not ctl.available()
    with pytest.raises(MPSUnavailable):
        ctl.start()
    assert not ctl.health()


def test_private_daemon_lifecycle(fake_binary):
    ctl = MPSControl(fake_binary)
    assert ctl.available()
    assert not ctl.health()  # nothing started yet... in the default directories
    with ctl:
        root = Path(ctl.pipe_dir).parent
        assert root.stat().st_mode & 0o777 == 0o700
        assert ctl.env() == {"CUDA_MPS_PIPE_DIRECTORY": ctl.pipe_dir,
                             "CUDA_MPS_LOG_DIRECTORY": ctl.log_dir}
        assert ctl.health()
        assert ctl.get_default_active_thread_percentage() == 100.0
        assert ctl.set_default_active_thread_percentage(40) == 40.0
        assert ctl.server_list() == [4242]
        assert ctl.client_list(4242) == [777, 778]
        ctl.terminate_client(4242, 777)
        assert ctl.client_list(4242) == [778]
        with pytest.raises(ValueError):
            ctl.set_default_active_thread_percentage(0)
        with pytest.raises(MPSError, match="unknown"):
            ctl.command("bogus")
        log = (Path(ctl.log_dir) / "control.log").read_text()
        assert "set_default_active_thread_percentage 40" in log
    assert not root.exists()  # quit removed the private directories
    assert ctl.pipe_dir is None


def test_existing_daemon_is_not_started_or_removed(fake_binary, tmp_path):
    pipe, log = tmp_path / "pipe", tmp_path / "log"
    pipe.mkdir()
    log.mkdir()
    own = MPSControl(fake_binary, pipe_dir=str(pipe), log_dir=str(log))
    own.start()
    other = MPSControl(fake_binary, pipe_dir=str(pipe), log_dir=str(log))
    assert other.health()
    other.quit()  # not started by `other`: no quit sent
    assert own.health()
    own.quit()
    assert not own.health() and pipe.exists()


def test_start_failure_is_an_mps_error(fake_binary, tmp_path):
    pipe, log = tmp_path / "pipe", tmp_path / "log"
    pipe.mkdir()
    log.mkdir()
    MPSControl(fake_binary, pipe_dir=str(pipe), log_dir=str(log)).start()
    with pytest.raises(MPSError, match="already running"):
        MPSControl(fake_binary, pipe_dir=str(pipe), log_dir=str(log)).start()


def _launches(path):
    return [line.split() for line in Path(path).read_text().splitlines()]


def test_cold_restart_measures_downtime(fake_binary, tmp_path):
    out = tmp_path / "launches.txt"
    with MPSControl(fake_binary) as ctl:
        act = MPSActuator([sys.executable, "-c", TRAIN, str(out), "0.3"], mps=ctl,
                          stop_timeout_s=5)
        try:
            pid0 = act.start(80)
            res = act.apply(30)
            assert res.ok and not res.shadow
            assert res.old_pid == pid0 and res.new_pid == act.pid != pid0
            assert 0.3 <= res.downtime_s < 5.0  # the new process loads for 0.3 s
            assert act.mps_pct == 30
            launches = _launches(out)
            assert [x[1] for x in launches] == ["80", "30"]
            assert launches[1][2] == ctl.pipe_dir
            assert state(pid0) in (None, "Z")
        finally:
            act.stop()
    assert not act.running()


def test_shadow_restart_hides_the_load_time(tmp_path):
    out = tmp_path / "launches.txt"
    act = MPSActuator([sys.executable, "-c", TRAIN, str(out), "0.3"], shadow=True,
                      stop_timeout_s=5)
    try:
        pid0 = act.start(50)
        t0 = time.monotonic()
        res = act.apply(70)
        assert res.ok and res.shadow and res.downtime_s == 0.0
        assert res.total_s >= 0.3  # it waited for the new one to be ready...
        assert res.overlap_s < 3.0  # ...then stopped the old one (not after its 5 s timeout)
        assert time.monotonic() - t0 >= 0.3
        assert act.pid != pid0 and act.mps_pct == 70
        assert act.history[-1] is res
    finally:
        act.stop()


@pytest.mark.parametrize("shadow", [False, True])
def test_failed_restart_keeps_training_running(tmp_path, shadow):
    out = tmp_path / "launches.txt"
    act = MPSActuator([sys.executable, "-c", TRAIN, str(out), "0.0"], shadow=shadow,
                      stop_timeout_s=5)
    try:
        act.start(60)
        res = act.apply(13)  # the fake training exits at 13 %
        assert not res.ok and "exited" in res.error
        assert act.running() and act.mps_pct == 60  # old share kept (shadow) or restored
    finally:
        act.stop()


def test_spawn_readiness_and_on_spawn_hook(tmp_path):
    seen = []
    act = MPSActuator([sys.executable, "-c", "import time; time.sleep(60)"], ready="spawn",
                      on_spawn=seen.append, before_terminate=seen.append)
    try:
        pid = act.start(100)
        assert seen == [pid]
    finally:
        act.stop()
    assert seen == [pid, pid]


def test_launcher_validation():
    with pytest.raises(ValueError):
        MPSActuator([])
    with pytest.raises(ValueError):
        MPSActuator(["true"], ready="whenever")
    act = MPSActuator(["true"])
    with pytest.raises(ValueError, match="mps_pct"):
        act.start(0)


# A launcher that dies (SIGKILL) between starting the training and recording it: the window
# in which a daemon killed during an MPS restart used to leave an unowned training behind.
DYING_LAUNCHER = r'''
import os, signal, sys
from gpucontrol.node.actuators import MPSActuator
train = [sys.executable, "-c", sys.argv[1], sys.argv[2], "0.0"]
def die(pid):
    open(sys.argv[3], "w").write(str(pid))
    os.kill(os.getpid(), signal.SIGKILL)
MPSActuator(train, ready="spawn", on_spawn=die).start(100)
'''


def test_training_never_runs_unrecorded_when_the_launcher_dies(tmp_path):
    out, pidf = tmp_path / "launches.txt", tmp_path / "spawned.pid"
    r = subprocess.run([sys.executable, "-c", DYING_LAUNCHER, TRAIN, str(out), str(pidf)],
                       timeout=60, check=False)
    assert r.returncode == -signal.SIGKILL
    pid = int(pidf.read_text())          # the process was spawned, then its owner died
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}") and \
            Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        time.sleep(0.05)
    gone = not os.path.exists(f"/proc/{pid}") or \
        Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    if not gone:
        os.kill(pid, signal.SIGKILL)
    assert gone, "the training outlived its launcher"
    assert not out.exists()              # and the training itself never started


def test_a_missing_training_command_is_a_file_not_found(tmp_path):
    act = MPSActuator(["no-such-training-xyz"])
    with pytest.raises(FileNotFoundError, match="no-such-training-xyz"):
        act.start(100)


# A launcher like torchrun: it starts a worker (close_fds) that opens its own files up to the
# ready descriptor's number and runs the training loop.
WORKER = r'''
import os, sys
n = int(os.environ.get("GPUCONTROL_READY_FD", "-1"))
out = sys.argv[1]
files = []
while True:
    files.append(open(f"{out}.{len(files)}", "w"))
    if files[-1].fileno() >= n:
        break
victim = files[-1]
from gpucontrol.node.hooks import after_iteration
after_iteration(out + ".nohook")
victim.write("mine")
victim.close()
with open(out, "w") as f:
    f.write(f"{n} {os.environ.get('GPUCONTROL_READY_FD')} {open(victim.name).read()}")
'''
LAUNCHER = r'''
import subprocess, sys
subprocess.call([sys.executable, "-c", sys.argv[1], sys.argv[2]])
import time
time.sleep(60)
'''


def test_a_launchers_worker_does_not_signal_on_its_own_files(tmp_path):
    out = tmp_path / "worker.txt"
    act = MPSActuator([sys.executable, "-c", LAUNCHER, WORKER, str(out)], ready_timeout_s=1.0,
                      stop_timeout_s=5)
    try:
        act.start(100)  # the launcher never signals: ready by the timeout
        deadline = time.monotonic() + 20
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        n, left, content = out.read_text().split()
        assert int(n) >= 0
        assert left == "None"  # the variables are gone after the first call
        assert content == "mine"  # its own file was neither written to nor closed
    finally:
        act.stop()


# A daemon started with a raised priority and OOM protection (as the systemd unit does)
# launching a training that records its own niceness and oom_score_adj.
FAVOURED_LAUNCHER = r'''
import os, sys, time
os.setpriority(os.PRIO_PROCESS, 0, -5)
try:  # lowering it needs CAP_SYS_RESOURCE, which a container may not have
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("-500")
except OSError:
    pass
from gpucontrol.node.actuators import MPSActuator
out = sys.argv[1]
train = [sys.executable, "-c",
         "import os, sys; open(sys.argv[1], 'w').write('%d %s' % (os.getpriority("
         "os.PRIO_PROCESS, 0), open('/proc/self/oom_score_adj').read().strip()))", out]
act = MPSActuator(train, ready="spawn")
act.start(100)
act.proc.wait(20)
print(os.getpriority(os.PRIO_PROCESS, 0), open("/proc/self/oom_score_adj").read().strip())
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="raising priority and OOM protection needs root")
def test_the_training_does_not_inherit_the_daemons_priority_or_oom_protection(tmp_path):
    out = tmp_path / "training.txt"
    r = subprocess.run([sys.executable, "-c", FAVOURED_LAUNCHER, str(out)], timeout=60,
                       check=True, capture_output=True, text=True)
    nice, oom = r.stdout.split()
    assert nice == "-5"  # the launcher itself keeps its settings
    assert out.read_text().split() == ["0", "0" if int(oom) <= 0 else oom]
