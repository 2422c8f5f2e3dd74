"""The campaign runner on the CPU: steps are small Python programs standing in for the GPU
commands, so the bookkeeping (statuses, time limits, process-group clean-up, COMMAND.txt,
the archive rewritten after every step, SIGTERM) is tested on every machine."""

import json
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from harness.hil.campaign import (
    STEPS,
    Command,
    Step,
    _parse_extra,
    main,
    quit_leftover_mps,
    run_campaign,
)


def py(code, stdout=None):
    return Command(("-c", code), stdout=stdout)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


STEPS_T = {
    "info": Step("info", ".", (py("print('{\"gpu\": null}')", stdout="gpu.json"),), 1, 30),
    "good": Step("good", "good", (py("import sys; print('hello', sys.argv[1:])"),
                                  py("open('{dir}/result.csv', 'w').write('a,b\\n1,2\\n')")),
                 1, 30, "two commands"),
    "bad": Step("bad", "bad", (py("import sys; print('boom', file=sys.stderr); sys.exit(3)"),
                               py("print('still runs')")), 1, 30),
    # a child that starts a grandchild in its process group and then hangs
    "hang": Step("hang", "hang", (py(
        "import subprocess, sys, time;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        "open('{dir}/grandchild.pid', 'w').write(str(p.pid));"
        "time.sleep(600)"),), 1, 2),
    "long": Step("long", "long", (py("import time; time.sleep(600)"),), 500, 600),
}


def test_statuses_files_and_archive(tmp_path):
    out, arch = tmp_path / "out", tmp_path / "c.tar.gz"
    res = run_campaign(["info", "good", "bad", "hang", "long"], out, archive=arch,
                       steps=STEPS_T, deadline_s=60, grace_s=2, commit="abc123",
                       extra={"good": ["--x", "1"]}, log=lambda m: None)
    got = {o.name: o for o in res}
    assert [o.name for o in res] == ["info", "good", "bad", "hang", "long"]
    assert got["info"].status == "ok" and got["good"].status == "ok"
    assert got["good"].returncodes == [0, 0]
    assert got["bad"].status == "failed" and got["bad"].returncodes == [3, 0]
    assert got["hang"].status == "timed out" and got["hang"].wall_s < 20
    assert got["long"].status == "skipped" and "needs about 500 s" in got["long"].note

    # the hung step's whole process group is gone, grandchild included
    gpid = int((out / "hang" / "grandchild.pid").read_text())
    for _ in range(50):
        if not alive(gpid):
            break
        time.sleep(0.1)
    assert not alive(gpid)

    cmd = (out / "good" / "COMMAND.txt").read_text()
    assert "git commit abc123" in cmd and "status ok" in cmd and "exit codes: 0, 0" in cmd
    assert "--x 1" in cmd.splitlines()[-1]  # extra arguments go to the last command only
    assert "--x" not in cmd.splitlines()[-2]
    assert (out / "good" / "result.csv").read_text() == "a,b\n1,2\n"
    assert "hello" in (out / "good" / "log.txt").read_text()
    assert "boom" in (out / "bad" / "log.txt").read_text()
    assert "still runs" in (out / "bad" / "log.txt").read_text()
    # gpu.json from the info step is copied next to every step's results
    assert json.loads((out / "good" / "gpu.json").read_text()) == {"gpu": None}
    summary = json.loads((out / "campaign.json").read_text())
    assert [s["status"] for s in summary["steps"]] == ["ok", "ok", "failed", "timed out",
                                                       "skipped"]
    with tarfile.open(arch) as tar:
        names = set(tar.getnames())
    assert {"campaign.json", "gpu.json", "good/COMMAND.txt", "good/result.csv",
            "bad/log.txt", "hang/COMMAND.txt"} <= names
    assert not any(n.startswith("/") or ".." in n for n in names)


def test_bad_input_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"unknown step.*nope"):
        run_campaign(["nope"], tmp_path, steps=STEPS_T)
    with pytest.raises(ValueError, match="deadline_s must be > 0"):
        run_campaign(["good"], tmp_path, steps=STEPS_T, deadline_s=0)
    with pytest.raises(ValueError, match="step 'bad', which is not run"):
        run_campaign(["good"], tmp_path, steps=STEPS_T, extra={"bad": ["-x"]})
    with pytest.raises(ValueError, match="--extra must look like"):
        _parse_extra(["no-equals-sign"])
    assert _parse_extra(["burst=--slo 30", "burst=--seed 2"]) == {
        "burst": ["--slo", "30", "--seed", "2"]}
    with pytest.raises(ValueError, match="expected_s <= timeout_s"):
        Step("x", "x", (py("pass"),), 10, 5)
    with pytest.raises(SystemExit) as e:
        main(["nope", "--out", str(tmp_path)])
    assert e.value.code == 2


