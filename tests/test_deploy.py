"""The deployment files in deploy/ are parsed and checked against the daemon itself: every
flag they pass exists in the daemon's parser and builds a valid DaemonConfig, every path they
use is mounted or created, every probe path is served, every metric an alert or a dashboard
panel names is exported."""

import configparser
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from gpucontrol.node.cli import build_parser  # noqa: E402
from gpucontrol.node.config import DaemonConfig  # noqa: E402
from gpucontrol.node.health import default_stall_timeout  # noqa: E402
from gpucontrol.node.metrics import DaemonMetrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd" / "gpucontrol@.service"
ENV = DEPLOY / "systemd" / "gpu.env.example"
DAEMONSET = DEPLOY / "kubernetes" / "daemonset.yaml"
ALERTS = DEPLOY / "prometheus" / "gpucontrol-alerts.yaml"


def _config(argv, **override):
    """Parse daemon flags exactly as the daemon does; build the validated config."""
    ns = build_parser().parse_args(argv)  # an unknown flag exits (SystemExit) here
    for k, v in override.items():
        setattr(ns, k, v)
    return ns, DaemonConfig.from_args(ns)


def _served_series():
    m = DaemonMetrics(port=None, backend="mps", health=lambda: {"guardian_alive": True})
    m.observe({"period": 1, "count": 1, "mean_ms": 1.0, "mps_pct": 50.0, "reason": "inner"})
    m.observe({"event": "mps_restart", "ok": True, "downtime_s": 1.0})
    text = m.render().decode()
    m.close()
    return set(re.findall(r"^(gpucontrol_[a-z0-9_]+)", text, re.M))


# ------------------------------------------------------------------------------ systemd
def _unit():
    cp = configparser.ConfigParser(interpolation=None, strict=False)
    cp.optionxform = str
    cp.read(UNIT)
    return cp


def _env():
    out = {}
    for line in ENV.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def _systemd_argv(line, env, instance="0"):
    """systemd's command-line rules, as far as the unit uses them: %i, ${VAR} is one word,
    $VAR is split at white space."""
    words = []
    for word in line.replace("%i", instance).split():
        m = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", word)
        if m and m.group(1):
            words.append(env[m.group(1)])
        elif m:
            words.extend(env[m.group(2)].split())
        else:
            words.append(word)
    return words


def test_systemd_unit_is_notify_with_watchdog_restart_and_resume_only():
    svc = _unit()["Service"]
    assert svc["Type"] == "notify" and svc["NotifyAccess"] == "main"
    assert svc["Restart"] in ("on-failure", "always")
    assert int(svc["WatchdogSec"]) > 0
    env = _env()
    start = _systemd_argv(svc["ExecStart"], env)
    post = _systemd_argv(svc["ExecStopPost"], env)
    assert start[1:3] == ["-m", "gpucontrol.daemon"] and post[:3] == start[:3]
    ns, cfg = _config(start[3:], socket_group="root")  # the unit's group need not exist here
    assert cfg.gpu == 0 and cfg.training_cmd == env["TRAINING_CMD"]
    assert shlex.split(cfg.training_cmd)[0].startswith("/")
    assert ns.socket_group == "root"
    # the guardian's stall detection acts before systemd's watchdog
    assert default_stall_timeout(cfg.period_s) < int(svc["WatchdogSec"])
    pns, _ = _config(post[3:], training_cmd="true", fixed_sleep=0.0)
    assert pns.resume_only and pns.gpu == 0
    runtime = dict(e.split("=", 1) for e in [svc["Environment"]])["GPUCONTROL_RUNTIME_DIR"]
    assert runtime == "/run/" + svc["RuntimeDirectory"]
    assert svc["RuntimeDirectoryPreserve"] == "yes"  # instances share it
    assert svc["KillMode"] == "mixed"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_accepts_the_unit(tmp_path):
    unit = tmp_path / "gpucontrol@.service"
    text = UNIT.read_text().replace("/opt/gpucontrol/venv/bin/python", shutil.which("true"))
    unit.write_text(text)
    inst = tmp_path / "gpucontrol@0.service"
    inst.symlink_to(unit)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(inst)],
                       capture_output=True, text=True, timeout=60, check=False)
    bad = [line for line in r.stderr.splitlines()
           if "gpucontrol" in line and "EnvironmentFile" not in line
           and "Documentation" not in line]
    assert not bad, r.stderr


# ------------------------------------------------------------------------------ kubernetes
def _docs():
    return list(yaml.safe_load_all(DAEMONSET.read_text()))


def _daemon_args(container):
    cmd = container["command"]
    if cmd[:2] == ["/bin/sh", "-c"]:  # the wrapper waits for the training's PID file
        script = cmd[2]
        assert "exec python -m gpucontrol.daemon --training-pid" in script and '"$@"' in script
        return ["--training-pid", "4242", *container["args"]]
    assert cmd == ["python", "-m", "gpucontrol.daemon"]
    return list(container["args"])


