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


SYSTEMD_CONFIG = DEPLOY / "systemd" / "gpu0.toml.example"  # /etc/gpucontrol/gpu0.toml
CONTAINER_CONFIG = "/etc/gpucontrol"  # where the DaemonSet mounts its ConfigMap


def _config(argv, **override):
    """Parse daemon flags exactly as the daemon does; build the validated config."""
    # the unit's --config: the example file (the DaemonSet's argv point at its ConfigMap's)
    argv = [str(SYSTEMD_CONFIG) if a == "/etc/gpucontrol/gpu0.toml" else a for a in argv]
    ns = build_parser().parse_args(argv)  # an unknown flag exits (SystemExit) here
    for k, v in override.items():
        setattr(ns, k, v)
    return ns, DaemonConfig.from_args(ns)


def _configmap_files(where):
    """The DaemonSet's ConfigMap as the pod sees it (each key a file), written to ``where``;
    returns the map of container paths to those files."""
    cm = next(d for d in _docs() if d["kind"] == "ConfigMap")
    where.mkdir(parents=True, exist_ok=True)
    for name, text in cm["data"].items():
        (where / name).write_text(text)
    return {f"{CONTAINER_CONFIG}/{name}": str(where / name) for name in cm["data"]}


def _in_container(argv, files):
    """``argv`` with the ConfigMap's container paths replaced by the written files."""
    return [files.get(a, a) for a in argv]


def _served_series():
    m = DaemonMetrics(port=None, backend="mps", health=lambda: {"guardian_alive": True})
    m.observe({"period": 1, "count": 1, "mean_ms": 1.0, "mps_pct": 50.0, "reason": "inner"})
    m.observe({"period": 2, "count": 0, "source_reason": "timeout"})  # labelled: once seen
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
    assert cfg.training_user and cfg.training_user != "root"  # the training is not root
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


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_the_unit_is_sandboxed_to_an_exposure_of_5_or_less(tmp_path):
    """``systemd-analyze security`` of the unit file (issue: 9.4 UNSAFE with only
    NoNewPrivileges=); the score is the one docs/deploy.md gives."""
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text())
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                        str(unit)], capture_output=True, text=True, timeout=60, check=False)
    got = re.search(r"Overall exposure level for \S+: (\d+\.\d)", r.stdout + r.stderr)
    if got is None and "--offline" in r.stderr:
        pytest.skip("this systemd-analyze has no --offline")
    assert got, r.stdout + r.stderr
    score = float(got.group(1))
    assert score <= 5.0, r.stdout
    assert f"scores it {score:.1f}" in (ROOT / "docs" / "deploy.md").read_text()
    svc = _unit()["Service"]
    caps = set(svc["CapabilityBoundingSet"].split())
    assert caps == {"CAP_KILL", "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN"}
    assert svc["ProtectSystem"] == "strict" and svc["UMask"] == "0077"


# ------------------------------------------------------------------------------ kubernetes
def _docs():
    return list(yaml.safe_load_all(DAEMONSET.read_text()))


def _daemon_args(container):
    cmd = container["command"]
    if cmd[:2] == ["/bin/sh", "-c"]:  # a wrapper that prepares something, then the daemon
        script = cmd[2]
        assert script.rstrip().endswith('exec python -m gpucontrol.daemon "$@"'), script
        assert "--training-pid" not in script  # never a PID the training pod chose
        return list(container["args"])
    assert cmd == ["python", "-m", "gpucontrol.daemon"]
    return list(container["args"])


