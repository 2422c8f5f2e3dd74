"""--share-backend green-context inside MPS (issue 30, the node agent): the training launched as
an MPS client of a private or the node's control daemon, the inference checked to be a client
too (get_server_list / get_client_list), a refusal in one line when it is not or cannot be
told unless --mps-unchecked, and the private control daemon quit on every way out. On the CPU
with a fake nvidia-cuda-mps-control; on a GPU with the real one (marked gpu)."""

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
from actuators._children import SLEEPER, daemon_argv, read_events, state, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "actuators"))
from test_mps_actuator import FAKE

from gpucontrol.node.actuators.mps import MPSControl
from gpucontrol.node.mps_clients import check_inference_client, judge

#: The fake, asked without a log directory (a client of the node's daemon gets only its pipe
#: directory), logs nothing instead of failing.
FAKE_NODE = FAKE.replace("def record(line):\n", "def record(line):\n"
                         "    if not os.path.isdir(log):\n        return\n")
assert FAKE_NODE != FAKE
#: A fresh private control daemon has no server until a client connects.
FAKE_EMPTY = FAKE_NODE.replace('"servers": {"4242": [777, 778]}', '"servers": {}')

#: A launched training: writes how it was started, then iterates on the hook file.
TRAINING = r"""
import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(" ".join([str(os.getpid()), os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "-"),
                      os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "-")]) + "\n")
from gpucontrol.node.hooks import after_iteration
while True:
    after_iteration()
    time.sleep(0.01)
"""


def _fake(tmp_path, code=FAKE_NODE):
    p = tmp_path / "nvidia-cuda-mps-control"
    p.write_text(f"#!{sys.executable}\n{code}")
    p.chmod(0o755)
    return str(p)


def _servers(ctl, servers):
    """Set what the fake control daemon answers to get_server_list / get_client_list."""
    path = os.path.join(ctl.pipe_dir, "control.json")
    with open(path) as f:
        st = json.load(f)
    st["servers"] = {str(k): v for k, v in servers.items()}
    with open(path, "w") as f:
        json.dump(st, f)


def _green(tmp_path, fake, *extra):
    cmd = shlex.join([sys.executable, "-c", TRAINING, str(tmp_path / "train.txt")])
    return daemon_argv(tmp_path, "g", "--training-cmd", cmd, "--fixed-sleep", "0",
                       "--sleep-method", "hook", "--share-backend", "green-context",
                       "--period-s", "0.2", "--mps-binary", fake, *extra)


def _launched(tmp_path):
    try:
        return [line.split() for line in (tmp_path / "train.txt").read_text().splitlines()]
    except FileNotFoundError:
        return []


