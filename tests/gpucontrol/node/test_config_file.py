"""The daemon's configuration file (--config): keys, paths, errors, and the flags over it;
the knobs' registries and the daemon's one undo path."""

import pytest
from actuators._children import SLEEPER

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.cli import build_parser
from gpucontrol.node.config import DaemonConfig
from gpucontrol.node.registry import LATENCY_SOURCES, SHARE_BACKENDS, SLEEP_METHODS, knob_class


def _cfg(tmp_path, text, *flags):
    conf = tmp_path / "gpu0.toml"
    conf.write_text(text)
    files = ["--socket", str(tmp_path / "s"), "--state", str(tmp_path / "st"), "--hook",
             str(tmp_path / "h")]
    return DaemonConfig.from_args(build_parser().parse_args(
        ["--config", str(conf), *files, *flags]))


def test_the_file_sets_what_the_flags_do_and_the_flags_win(tmp_path):
    cfg = _cfg(tmp_path, 'training_pids = [4242]\nslo_ms = 90.0\nmodel = "m.json"\n'
               'period_s = 2.0\nmode = "p99"\nsilent_periods = 3\nshadow = false\n',
               "--period-s", "0.5")
    assert cfg.training_pids == (4242,) and cfg.slo_ms == 90.0
    assert cfg.model == str(tmp_path / "m.json")  # relative to the file
    assert cfg.period_s == 0.5  # the flag wins
    assert (cfg.mode, cfg.silent_periods) == ("p99", 3)  # keys without a flag
    # a flag naming the training replaces the file's, whichever key it used
    cfg = _cfg(tmp_path, 'training_pid_file = "/run/x.pid"\nfixed_sleep = 0.1\n',
               "--training-pid", "7")
    assert cfg.training_pids == (7,) and cfg.training_pid_file is None


@pytest.mark.parametrize("text, message", [
    ("slo_msec = 90\n", "'slo_msec' is not a setting (did you mean 'slo_ms'?)"),
    ("[control]\nslo_ms = 90\n", "[control] is a table"),
    ("slo_ms = \n", "not a TOML file"),
    ('training_pids = [4242]\nfixed_sleep = 0.1\nperiod_s = "fast"\n', "--period-s"),
    ('training_pids = [4242]\nfixed_sleep = 0.1\ninitial_mps = 500\n',
     "initial_mps (--config) must be in [1, 100]"),
])
def test_a_bad_file_is_one_line_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigurationError) as exc:
        _cfg(tmp_path, text)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_an_integral_float_in_the_file_is_kept_as_an_int(tmp_path):
    """TOML tells ``9400`` from ``9400.0``; both are accepted, and the daemon gets the int
    (a float port reached the metrics server's trial bind as a TypeError and a traceback)."""
    cfg = _cfg(tmp_path, 'training_pids = [4242]\nfixed_sleep = 0.1\nmetrics_port = 0.0\n'
               'gpu = 1.0\nsilent_periods = 3.0\nunready_periods = 2.0\n')
    got = (cfg.metrics_port, cfg.gpu, cfg.silent_periods, cfg.unready_periods)
    assert got == (0, 1, 3, 2) and all(type(v) is int for v in got)
    from gpucontrol.node.config_checks import _check_metrics_listen

    _check_metrics_listen(cfg.metrics_addr, cfg.metrics_port)
    cfg = _cfg(tmp_path, 'training_pids = [4242]\nslo_ms = 90.0\nmodel = "m.json"\n'
               'outer_every = 5.0\n')
    assert type(cfg.outer_every) is int and cfg.outer_every == 5


@pytest.mark.parametrize("text, message", [
    ("stall_timeout_s = false\n", "--stall-timeout-s (0: off) must be a finite number"),
    ('share_backend = "green-context"\ngreen_shares = ["a"]\n',
     "--green-shares must be a finite number, got 'a'"),
    ('share_backend = "green-context"\ngreen_shares = [true, 50]\n',
     "--green-shares must be a finite number, got True"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_the_flag(tmp_path, text, message):
    """``false`` is no stall timeout of 0 s (off), and a share that is no number is named."""
    with pytest.raises(ConfigurationError) as exc:
        _cfg(tmp_path, 'training_pids = [4242]\nfixed_sleep = 0.1\n' + text)
    assert message in str(exc.value)


def test_a_missing_file_names_the_flag(tmp_path):
    with pytest.raises(ConfigurationError, match=r"--config .*cannot read it"):
        DaemonConfig.from_args(build_parser().parse_args(
            ["--config", str(tmp_path / "missing.toml")]))


def test_flags_nobody_set_are_keys_only():
    flags = {a for act in build_parser()._actions for a in act.option_strings}
    for gone in ("--mode", "--initial-mps", "--metrics-target", "--silent-periods",
                 "--unready-periods", "--allow-other-users"):
        assert gone not in flags


def test_every_registry_entry_is_a_knob_with_start_apply_close():
    for table in (SLEEP_METHODS, SHARE_BACKENDS, LATENCY_SOURCES):
        for name in table:
            cls = knob_class(table, name)
            assert cls.name == name
            assert all(callable(getattr(cls, m)) for m in ("start", "apply", "close"))


def test_the_undo_path_closes_in_reverse_and_goes_on_past_a_failure(tmp_path, caplog,
                                                                      children):
    """What a start registered is closed last-in first-out, each close even when one fails
    (said on the operator's log), so the sleep -- started last -- is resumed first."""
    from gpucontrol.node.daemon import Daemon

    pid = children.spawn(SLEEPER).pid
    d = Daemon(DaemonConfig(training_pids=(pid,), fixed_sleep=0.0, socket=str(tmp_path / "s"),
                            state=str(tmp_path / "st"), hook=str(tmp_path / "h")))
    order = []

    def failing():
        order.append("metrics")
        raise OSError("port gone")

    for name in ("ownership", "training"):
        d._on_exit(lambda name=name: order.append(name))
    d._on_exit(failing)
    d._on_exit(lambda: order.append("sleep"))
    d.shutdown()
    assert order == ["sleep", "metrics", "training", "ownership"]
    assert "shutdown step failed: port gone" in caplog.text
    names = [s.__name__ for s in d.starts()]
    assert names.index("_start_sleep") == len(names) - 2  # the last start but the report