def test_daemonset_flags_paths_probes_and_resources(tmp_path):
    docs = _docs()
    files = _configmap_files(tmp_path / "etc")
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
        argv = _in_container(_daemon_args(c), files)
        env = {e["name"]: e["value"] for e in c.get("env", [])}
        _ns, cfg = (_config(argv, training_cmd="true", fixed_sleep=0.0)
                    if "--resume-only" in argv else _config(argv))
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert set(mounts.values()) <= set(volumes)
        runtime = env["GPUCONTROL_RUNTIME_DIR"]
        assert volumes[mounts[runtime]]["hostPath"]["path"] == runtime  # the host's files
        if "--resume-only" in argv:
            continue
        back = {v: k for k, v in files.items()}  # the files as the container sees them
        for path in (back.get(cfg.model, cfg.model), cfg.mps_pipe_dir):  # all in a mount
            if path is not None:
                assert any(path == m or path.startswith(m + "/") for m in mounts), path
        # a training it did not launch is never restarted at a new MPS share: no MPS flags
        assert cfg.training_pid_file and cfg.mps_pipe_dir is None and not cfg.training_pids
        # the training pod names its PID in a file under its own pod UID, and only a process
        # of the file's owner, in that pod's cgroup, is accepted
        assert "/{pod}/" in cfg.training_pid_file and "{pod}" in cfg.training_cgroup
        assert cfg.allowed_uids and 0 not in cfg.allowed_uids
        pid_dir = cfg.training_pid_file.split("/{pod}/")[0]
        assert any(pid_dir.startswith(m + "/") for m in mounts)
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


def _guide_scrape_config():
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = re.search(r"```yaml\n(scrape_configs:\n.*?)```", text, re.S)
    assert block, "docs/deploy.md shows no scrape_configs block"
    return block.group(1)


def test_the_agent_down_alert_selects_the_job_the_guide_scrapes():
    """GpucontrolAgentDown selects ``up{job="gpucontrol"}``; with the DaemonSet's
    ``prometheus.io`` annotations alone the agents land in a catch-all job and the alert
    never fires. The guide's scrape job must carry that name and keep the DaemonSet's pods
    by the DaemonSet's own label and port name."""
    doc = yaml.safe_load(ALERTS.read_text())
    down = next(r for g in doc["groups"] for r in g["rules"]
                if r["alert"] == "GpucontrolAgentDown")
    job = re.search(r'up\{job="([^"]+)"\}', down["expr"]).group(1)
    (cfg,) = yaml.safe_load(_guide_scrape_config())["scrape_configs"]
    assert cfg["job_name"] == job
    ds = next(d for d in _docs() if d["kind"] == "DaemonSet")
    sd = cfg["kubernetes_sd_configs"][0]
    assert sd["namespaces"]["names"] == [ds["metadata"]["namespace"]]
    keep = {tuple(r["source_labels"]): r["regex"] for r in cfg["relabel_configs"]
            if r.get("action") == "keep"}
    name = ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
    assert keep[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)] == name
    port = {p["name"] for p in _agent()["ports"]}
    assert keep[("__meta_kubernetes_pod_container_port_name",)] in port


@pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool")
def test_promtool_accepts_the_rules_and_the_guides_scrape_config(tmp_path):
    r = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "rules.yaml").write_text(ALERTS.read_text())
    (tmp_path / "prometheus.yml").write_text("rule_files: [rules.yaml]\n"
                                             + _guide_scrape_config())
    r = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                       capture_output=True, text=True, timeout=60, check=False)
    if "field kubernetes_sd_configs not found" in r.stdout + r.stderr:
        pytest.skip("this promtool is built without Kubernetes discovery (Debian's)")
    assert r.returncode == 0, r.stdout + r.stderr


def test_deploy_guide_names_only_served_metrics_and_real_flags():
    text = (ROOT / "docs" / "deploy.md").read_text()
    served = _served_series()
    for name in set(re.findall(r"gpucontrol_[a-z0-9_]+", text)):
        if name.startswith("gpucontrol_") and name not in ("gpucontrol_daemon",):
            assert name in served or {name + "_total", name + "_count"} & served, name
    flags = {a for act in build_parser()._actions for a in act.option_strings}
    for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", text)):
        if flag in ("--now", "--system", "--namespace", "--upgrade", "--man", "--groups",
                    "--offline"):
            continue  # other tools' flags
        assert flag in flags, flag
    assert os.path.relpath(UNIT, ROOT) in text and os.path.relpath(DAEMONSET, ROOT) in text