def test_the_verdict_comes_from_the_control_daemons_own_lists(tmp_path, children):
    ctl = MPSControl(_fake(tmp_path)).start()
    training = children.spawn(SLEEPER)
    try:
        _servers(ctl, {4242: [training.pid, 31337]})
        check = check_inference_client(ctl, [training.pid])
        assert (check.verdict, check.others) == ("yes", [31337])
        assert "server 4242" in check.reason
        _servers(ctl, {4242: [training.pid]})
        check = check_inference_client(ctl, [training.pid])
        assert check.verdict == "no" and "the training is the only MPS client" in check.reason
        _servers(ctl, {})
        check = check_inference_client(ctl, [training.pid])
        assert check.verdict == "unknown" and ctl.pipe_dir in check.reason
    finally:
        ctl.quit()
    assert check_inference_client(None, [1], why_none="x not found").reason == \
        "no MPS control daemon (x not found)"
    gone = check_inference_client(ctl, [1])  # it quit: the command fails
    assert gone.verdict == "unknown"
    assert judge({7: [1, 2]}, [1, 2]).verdict == "no"  # the training's descendants are its own


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_green_context_joins_the_nodes_mps_and_launches_the_training_as_a_client(
        tmp_path, children, given):
    """The node's control daemon (--mps-pipe-dir, or the CUDA_MPS_PIPE_DIRECTORY the agent
    runs with, as a client would) has the inference as a client: the daemon launches the
    training with that pipe directory at 100 % (the partition is the share), says which
    daemon and why, and leaves the node's daemon running at its exit."""
    fake = _fake(tmp_path)
    node = MPSControl(fake).start()
    inference = children.spawn(SLEEPER)
    try:
        _servers(node, {4242: [inference.pid]})
        how = (["--mps-pipe-dir", node.pipe_dir], {}) if given == "flag" else \
            ([], {"CUDA_MPS_PIPE_DIRECTORY": node.pipe_dir})
        r = subprocess.run(_green(tmp_path, fake, *how[0], "--duration-s", "1"),
                           env={**os.environ, **how[1]},
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        events = {e.get("event"): e for e in map(json.loads, r.stdout.splitlines())}
        assert events["mps_ready"]["pipe_dir"] == node.pipe_dir
        assert events["mps_clients"]["inference_client"] == "yes"
        assert events["mps_clients"]["others"] == [inference.pid]
        chosen = events["share_backend"]
        assert (chosen["backend"], chosen["mps"], chosen["inference_client"]) == \
            ("green-context", "node", "yes")
        assert "inside the node's MPS control daemon" in chosen["reason"]
        assert events["started"]["mps"] is True
        assert _launched(tmp_path)[0][1:] == [node.pipe_dir, "100"]  # a client, at 100 %
        assert "inference is not" not in r.stderr and "cannot tell" not in r.stderr
        assert node.health()  # the node's daemon is never quit
    finally:
        node.quit()


@pytest.mark.parametrize("servers, line", [
    ({}, "cannot tell whether the inference is an MPS client: no MPS server runs yet"),
    ({4242: []}, "the inference is not an MPS client: the training is the only MPS client"),
])
def test_green_context_refuses_in_one_line_when_the_inference_is_no_client(
        tmp_path, children, servers, line):
    """The node's daemon serves no inference (no server yet, or a server without it): one
    line with the measured reason, exit 2; the launched training is stopped, and the node's
    daemon left running."""
    fake = _fake(tmp_path)
    node = MPSControl(fake).start()
    try:
        _servers(node, servers)
        r = subprocess.run(_green(tmp_path, fake, "--mps-pipe-dir", node.pipe_dir),
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 2, r.stderr
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and line in err[0] and "--mps-unchecked" in err[0], err
        pid = next(e for e in map(json.loads, r.stdout.splitlines())
                   if e.get("event") == "training_started")["pid"]
        assert wait_for(lambda: state(pid) in (None, "Z"), 5.0)  # stopped with the daemon
        assert node.health()
    finally:
        node.quit()


def test_a_private_mps_daemon_cannot_vouch_for_the_inference_and_is_quit(tmp_path):
    """A control daemon the agent starts has no client at start: refused in one line (no
    --mps-unchecked), and the private daemon is quit, its directory removed."""
    fake = _fake(tmp_path, FAKE_EMPTY)
    r = subprocess.run(_green(tmp_path, fake), capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no MPS server runs yet" in r.stderr
    ready = next(e for e in map(json.loads, r.stdout.splitlines())
                 if e.get("event") == "mps_ready")
    assert not os.path.exists(os.path.dirname(ready["pipe_dir"]))  # quit and removed


def test_with_mps_unchecked_it_says_so_once_and_goes_on_then_quits_its_daemon(tmp_path):
    fake = _fake(tmp_path, FAKE_EMPTY)
    r = subprocess.run(_green(tmp_path, fake, "--mps-unchecked", "--duration-s", "0.6"),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    warned = [x for x in r.stderr.splitlines() if "MPS client" in x]
    assert len(warned) == 1 and "going on" in warned[0] and "no MPS server runs yet" in warned[0]
    events = [json.loads(x) for x in r.stdout.splitlines()]
    pipe = next(e for e in events if e.get("event") == "mps_ready")["pipe_dir"]
    chosen = next(e for e in events if e.get("event") == "share_backend")
    assert chosen["mps"] == "private" and chosen["inference_client"] == "unknown"
    assert not os.path.exists(os.path.dirname(pipe))  # quit at the clean stop


def test_sigkill_quits_the_private_mps_daemon_and_withdraws_the_share(tmp_path, children):
    """The crash path: whatever withdraws the sleep withdraws the share (the hook file
    cleared by the guardian), the launched training is ended and the private control daemon
    quit, its directory removed."""
    from gpucontrol.node.hooks import HookReader

    fake = _fake(tmp_path, FAKE_EMPTY)
    d = children.popen(_green(tmp_path, fake, "--mps-unchecked", "--fixed-mps", "40"),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    events = read_events(d.stdout, "started")
    root = os.path.dirname(next(e for e in events if e.get("event") == "mps_ready")["pipe_dir"])
    reader = HookReader(str(tmp_path / "g.hook"))
    assert wait_for(lambda: reader.share_pct() == 40, 5.0)  # the partition commanded
    pid = int(wait_for(lambda: _launched(tmp_path), 10.0)[0][0])
    d.kill()
    d.wait()
    assert wait_for(lambda: not os.path.exists(root), 5.0)
    assert wait_for(lambda: state(pid) in (None, "Z"), 5.0)
    assert reader.share_pct() is None  # back on the full device


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is None, reason="no MPS here")
def test_a_real_cuda_process_is_seen_as_a_client_of_a_private_control_daemon(tmp_path):
    """On a GPU: a private control daemon, a CUDA process started with its pipe directory
    (a stand-in for the inference), and the check that finds it among the clients."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    ctl = MPSControl().start()
    client = None
    try:
        ready = tmp_path / "ready"
        code = ("import sys, time, torch\n"
                "x = torch.ones(1024, device='cuda').sum().item()\n"
                "open(sys.argv[1], 'w').write('ok')\n"
                "time.sleep(60)\n")
        client = subprocess.Popen([sys.executable, "-c", code, str(ready)],
                                  env={**os.environ, **ctl.env()})
        assert wait_for(ready.exists, 60.0)
        check = wait_for(lambda: (c := check_inference_client(ctl, [])).verdict == "yes" and c,
                         20.0)
        assert check and client.pid in check.others, check_inference_client(ctl, [])
        assert check_inference_client(ctl, [client.pid]).verdict == "no"
    finally:
        if client is not None:
            client.kill()
            client.wait()
        ctl.quit()


def test_a_given_training_needs_the_nodes_mps_daemon(tmp_path, children):
    """A training the agent does not launch cannot join a control daemon started after it:
    without --mps-pipe-dir the start is refused in one line saying so."""
    train = children.spawn(SLEEPER)
    r = subprocess.run(daemon_argv(tmp_path, "p", "--training-pid", str(train.pid),
                                   "--fixed-sleep", "0", "--sleep-method", "hook",
                                   "--share-backend", "green-context"),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "give --mps-pipe-dir" in err[0], err
    assert train.poll() is None and state(train.pid) not in ("T", "t")


def test_a_share_that_is_not_mps_is_called_a_share(tmp_path, children):
    """Issue 27 §4, node side: with a restart-free backend the controller's "MPS a -> b"
    is logged as "share a -> b", the period record says share_pct (mps_pct kept, the same
    value, for older readers), and the metrics count the changes by backend."""
    import threading
    import urllib.request

    from gpucontrol.node.client import report_latency

    train = children.spawn(SLEEPER)
    # a low share meets the SLO by the model (one it says nothing meets is refused)
    (tmp_path / "m.json").write_text(json.dumps([
        {"mps_pct": 10.0, "gain": -50.0, "offset": 50.0},
        {"mps_pct": 100.0, "gain": -50.0, "offset": 150.0}]))
    stop = threading.Event()

    def feed():  # always over the SLO: the outer loop lowers the share
        while not stop.wait(0.02):
            report_latency(200.0, str(tmp_path / "g.sock"))

    threading.Thread(target=feed, daemon=True).start()
    d = children.popen(daemon_argv(
        tmp_path, "g", "--training-pid", str(train.pid), "--slo-ms", "100", "--model",
        str(tmp_path / "m.json"), "--period-s", "0.2", "--outer-every", "1", "--sleep-method",
        "hook", "--max-sleep-s", "0.05", "--share-backend", "green-context", "--mps-unchecked",
        "--metrics-port", "0"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = read_events(d.stdout, "metrics")[-1]["url"]
        read_events(d.stdout, "share_change", timeout=30)
        moved = {}
        while "period" not in moved:  # the period that made the change
            moved = json.loads(d.stdout.readline())
        assert moved["mps_changed"], moved
        assert "share 100 -> " in moved["reason"] and "MPS" not in moved["reason"]
        assert moved["share_pct"] == moved["mps_pct"] < 100 and moved["share_changed"]
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        assert 'gpucontrol_share_changes_total{backend="green-context",gpu="0"' in body
    finally:
        stop.set()
        d.terminate()
        d.wait(15)