def test_daemonset_flags_paths_probes_and_resources():
    docs = _docs()
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    assert ds["apiVersion"] == "apps/v1"
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"]  # the node-label gate
    assert spec["hostPID"] is True
    assert ds["spec"]["selector"]["matchLabels"].items() <= \
        ds["spec"]["template"]["metadata"]["labels"].items()
    volumes = {v["name"]: v for v in spec["volumes"]}
    init = spec["initContainers"]
    assert any("--resume-only" in c["args"] for c in init)
    for c in [*init, *spec["containers"]]:
        argv = _daemon_args(c)
        env = {e["name"]: e["value"] for e in c.get("env", [])}
        _ns, cfg = (_config(argv, training_cmd="true", fixed_sleep=0.0)
                    if "--resume-only" in argv else _config(argv))
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert set(mounts.values()) <= set(volumes)
        runtime = env["GPUCONTROL_RUNTIME_DIR"]
        assert volumes[mounts[runtime]]["hostPath"]["path"] == runtime  # the host's files
        if "--resume-only" in argv:
            continue
        for path in (cfg.model, cfg.mps_pipe_dir):  # every file flag lies in a mount
            if path is not None:
                assert any(path == m or path.startswith(m + "/") for m in mounts), path
        # a training it did not launch is never restarted at a new MPS share: no MPS flags
        assert cfg.training_pids and cfg.mps_pipe_dir is None
        assert "/sys/fs/cgroup" in mounts  # the freezer
        assert cfg.metrics_addr != "127.0.0.1"  # the kubelet probes the pod address
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            get = c[probe]["httpGet"]
            assert get["path"] in ("/healthz", "/readyz")
            assert ports[get["port"]] == cfg.metrics_port
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        res = c["resources"]
        assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]
        assert "cpu" not in res["limits"]  # CFS throttling would stretch the timed pauses
        ann = ds["spec"]["template"]["metadata"]["annotations"]
        assert int(ann["prometheus.io/port"]) == cfg.metrics_port
        assert cfg.stall_timeout_s is not None and cfg.stall_timeout_s < \
            c["livenessProbe"]["periodSeconds"] * c["livenessProbe"]["failureThreshold"]
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    assert "model.json" in cm["data"]


def test_probe_paths_are_served():
    health = {"live": True, "ready": True}
    m = DaemonMetrics(port=0, health=lambda: health)
    import urllib.request

    base = m.url.rsplit("/", 1)[0]
    try:
        for c in next(d for d in _docs() if d["kind"] == "DaemonSet")["spec"]["template"][
                "spec"]["containers"]:
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                path = c[probe]["httpGet"]["path"]
                assert urllib.request.urlopen(base + path, timeout=5).status == 200
    finally:
        m.close()


def test_daemonset_validates_with_the_kubernetes_models_where_available():
    k8s = pytest.importorskip("kubernetes")
    from kubernetes.client import ApiClient

    client = ApiClient()

    class _R:
        def __init__(self, doc):
            import json

            self.data = json.dumps(doc)

    for doc in _docs():
        kind = {"DaemonSet": "V1DaemonSet", "ConfigMap": "V1ConfigMap",
                "Namespace": "V1Namespace"}[doc["kind"]]
        obj = client.deserialize(_R(doc), kind)
        assert obj.metadata.name
    assert k8s