def test_the_config_reference_names_only_real_flags():
    """DaemonConfig's reference (docs/daemon.md points operators to the keys) names each
    setting's flag; a setting without one (FILE_ONLY) is named by its key, never by a flag
    the daemon would refuse (it named --mode, --initial-mps, --silent-periods,
    --unready-periods and --metrics-target)."""
    from gpucontrol.node.config import FILE_ONLY

    flags = {a for act in build_parser()._actions for a in act.option_strings}
    doc = DaemonConfig.__doc__
    named = set(re.findall(r"``(--[a-z][a-z0-9-]+)``", doc))
    assert named and named <= flags, named - flags
    for key in FILE_ONLY:
        assert f"[file only: ``{key}``]" in " ".join(doc.split()), key
    m = DaemonMetrics(port=None)
    help_text = m.render().decode()
    m.close()
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", help_text))
    assert named <= flags, named - flags  # the HELP an operator reads in Prometheus


def _agent():
    return next(d for d in _docs() if d["kind"] == "DaemonSet")["spec"]["template"]["spec"][
        "containers"][0]


def _caps(container):
    """The capabilities a container's securityContext keeps: ``drop: [ALL]`` and its adds."""
    sc = container["securityContext"]["capabilities"]
    assert sc["drop"] == ["ALL"]
    return list(sc.get("add", []))


def _python_shim(tmp_path, caps=None):
    """A ``python`` on PATH that runs this interpreter (a wrapper, not a link: a venv is found
    from its path); with ``caps`` (a container's), under that capability set, as the
    container runtime gives it (where ``setpriv`` is installed and we are root)."""
    import sys

    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    run = shlex.quote(sys.executable)
    if caps is not None and os.geteuid() == 0 and shutil.which("setpriv"):
        keep = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
        run = f"setpriv --bounding-set={keep} --inh-caps=-all {run}"
    (shim / "python").write_text(f'#!/bin/sh\nexec {run} "$@"\n')
    (shim / "python").chmod(0o755)
    return shim