def test_default_steps_are_the_documented_experiments():
    assert set(STEPS) == {"info", "smoke", "tests", "knobs", "mps", "identify", "burst", "sweep",
                          "spatial", "identify-green", "burst-daemon", "sweep-h100",
                          "tests-fast", "tests-slow"}
    for s in STEPS.values():
        assert s.timeout_s <= 570  # each fits one 10-minute call with room for start-up
        for c in s.commands:
            assert c.argv[0] == "-m"


def test_sigterm_stops_the_running_step_and_still_writes_everything(tmp_path):
    out, arch = tmp_path / "out", tmp_path / "c.tar.gz"
    script = (
        "import sys\n"
        "from harness.hil.campaign import Command, Step, run_campaign\n"
        "steps = {'a': Step('a', 'a', (Command(('-c', 'import time; time.sleep(600)')),), 1, 600),"
        " 'b': Step('b', 'b', (Command(('-c', 'pass')),), 1, 60)}\n"
        f"res = run_campaign(['a', 'b'], {str(out)!r}, archive={str(arch)!r}, steps=steps,"
        " grace_s=5, deadline_s=600, commit='x')\n"
        "print([o.status for o in res])\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):  # wait until step 'a' is running
            if (out / "a" / "log.txt").exists():
                break
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert stdout.strip() == "['interrupted']"  # 'b' is not started after an interrupt
    assert "status interrupted (SIGTERM)" in (out / "a" / "COMMAND.txt").read_text()
    with tarfile.open(arch) as tar:
        assert "a/COMMAND.txt" in tar.getnames()


def test_quit_leftover_mps_only_touches_live_private_daemons(tmp_path, fake_mps):
    exe, record = fake_mps
    live = tmp_path / "gpucontrol-mps-abc" / "pipe"
    dead = tmp_path / "gpucontrol-mps-def" / "pipe"
    other = tmp_path / "nvidia-mps"
    for d in (live, dead, other):
        d.mkdir(parents=True)
    (live / "control").touch()
    (other / "control").touch()
    assert quit_leftover_mps(str(tmp_path), binary=exe) == [str(live)]
    assert record.read_text().splitlines() == ["cmd quit"]
    assert not (live / "control").exists() and (other / "control").exists()
    assert quit_leftover_mps(str(tmp_path), binary=str(tmp_path / "missing")) == []


def test_a_step_longer_than_the_deadline_is_cut_so_the_campaign_ends_in_time(tmp_path):
    steps = {"slow": Step("slow", "slow", (py("import time; time.sleep(600)"),), 1, 600),
             "after": Step("after", "after", (py("pass"),), 1, 60)}
    t0 = time.monotonic()
    res = run_campaign(["slow", "after"], tmp_path, steps=steps, deadline_s=20, grace_s=1,
                       commit="x", log=lambda m: None)
    assert time.monotonic() - t0 < 20
    assert [o.status for o in res] == ["timed out", "skipped"]


@pytest.mark.parametrize("args, message", [
    (["--deadline", "nan"], "argument --deadline: must be in (0, 86400] s, got nan"),
    (["--deadline", "inf"], "argument --deadline: must be in (0, 86400] s, got inf"),
    (["--archive", "/proc/x.tar.gz"], "argument --archive: '/proc/x.tar.gz': '/proc' is not "
                                      "writable"),
    (["--archive", "{tmp}"], "argument --archive: '{tmp}' is a folder; give a file"),
    (["--archive", "{tmp}/c.zip"], "argument --archive: '{tmp}/c.zip': give a .tar.gz file"),
    (["--archive", "{tmp}/old.tar.gz"], "argument --archive: '{tmp}/old.tar.gz' exists, and "
                                        "the campaign rewrites its archive after every step"),
    (["--out", "{tmp}/old.tar.gz"], "argument --out: '{tmp}/old.tar.gz': '{tmp}/old.tar.gz' is "
                                    "not a folder"),
])
def test_bad_flags_are_refused_before_any_step_runs(tmp_path, capsys, args, message):
    """An unwritable or existing --archive ended the campaign with a traceback after its first
    step (or silently replaced an earlier call's archive), --out naming a file with a
    traceback, and --deadline inf was taken."""
    (tmp_path / "old.tar.gz").write_bytes(b"an earlier call's archive")
    out = tmp_path / "out"
    argv = ["info", "--out", str(out), *[a.replace("{tmp}", str(tmp_path)) for a in args]]
    if "--out" in args:
        argv = ["info", *[a.replace("{tmp}", str(tmp_path)) for a in args]]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.replace("{tmp}", str(tmp_path)) in err[0], err
    assert not out.exists()
    assert (tmp_path / "old.tar.gz").read_bytes() == b"an earlier call's archive"
