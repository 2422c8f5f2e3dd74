"""--training-user: a training the daemon launches runs as that user, never as root, and is
throttled all the same."""

import os
import shutil
import subprocess

import pytest
from actuators._children import daemon_argv, read_events, state, stopped_pids, wait_for

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.config import DaemonConfig

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start another user")



def _uids(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("Uid:", "Gid:")):
                yield line.split()[0], tuple(int(x) for x in line.split()[1:])


def test_the_launched_training_runs_as_the_training_user_and_is_paused(tmp_path, children):
    # The duty cycler pauses the launched process from the start, the launch gate too
    # (before its setuid and exec): at a duty of 0.1 % (1 s of sleep per 1 ms) the gate's
    # startup took longer than the 5 s waited here in half the runs on a 2-core machine.
    # Half the time running, it switches at once; the pauses are checked all the same.
    cmd = f"{shutil.which('sleep')} 600"  # a program nobody may run (this python may not be)
    d = children.popen(daemon_argv(tmp_path, "u", "--training-cmd", cmd, "--training-user",
                                   "nobody", "--fixed-sleep", "0.05", "--run-quantum-s", "0.05",
                                   "--period-s", "0.2", "--ready", "spawn",
                                   "--sleep-method", "signal",
                                   "--mps-binary", str(tmp_path / "no-mps")),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events = read_events(d.stdout, "started")
    pid = next(e for e in events if e.get("event") == "training_started")["pid"]
    assert wait_for(lambda: dict(_uids(pid)).get("Uid:") == (65534,) * 4, 5.0), \
        dict(_uids(pid))
    ids = dict(_uids(pid))
    assert ids["Gid:"] == (65534,) * 4  # its group too (nogroup)
    assert wait_for(lambda: stopped_pids([pid]) == [pid], 5.0)  # throttled as before
    d.terminate()
    assert d.wait(30) == 0
    assert wait_for(lambda: state(pid) in (None, "Z"), 10.0)  # ended with the daemon


def test_the_training_user_is_checked(tmp_path):
    kw = {"fixed_sleep": 0.1, "socket": str(tmp_path / "s"), "state": str(tmp_path / "st"),
          "hook": str(tmp_path / "h")}
    with pytest.raises(ConfigurationError, match="--training-user: no such user"):
        DaemonConfig(training_cmd="true", training_user="no-such-user-here",
                     **kw).check_environment()
    with pytest.raises(ConfigurationError, match="--training-user goes with --training-cmd"):
        DaemonConfig(training_pids=(4242,), training_user="nobody", **kw)
    cfg = DaemonConfig(training_cmd="true", training_user="nobody", **kw)
    cfg.check_environment()
    assert cfg.target_uids() == {0, 65534}
