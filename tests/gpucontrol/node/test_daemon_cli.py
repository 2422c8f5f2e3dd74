"""The daemon's command line as a user meets it: a refused start is one line naming the flag,
exit 2, and writes nothing."""

import json
import subprocess

import pytest
from actuators._children import SLEEPER, daemon_argv, stopped_pids


# ------------------------------------------------------------------------------ end to end
def _refusals(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gain": 1.0, "offset": 2.0}))
    return {
        "state-is-dir": (["--fixed-sleep", "0", "--state", str(tmp_path)],
                         f"{tmp_path} is not a regular file"),
        "model": (["--slo-ms", "90", "--model", str(bad)], "gain must be < 0"),
    }


CASES = ["state-is-dir", "model"]


@pytest.mark.parametrize("case", CASES)
def test_a_refused_command_line_is_one_line_exit_2_and_writes_nothing(children, tmp_path,
                                                                      case):
    """Each command line (a bad range, a flag that would be ignored, a path or address that
    cannot be used, a bad model) exits 2 with exactly one line naming the flag, no
    traceback, nothing on standard output, no --log file and no state file."""
    args, message = _refusals(tmp_path)[case]
    t = children.spawn(SLEEPER)
    log = tmp_path / "d.log"
    argv = daemon_argv(tmp_path, "r", "--training-pid", str(t.pid), "--log", str(log),
                       "--duration-s", "0.5", *args)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpucontrol-daemon: error: "), r.stderr
    assert message in lines[0], r.stderr
    assert r.stdout == ""
    assert not log.exists()
    assert not (tmp_path / "r.state.json").exists()
    assert stopped_pids([t.pid]) == []


def test_a_refused_start_on_stdout_writes_no_stopped_line(children, tmp_path):
    """Without --log a refused start prints nothing either (it used to print a "stopped"
    event with 0 periods)."""
    t = children.spawn(SLEEPER)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run(daemon_argv(tmp_path, "s", "--training-pid", str(t.pid),
                                   "--slo-ms", "90", "--model", str(bad)),
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                       check=False)
    assert r.returncode == 2 and "cannot read model" in r.stderr
    assert r.stdout == ""


def test_a_refused_start_leaves_an_existing_log_file_as_it_was(children, tmp_path):
    t = children.spawn(SLEEPER)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for before in ("", '{"event": "stopped", "periods": 3}\n'):
        log = tmp_path / "d.log"
        log.write_text(before)
        log.chmod(0o600)
        r = subprocess.run(daemon_argv(tmp_path, "e", "--training-pid", str(t.pid), "--slo-ms",
                                       "90", "--model", str(bad), "--log", str(log)),
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL, check=False)
        assert r.returncode == 2 and f"cannot read model {bad}" in r.stderr
        assert log.read_text() == before  # ours from before: kept, nothing appended