def _entrypoint(tmp_path, *extra):
    """The agent container's command and args as the manifest gives them (the pid-file
    directory, model, port and duration overridden for this machine: argparse keeps the last
    value, and --allow-uid adds 65534, the uid of the tests' training), the ConfigMap's files
    where --config finds them, and the environment."""
    c = _agent()
    runtime = tmp_path / "run"
    (runtime / "training").mkdir(parents=True, mode=0o700, exist_ok=True)
    files = _configmap_files(tmp_path / "etc")
    env = {**os.environ, "PATH": f"{_python_shim(tmp_path, _caps(c))}:{os.environ['PATH']}",
           "GPUCONTROL_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(ROOT)}
    pid_file = _setting("training_pid_file").replace("/run/gpucontrol", str(runtime))
    argv = [*c["command"], *_in_container(c["args"], files), "--training-pid-file", pid_file,
            "--allow-uid", str(NOBODY), "--metrics-port", "0", "--metrics-addr", "127.0.0.1",
            "--period-s", "0.2", "--duration-s", "1", *extra]
    return argv, env, runtime


def _setting(key):
    """A setting of the DaemonSet's gpu0.toml."""
    import tomllib

    cm = next(d for d in _docs() if d["kind"] == "ConfigMap")
    return tomllib.loads(cm["data"]["gpu0.toml"])[key]


NOBODY = 65534  # the training pod's uid in these tests (the manifest's is 1000)


def _pod_pid_file(runtime, pod, pid, *, owner=NOBODY, mode=0o644):
    """What the training pod writes: <runtime>/training/<pod UID>/gpu0.pid, owned by its
    uid. The pod writes it as that uid; here root writes it for the uid, so the file appears
    (a rename) only once it is that uid's: an agent polling meanwhile never sees it root's."""
    d = runtime / "training" / pod
    d.mkdir(mode=0o755, exist_ok=True)
    f, tmp = d / "gpu0.pid", d / ".gpu0.pid.tmp"
    tmp.write_text(f"{pid}\n")
    os.chown(tmp, owner, owner)
    tmp.chmod(mode)
    os.rename(tmp, f)
    return f


@pytest.fixture
def pod_cgroup():
    """``make(pod) -> move(pid)``: a cgroup v2 group named as the kubelet's cgroupfs driver
    names a pod's (``.../pod<uid>/<container>``), into which ``move`` puts a process; skips
    where no group can be made. Removed at teardown (its members killed)."""
    import uuid

    from gpucontrol.node.actuators.cgroup import cgroup2_mounts

    made = []

    def make(pod):
        for mount in cgroup2_mounts():
            top = Path(mount) / f"gpucontrol-test-kubepods-{uuid.uuid4().hex[:8]}"
            try:
                (top / f"pod{pod}" / "ctr").mkdir(parents=True)
            except OSError:
                continue
            made.append(top)

            def move(pid, group=top / f"pod{pod}" / "ctr"):
                (group / "cgroup.procs").write_text(str(pid))

            return move
        pytest.skip("no writable cgroup v2 hierarchy to make a pod's group in")

    try:
        yield make
    finally:
        import time

        for top in made:
            groups = [*sorted((p for p in top.rglob("*") if p.is_dir()),
                              key=lambda p: -len(p.parts)), top]
            for g in groups:
                for _ in range(200):
                    try:
                        g.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.01)


def _spawn(*argv, uid=None):
    kw = {"user": uid, "group": uid} if uid is not None else {}
    return subprocess.Popen(list(argv), start_new_session=True, stdin=subprocess.DEVNULL, **kw)


def _end(*procs):
    import signal

    for p in procs:
        if p.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        p.wait(10)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start processes of "
                                "other users and to own files for them")


@needs_root
def test_daemonset_entrypoint_waits_for_the_pid_file_then_runs_the_daemon(tmp_path,
                                                                           pod_cgroup):
    """The container's entrypoint, run for real: the agent waits for the training pod's PID
    file (under the pod's UID, owned by the pod's uid), then controls the process it names,
    which runs as that uid in that pod's cgroup."""
    import json
    import select
    import time
    import uuid

    argv, env, runtime = _entrypoint(tmp_path)
    pod = str(uuid.uuid4())
    train = _spawn("sleep", "60", uid=NOBODY)
    try:
        pod_cgroup(pod)(train.pid)
        d = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        ready, _, _ = select.select([d.stderr], [], [], 60)
        assert ready and "waiting for the training's PID file" in d.stderr.readline()
        time.sleep(0.5)
        assert d.poll() is None  # still waiting for the PID file
        _pod_pid_file(runtime, pod, train.pid)
        out, err = d.communicate(timeout=60)
        assert d.returncode == 0, err
        events = [json.loads(line) for line in out.splitlines()]
        started = next(e for e in events if e.get("event") == "started")
        assert started["training"] == [train.pid]
        assert started["socket"] == str(runtime / "gpu0.sock")
        assert events[-1]["event"] == "stopped"
    finally:
        _end(train)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _probe(port, path):
    """(status, JSON body) of a GET, or (None, error) while nothing listens."""
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except OSError as e:
        return None, str(e)