@pytest.mark.skipif(shutil.which("kubeconform") is None, reason="no kubeconform")
def test_kubeconform_accepts_the_daemonset():
    r = subprocess.run(["kubeconform", "-strict", "-summary", str(DAEMONSET)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------------------ alerts, docs
def test_alert_rules_name_only_served_metrics():
    doc = yaml.safe_load(ALERTS.read_text())
    served = _served_series()
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert len(rules) >= 8
    for r in rules:
        assert re.fullmatch(r"Gpucontrol[A-Za-z]+", r["alert"])
        assert r["labels"]["severity"] in ("critical", "warning", "info")
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        for name in re.findall(r"gpucontrol_[a-z0-9_]+", r["expr"]):
            assert name in served, (r["alert"], name)


def test_deploy_guide_names_only_served_metrics_and_real_flags():
    text = (ROOT / "docs" / "deploy.md").read_text()
    served = _served_series()
    for name in set(re.findall(r"gpucontrol_[a-z0-9_]+", text)):
        if name.startswith("gpucontrol_") and name not in ("gpucontrol_daemon",):
            assert name in served or {name + "_total", name + "_count"} & served, name
    flags = {a for act in build_parser()._actions for a in act.option_strings}
    for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", text)):
        if flag in ("--now", "--system", "--namespace", "--upgrade", "--man"):
            continue  # other tools' flags
        assert flag in flags, flag
    assert os.path.relpath(UNIT, ROOT) in text and os.path.relpath(DAEMONSET, ROOT) in text


def test_daemonset_entrypoint_waits_for_the_pid_file_then_runs_the_daemon(tmp_path):
    """The container's /bin/sh entrypoint, run for real: it waits for the training's PID
    file, then execs the daemon on that PID with the manifest's args (the model, port and
    duration overridden for this machine; argparse keeps the last value)."""
    import json
    import sys
    import time

    c = next(d for d in _docs() if d["kind"] == "DaemonSet")["spec"]["template"]["spec"][
        "containers"][0]
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (shim / "python").chmod(0o755)  # a wrapper, not a link: a venv is found from its path
    runtime = tmp_path / "run"
    (runtime / "training").mkdir(parents=True, mode=0o700)
    model = tmp_path / "model.json"
    model.write_text('{"gain": -12.0, "offset": 95.0}')
    train = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}",
           "GPUCONTROL_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(ROOT)}
    argv = [*c["command"], *c["args"], "--model", str(model), "--metrics-port", "0",
            "--metrics-addr", "127.0.0.1",
            "--period-s", "0.2", "--duration-s", "1"]
    try:
        d = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        time.sleep(1.0)
        assert d.poll() is None  # still waiting for the PID file
        (runtime / "training" / "gpu0.pid").write_text(f"{train.pid}\n")
        out, err = d.communicate(timeout=60)
        assert d.returncode == 0, err
        events = [json.loads(line) for line in out.splitlines()]
        started = next(e for e in events if e.get("event") == "started")
        assert started["training"] == [train.pid]
        assert started["socket"] == str(runtime / "gpu0.sock")
        assert events[-1]["event"] == "stopped"
    finally:
        train.kill()
        train.wait()


def _proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2:].split()[0].decode()


def test_systemd_unit_command_lines_run_for_real(tmp_path):
    """The unit's ExecStart= and ExecStopPost= lines, run as systemd would (%i, ${VAR} and
    $VAR expanded, $NOTIFY_SOCKET and $WATCHDOG_USEC set): READY=1 and WATCHDOG=1 arrive;
    after a total crash (daemon and guardian SIGKILLed while the training is stopped, as a
    watchdog kill of the whole unit does), ExecStopPost= resumes the training."""
    import json
    import signal
    import socket
    import sys
    import time

    from gpucontrol.node.actuators.procs import descendants

    svc = _unit()["Service"]
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(0.2)
    env = {"TRAINING_CMD": f"{sys.executable} -c 'while True: pass'",
           "GPUCONTROL_ARGS": "--fixed-sleep 1.0 --max-sleep-s 2 --run-quantum-s 0.001 "
                              "--period-s 0.2 --ready spawn --mps-binary /nonexistent"}
    start = [sys.executable, *_systemd_argv(svc["ExecStart"], env)[1:]]
    post = [sys.executable, *_systemd_argv(svc["ExecStopPost"], env)[1:]]
    penv = {**os.environ, "GPUCONTROL_RUNTIME_DIR": str(tmp_path / "run"),
            "NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "3000000",
            "PYTHONPATH": str(ROOT)}
    d = subprocess.Popen(start, env=penv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    training = None
    try:
        got, deadline = [], time.monotonic() + 20
        while not any("WATCHDOG=1" in m for m in got) and time.monotonic() < deadline:
            try:
                got.append(notify.recv(4096).decode())
            except TimeoutError:
                pass
        assert got and got[0].startswith("READY=1") and "WATCHDOG=1" in got
        while training is None:
            rec = json.loads(d.stdout.readline())
            if rec.get("event") == "training_started":
                training = rec["pid"]
        deadline = time.monotonic() + 5
        while _proc_state(training) != "T" and time.monotonic() < deadline:
            time.sleep(0.001)
        for pid in descendants([d.pid]):
            if pid != training:
                os.kill(pid, signal.SIGKILL)  # the guardian
        d.kill()
        d.wait()
        time.sleep(0.1)
        assert _proc_state(training) == "T"  # nobody left to resume it ...
        r = subprocess.run(post, env=penv, capture_output=True, text=True, timeout=30,
                           check=False)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["resumed"] == 1
        time.sleep(0.05)
        assert _proc_state(training) not in ("T", "t")  # ... until ExecStopPost= ran
    finally:
        notify.close()
        if d.poll() is None:
            d.kill()
            d.wait()
        if training is not None:
            try:
                os.kill(training, signal.SIGCONT)
                os.kill(training, signal.SIGKILL)
            except ProcessLookupError:
                pass