@needs_root
def test_the_probes_pass_while_the_agent_waits_for_the_training(tmp_path, pod_cgroup):
    """An agent started before any training pod is on its node waits for the PID file, for
    as long as it takes. The manifest's startup and liveness probes must pass meanwhile (they
    failed -- nothing listened -- so the kubelet killed the waiting agent after the startup
    probe's 300 s, again and again, into CrashLoopBackOff), and readiness says why not."""
    import select
    import time
    import uuid

    port = _free_port()
    argv, env, runtime = _entrypoint(tmp_path, "--metrics-port", str(port))
    probes = {k: v["httpGet"]["path"] for k, v in _agent().items() if k.endswith("Probe")}
    d = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    train = None
    try:
        ready, _, _ = select.select([d.stderr], [], [], 60)
        assert ready and "waiting for the training's PID file" in d.stderr.readline()
        deadline = time.monotonic() + 10
        while _probe(port, "/healthz")[0] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        for kind in ("startupProbe", "livenessProbe"):
            assert _probe(port, probes[kind])[0] == 200, kind
        status, body = _probe(port, probes["readinessProbe"])
        assert status == 503 and "waiting for the training's PID file" in body["reason"]
        assert d.poll() is None
        pod = str(uuid.uuid4())
        train = _spawn("sleep", "60", uid=NOBODY)
        pod_cgroup(pod)(train.pid)
        _pod_pid_file(runtime, pod, train.pid)
        out, err = d.communicate(timeout=60)
        assert d.returncode == 0, err
        assert '"event": "started"' in out
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
        if train is not None:
            _end(train)


def _run_refused(argv, env, victim):
    """Run the agent to its end, watching ``victim``: (rc, stderr, states seen)."""
    d = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    seen = set()
    try:
        while d.poll() is None:
            seen.add(_proc_state(victim.pid))
        out, err = d.communicate(timeout=60)
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
    seen.add(_proc_state(victim.pid))
    return d.returncode, out, err, seen


@needs_root
@pytest.mark.parametrize("victim_uid, why", [
    (NOBODY - 1, f"runs as uid {NOBODY - 1}, but the file is owned by uid {NOBODY}"),
    (0, f"runs as root, but the file is owned by uid {NOBODY}"),
])
def test_the_agent_refuses_a_pid_file_naming_another_users_or_a_root_process(
        tmp_path, pod_cgroup, victim_uid, why):
    """The confused deputy (issue B20): the unprivileged training pod writes the PID of a
    process of another uid, or of a root process on the node, into its PID file. The
    manifest's own entrypoint refuses it with one line (exit 2) and nothing is stopped -- the
    victim is even in the pod's cgroup, so the uid rule alone refuses it."""
    import uuid

    argv, env, runtime = _entrypoint(tmp_path)
    pod = str(uuid.uuid4())
    victim = _spawn("sleep", "60", uid=victim_uid)
    try:
        pod_cgroup(pod)(victim.pid)
        _pod_pid_file(runtime, pod, victim.pid)
        rc, out, err, seen = _run_refused(argv, env, victim)
        assert rc == 2, err
        assert len(err.splitlines()) == 1 and why in err, err
        assert out == ""  # nothing started, nothing logged
        assert not seen & {"T", "t"}, seen
    finally:
        _end(victim)


@needs_root
def test_the_agent_refuses_a_process_of_the_files_owner_outside_the_pods_cgroup(tmp_path):
    """A pod may not name a process of its own uid in another pod (or on the host): the
    cgroup must be the one of the pod whose directory holds the file."""
    import uuid

    argv, env, runtime = _entrypoint(tmp_path)
    pod = str(uuid.uuid4())
    victim = _spawn("sleep", "60", uid=NOBODY)  # the right uid, not in the pod's cgroup
    try:
        _pod_pid_file(runtime, pod, victim.pid)
        rc, _out, err, seen = _run_refused(argv, env, victim)
        assert rc == 2, err
        assert len(err.splitlines()) == 1 and "does not match --training-cgroup" in err, err
        assert not seen & {"T", "t"}, seen
    finally:
        _end(victim)


def test_the_containers_keep_only_the_capabilities_they_use():
    """Root in each container, with ``drop: [ALL]`` and ``KILL`` alone: it signals and
    freezes a training of another uid (the freezer's files are root's); nothing else is
    used. The DaemonSet's real-run tests here run the entrypoints under the manifest's
    capability set (``setpriv``), and pass with ``KILL`` alone: ``CHOWN``, ``FOWNER`` and
    ``DAC_OVERRIDE``, which the agent had, were never used (DAC_OVERRIDE let it write any
    file on the node's /run and cgroup tree). docs/deploy.md says why ``KILL`` is there."""
    spec = next(d for d in _docs() if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    for c in [*spec["initContainers"], *spec["containers"]]:
        assert _caps(c) == ["KILL"], c["name"]
        assert c["securityContext"].get("privileged") is not True
        assert c["securityContext"].get("allowPrivilegeEscalation") is False, c["name"]
    text = " ".join((ROOT / "docs" / "deploy.md").read_text().split())
    assert "with only `KILL`" in text and "DAC_OVERRIDE" not in text.split("## Kubernetes")[1]


@needs_root
def test_the_init_container_makes_the_directory_the_pid_files_go_in(tmp_path):
    """The resume-leftovers init container, run for real, makes the training pods' directory
    sticky, writable and not listable (the kubelet gives each pod's subdirectory its mode)
    before it resumes leftovers."""
    import stat

    init = next(c for c in next(d for d in _docs() if d["kind"] == "DaemonSet")["spec"][
        "template"]["spec"]["initContainers"] if "--resume-only" in c["args"])
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    shim = _python_shim(tmp_path, _caps(init))
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}",
           "GPUCONTROL_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([*init["command"], *init["args"]], env=env, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    st = os.stat(runtime / "training")
    assert stat.S_IMODE(st.st_mode) == 0o1733
    pid_file = _setting("training_pid_file")
    assert pid_file.startswith("/run/gpucontrol/training/")  # the directory it made


def test_the_training_example_writes_where_the_agent_reads():
    """training-example.yaml: the pod UID names its directory, the PID written is the host's,
    it runs as one of the agent's --allow-uid."""
    pod = yaml.safe_load((DEPLOY / "kubernetes" / "training-example.yaml").read_text())
    spec = pod["spec"]
    assert spec["hostPID"] is True
    assert spec["securityContext"]["runAsUser"] in _setting("allowed_uids")
    c = spec["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    mount = next(m for m in c["volumeMounts"] if m["subPathExpr"] == "$(POD_UID)")
    vol = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    pid_file = _setting("training_pid_file")
    assert pid_file == f"{vol['hostPath']['path']}/{{pod}}/gpu0.pid"
    assert f"> {mount['mountPath']}/gpu0.pid" in c["command"][2]


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
                              "--period-s 0.2 --ready spawn "
                              f"--mps-binary {tmp_path}/no-mps-control"}
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


def test_the_commented_green_context_recipe_is_a_valid_configuration(tmp_path):
    """Uncommenting the ConfigMap's green-context block gives a configuration the daemon
    accepts, joining the device plugin's MPS pipe directory under the commented mount."""
    import tomllib

    cm = next(d for d in _docs() if d["kind"] == "ConfigMap")
    text = re.sub(r"^# ((share_backend|green_shares|outer_every|mps_pipe_dir) = .*)$", r"\1",
                  cm["data"]["gpu0.toml"], flags=re.M)
    assert tomllib.loads(text)["share_backend"] == "green-context"
    (tmp_path / "gpu0.toml").write_text(text)
    _ns, cfg = _config(["--config", str(tmp_path / "gpu0.toml")])
    assert cfg.share_backend == "green-context" and cfg.outer_every == 1
    manifest = DAEMONSET.read_text()
    assert "#   mountPath: /run/nvidia/mps" in manifest
    assert "#     path: /run/nvidia/mps" in manifest
    assert cfg.mps_pipe_dir.startswith("/run/nvidia/mps/")
