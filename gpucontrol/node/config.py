"""The daemon's configuration: one frozen, typed :class:`DaemonConfig`, validated when built.

The command line (:mod:`gpucontrol.node.cli`) builds it once with
:meth:`DaemonConfig.from_args`; node software can build it directly and hand it to
:class:`gpucontrol.node.daemon.Daemon`::

    from gpucontrol.node.config import DaemonConfig
    from gpucontrol.node.daemon import Daemon

    cfg = DaemonConfig(training_pids=(4242,), slo_ms=90.0, model="model.json")
    Daemon(cfg).run()          # blocks until SIGTERM/SIGINT, the duration or the training end

Every bad value raises :class:`~gpucontrol.errors.ConfigurationError` (a ``ValueError``) whose
message names the command-line flag and the allowed range. Only value checks run at
construction; the checks that look at this machine (may these processes be paused? are we
root?) are :meth:`DaemonConfig.check_environment`, which the daemon runs before it touches
anything.

Examples
--------
>>> from gpucontrol.node.config import DaemonConfig
>>> cfg = DaemonConfig(training_pids=(4242,), fixed_sleep=0.1, socket="/tmp/x/g.sock",
...                    state="/tmp/x/g.state.json", hook="/tmp/x/g.hook")
>>> cfg.closed_loop, cfg.period_s, cfg.socket
(False, 4.0, '/tmp/x/g.sock')
>>> DaemonConfig(training_pids=(4242,), fixed_sleep=0.1, period_s=0)
Traceback (most recent call last):
...
gpucontrol.errors.ConfigurationError: --period-s must be in [0.01, 3600], got 0

A setting that would have no effect is refused too, rather than silently ignored:

>>> DaemonConfig(training_pids=(4242,), fixed_sleep=0.1, slo_ms=90.0)
Traceback (most recent call last):
...
gpucontrol.errors.ConfigurationError: --slo-ms is for the closed loop, and --fixed-sleep ...
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Literal

from gpucontrol._validate import choice, finite, flag, in_range, int_at_least, positive
from gpucontrol.errors import ConfigurationError
from gpucontrol.node import registry
from gpucontrol.node.config_checks import (
    BOOL_FIELDS,
    FILE_ONLY,
    NEEDS,
    PATH_FIELDS,
    TEXT_FIELDS,
    TEXT_REQUIRED,
    check_metrics_addr,
    flag_of,
)

__all__ = ["FILE_ONLY", "PATH_FIELDS", "DaemonConfig", "default_share_cgroup", "field_names"]

OUTER_LOOPS = ("throughput", "paper", "mid-range", "none")
MODES = ("mean", "p99")
#: The knobs' names come from their registries (:mod:`gpucontrol.node.registry`).
SLEEP_METHODS = tuple(registry.SLEEP_METHODS)
READY_MODES = ("notify", "spawn")
LATENCY_SOURCES = tuple(registry.LATENCY_SOURCES)
SHARE_BACKENDS = tuple(registry.SHARE_BACKENDS)
#: The longest a Prometheus scrape may take, seconds (less at short periods or stall timeouts).
SCRAPE_TIMEOUT_S = 1.0
#: The shortest scrape deadline the period and stall timeout may leave, seconds.
MIN_SCRAPE_TIMEOUT_S = 0.05


def default_share_cgroup(gpu: int) -> str:
    """The default ``--share-cgroup`` of GPU ``gpu``'s daemon: one group per GPU.

    >>> default_share_cgroup(1)
    'gpucontrol-training-gpu1'
    """
    return f"gpucontrol-training-gpu{int(gpu)}"

# The allowed ranges of the duration flags, in seconds (docs/daemon.md lists them). Every one
# is bounded: the guardian poll()s with the stall timeout (default 1.5 periods, <= 5400 s),
# and poll() takes at most 2**31 - 1 ms; a tiny period would flood the log.
PERIOD_S = (0.01, 3600.0)  # >= 0.01: the stress tests run 0.02 s periods; 3600: one an hour
MAX_SLEEP_S = 3600.0  # the controller's sleep bound
RUN_QUANTUM_S = (0.001, 3600.0)  # the controller's range of the run quantum
STALL_TIMEOUT_S = (0.1, 3600.0)  # or 0: off
READY_TIMEOUT_S = 3600.0
MPS_HEALTH_S = (0.1, 300.0)  # 300: the back-off's cap
DURATION_S = 7 * 86400.0  # a week; leave --duration-s out to run until stopped


@dataclass(frozen=True)
class DaemonConfig:
    """Every setting of one GPU's daemon (the command-line flag of each is in brackets; the
    settings of :data:`FILE_ONLY` have a configuration-file key and no flag).

    Parameters
    ----------
    training_pids : tuple of int
        Running training processes to pause [``--training-pid``, repeatable]; give these,
        ``training_cmd`` or ``training_pid_file``, one of the three.
    training_cmd : str or None
        Command line the daemon launches (and restarts for an MPS change) [``--training-cmd``].
    training_user : str or None
        Run the launched training as this user, a name or a uid [``--training-user``]; only
        with ``training_cmd``, and the daemon must be root (or that user). Its targets may
        then run as that user.
    training_pid_file : str or None
        A file the training writes its PID into [``--training-pid-file``]; the daemon waits
        for it, opens it without following links and accepts only a process of the file's
        owner (:mod:`gpucontrol.node.pidfile`); ``{pod}`` as one directory name stands for a
        Kubernetes pod UID.
    training_cgroup : str or None
        A shell pattern the training's cgroup path must match [``--training-cgroup``], e.g.
        ``*pod{pod}*`` (``{pod}``: the pod UID of the PID file's path); not with
        ``training_cmd``.
    slo_ms : float or None
        Latency set point, ms per batch, > 0 [``--slo-ms``]; needed in closed loop.
    model : str or None
        Path of the latency model JSON [``--model``]; needed in closed loop
        (see :func:`gpucontrol.node.daemon.load_model`).
    period_s : float
        Control period in seconds, in [0.01, 3600] [``--period-s``].
    outer_every : int
        Run the outer (MPS) loop every this many periods, >= 1 [``--outer-every``].
    outer : {'throughput', 'paper', 'mid-range', 'none'}
        Outer-loop rule [``--outer``]: ``throughput`` (default) seeks the highest training
        rate at the SLO, counting each change's measured cost; ``paper`` reproduces the
        GPUColo paper's loop; ``none`` holds the share where it starts (the default inner
        loop all the same: :func:`gpucontrol.node.controller.make_controller`).
    mode : {'mean', 'p99'}
        Which latency statistic the inner loop controls [file only: ``mode``].
    detune : float or None
        Inner-loop gain as a fraction of the deadbeat gain on the model, in (0, 2)
        [``--detune``]; None: the controller's default (0.5 with the throughput outer loop).
        Lower is slower but passes less of a noisy plant's per-period scatter back into
        the sleep.
    max_sleep_s : float
        Upper bound of the commanded sleep in seconds, in (0, 3600] (60 with the hook)
        [``--max-sleep-s``].
    initial_mps : float
        MPS active-thread percentage the training starts at, in [1, 100] [file only:
        ``initial_mps``].
    fixed_sleep : float or None
        Open loop: always this sleep, in [0, ``max_sleep_s``] [``--fixed-sleep``].
    fixed_mps : float or None
        Hold the share at this percentage, in [1, 100] [``--fixed-mps``], with either sleep:
        ``fixed_sleep`` (open loop) or the closed-loop sleep (``slo_ms`` and ``model``; no
        outer loop then runs). With the ``mps`` share backend it needs ``training_cmd``
        (MPS applies at process start).
    duration_s : float or None
        Run ``floor(duration_s / period_s)`` periods and stop, once this many seconds have
        passed, in (0, 604800] (a week; None: run until stopped) [``--duration-s``].
    sleep_method : {'auto', 'signal', 'cgroup', 'hook'}
        How the training is paused [``--sleep-method``].
    cgroup : str or None
        cgroup v2 directory holding the training [``--cgroup``].
    run_quantum_s : float or 'auto'
        Run time between two pauses in seconds, in [0.001, 3600], or ``'auto'`` (the
        measured iteration time) [``--run-quantum-s``]; not with ``sleep_method='hook'``.
    shadow : bool
        On an MPS change, pre-start the new training before stopping the old [``--shadow``];
        ``shadow``, ``ready`` and ``ready_timeout_s`` go with ``training_cmd`` and the ``mps``
        share backend.
    ready : {'notify', 'spawn'}
        When a (re)started training counts as ready [``--ready``].
    ready_timeout_s : float
        How long to wait for that, seconds, in (0, 3600] [``--ready-timeout-s``].
    mps_binary : str
        The ``nvidia-cuda-mps-control`` executable [``--mps-binary``].
    mps_pipe_dir : str or None
        Use this running MPS control daemon instead of a private one [``--mps-pipe-dir``].
    mps_unchecked : bool
        With ``green-context``: go on when the inference cannot be confirmed an MPS client
        of the training's control daemon (or there is none), with one warning line, instead
        of refusing to start [``--mps-unchecked``].
    mps_health_s : float
        Check the MPS control daemon this often, seconds, in [0.1, 300] (doubling after each
        failure, up to 300 s); a private one that died is restarted [``--mps-health-s``].
    allowed_uids : tuple of int
        Root only: the other users whose training processes may be paused, and whose PID
        files may name one [``--allow-uid``, repeatable]; empty: the daemon's own user (and
        root's PID files) only.
    gpu : int
        GPU index, >= 0; names the default files [``--gpu``].
    socket : str
        Latency socket path; empty: ``<runtime dir>/gpuN.sock`` [``--socket``].
    state : str
        State file path; empty: ``<runtime dir>/gpuN.state.json`` [``--state``].
    hook : str
        Hook file path; empty: ``<runtime dir>/gpuN.hook`` [``--hook``].
    log : str or None
        JSON-lines event log, appended to; None: standard output [``--log``].
    metrics_port : int or None
        Serve Prometheus metrics on this port, in [0, 65535] (0: any free port; None: no
        metrics) [``--metrics-port``].
    metrics_addr : str
        IPv4 address or host name the metrics server binds [``--metrics-addr``]; loopback by
        default, ``0.0.0.0`` for every interface; only with ``metrics_port``.
    silent_periods : int
        Warn (event ``inference_silent``, metric ``gpucontrol_inference_silent``) after this
        many consecutive periods without a latency report, >= 1 [file only: ``silent_periods``].
    unready_periods : int
        ``/readyz`` answers 503, with the reason in its body, after this many consecutive
        periods without usable latency (no report, or a latency source that fails), >= 0
        (0: never) [file only: ``unready_periods``].
    metrics_textfile : str or None
        Also write the metrics to this file every period, for node-exporter's text-file
        collector [``--metrics-textfile``].
    metrics_target : str or None
        The ``target`` label of every metric; None: the cgroup's name, the training script
        or the PIDs [file only: ``metrics_target``]; only with ``metrics_port`` or
        ``metrics_textfile``.
    socket_group : str or None
        Group (name or number) given access to the latency socket (read-write) and the hook
        file (read), so non-root inference and training can use a root daemon
        [``--socket-group``].
    stall_timeout_s : float or None
        Seconds without a control-loop heartbeat after which the guardian resumes the
        training and kills the daemon, 0 (off) or in [0.1, 3600]; None: 1.5 periods, at
        least 2 s [``--stall-timeout-s``].
    latency_source : {'socket', 'prometheus'}
        Where the latency comes from: the datagram socket (``report_latency``) or a scraped
        Prometheus histogram [``--latency-source``].
    prometheus_url : str or None
        The inference server's ``/metrics`` URL; needed by ``prometheus``, and only with it
        [``--prometheus-url``]. Each scrape must end within :attr:`scrape_timeout_s`; with
        ``prometheus`` a ``period_s`` and ``stall_timeout_s`` that leave it less than 0.05 s
        are refused.
    prometheus_metric : str
        Base name of its latency histogram, in seconds; only with ``prometheus``
        [``--prometheus-metric``].
    share_backend : {'mps', 'cpu', 'green-context', 'none'}
        The outer loop's knob [``--share-backend``]: the MPS percentage (a restart of the
        launched training), the training's CPU share through the cgroup CPU controller (no
        restart), a green-context partition the cooperative training switches to at its
        next iteration, commanded through the hook file (no restart), or none: the training
        outside MPS and the sleep alone; see :mod:`gpucontrol.node.share`.
    share_cgroup : str
        The CPU-share group, relative to the CPU controller's root; made when missing; one
        daemon per group; only with the ``cpu`` share backend [``--share-cgroup``]. Empty:
        ``gpucontrol-training-gpu<gpu>``, so the daemons of two GPUs never share one.
    green_shares : tuple of float
        The green-context partitions the training created, % in [1, 100] [``--green-shares``,
        comma-separated]: the training runs a command on the largest partition not above it,
        and the daemon reports that partition as the applied share (``share_change``'s
        ``applied_pct``, the metrics) and its widest gap as the granularity. Empty: any
        share, rounded to 1 %.

    Notes
    -----
    A setting that would be ignored is refused (:data:`NEEDS`): a closed-loop setting
    (``slo_ms``, ``model``, ``detune``, ``outer``, ``outer_every``, ``mode``) with
    ``fixed_sleep``, ``outer``/``outer_every``/``initial_mps`` with ``fixed_mps``, and each
    setting of a latency source, share backend or metrics output that is not the chosen one.
    A field left at its default is never refused.

    ``socket``, ``state`` and ``hook`` are made absolute (or filled with the defaults of
    :func:`gpucontrol.node._runtime.default_path`) at construction, so the built object holds
    the paths the daemon will use.
    """

    training_pids: tuple[int, ...] = ()
    training_cmd: str | None = None
    training_pid_file: str | None = None
    training_cgroup: str | None = None
    training_user: str | None = None
    slo_ms: float | None = None
    model: str | None = None
    period_s: float = 4.0
    outer_every: int = 25
    outer: Literal["throughput", "paper", "mid-range", "none"] = "throughput"
    mode: Literal["mean", "p99"] = "mean"
    detune: float | None = None
    max_sleep_s: float = 1.0
    initial_mps: float = 100.0
    fixed_sleep: float | None = None
    fixed_mps: float | None = None
    duration_s: float | None = None
    sleep_method: Literal["auto", "signal", "cgroup", "hook"] = "auto"
    cgroup: str | None = None
    run_quantum_s: float | Literal["auto"] = 0.2
    shadow: bool = False
    ready: Literal["notify", "spawn"] = "notify"
    ready_timeout_s: float = 120.0
    mps_binary: str = "nvidia-cuda-mps-control"
    mps_pipe_dir: str | None = None
    mps_health_s: float = 10.0
    mps_unchecked: bool = False
    allowed_uids: tuple[int, ...] = ()
    gpu: int = 0
    socket: str = ""
    state: str = ""
    hook: str = ""
    log: str | None = None
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    silent_periods: int = 5
    unready_periods: int = 0
    metrics_textfile: str | None = None
    metrics_target: str | None = None
    socket_group: str | None = None
    stall_timeout_s: float | None = None
    # --- CPU plant wiring (latency source, CPU share backend)
    latency_source: Literal["socket", "prometheus"] = "socket"
    prometheus_url: str | None = None
    prometheus_metric: str = "inference_latency_seconds"
    share_backend: Literal["mps", "cpu", "green-context", "none"] = "mps"
    share_cgroup: str = ""
    green_shares: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        self._check_types()
        self._validate()
        from gpucontrol.node._runtime import default_path

        for field, kind in (("socket", "sock"), ("state", "state"), ("hook", "hook")):
            value = getattr(self, field)
            path = os.path.abspath(value) if value else str(default_path(kind, self.gpu))
            object.__setattr__(self, field, path)

    def _check_types(self) -> None:
        """Each field's type, before any value is looked at: node software building a config
        directly gets the same one-line errors naming the flag as the command line."""
        pids = self.training_pids
        if isinstance(pids, (str, bytes)) or not hasattr(pids, "__iter__"):
            raise ConfigurationError(f"--training-pid: training_pids must be a sequence of "
                                     f"PIDs, got {pids!r}")
        object.__setattr__(self, "training_pids", tuple(
            int_at_least("--training-pid", p, 1) for p in pids))
        uids = self.allowed_uids
        if isinstance(uids, (str, bytes)) or not hasattr(uids, "__iter__"):
            raise ConfigurationError(f"--allow-uid: allowed_uids must be a sequence of uids, "
                                     f"got {uids!r}")
        object.__setattr__(self, "allowed_uids", tuple(sorted(
            {int_at_least("--allow-uid", u, 0) for u in uids})))
        for name in BOOL_FIELDS:
            object.__setattr__(self, name, flag(flag_of(name), getattr(self, name)))
        for name in TEXT_FIELDS:
            value = getattr(self, name)
            if value is None and name not in TEXT_REQUIRED:
                continue
            if not isinstance(value, str) and not (
                    isinstance(value, os.PathLike) and name in PATH_FIELDS):
                raise ConfigurationError(f"{flag_of(name)} must be text, got {value!r}")
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
        if not isinstance(self.green_shares, (str, tuple, list)):
            raise ConfigurationError(f"--green-shares must be comma-separated percentages, "
                                     f"got {self.green_shares!r}")

    def _validate(self) -> None:
        self._validate_training()
        self._validate_control()
        self._validate_supervision()
        self._validate_sources()
        self._check_needs()

    def _validate_training(self) -> None:
        if (bool(self.training_pids) + bool(self.training_cmd)
                + bool(self.training_pid_file)) != 1:
            raise ConfigurationError("give either --training-pid (repeatable), "
                                     "--training-pid-file or --training-cmd")
        from gpucontrol.node.pidfile import check_pattern

        check_pattern(self.training_pid_file, self.training_cgroup)
        for pid in self.training_pids:
            int_at_least("--training-pid", pid, 1)
        if self.fixed_sleep is None and (self.slo_ms is None or self.model is None):
            if self.fixed_mps is not None and self.slo_ms is None and self.model is None:
                raise ConfigurationError(
                    "--fixed-mps holds the share only: the sleep needs --fixed-sleep (open "
                    "loop) or --slo-ms and --model (closed loop)")
            raise ConfigurationError("closed-loop operation needs --slo-ms and --model "
                                     "(or run open loop with --fixed-sleep)")

    def _validate_control(self) -> None:
        if self.slo_ms is not None:
            positive("--slo-ms", self.slo_ms)
        in_range("--period-s", self.period_s, *PERIOD_S)
        in_range("--max-sleep-s", self.max_sleep_s, 0.0, MAX_SLEEP_S, lo_open=True)
        object.__setattr__(self, "outer_every",
                           int_at_least("--outer-every", self.outer_every, 1))
        choice("--outer", self.outer, OUTER_LOOPS)
        choice(flag_of("mode"), self.mode, MODES)
        if self.detune is not None:
            in_range("--detune", self.detune, 0.0, 2.0, lo_open=True, hi_open=True)
        choice("--sleep-method", self.sleep_method, SLEEP_METHODS)
        choice("--ready", self.ready, READY_MODES)
        in_range(flag_of("initial_mps"), self.initial_mps, 1, 100)
        if self.sleep_method == "hook" and self.max_sleep_s > 60.0:
            in_range("--max-sleep-s (with --sleep-method hook, whose hard cap is 60 s)",
                     self.max_sleep_s, 0, 60.0)
        if self.fixed_sleep is not None:
            in_range("--fixed-sleep", self.fixed_sleep, 0, self.max_sleep_s)
        if self.fixed_mps is not None and not self.training_cmd and self.share_backend == "mps":
            raise ConfigurationError("--fixed-mps needs --training-cmd "
                                     "(MPS applies at process start)")
        if self.fixed_mps is not None:
            in_range("--fixed-mps", self.fixed_mps, 1, 100)
        if self.duration_s is not None:
            in_range("--duration-s", self.duration_s, 0.0, DURATION_S, lo_open=True)

    def _validate_supervision(self) -> None:
        if self.run_quantum_s != "auto":
            if isinstance(self.run_quantum_s, str):
                raise ConfigurationError(
                    f"--run-quantum-s must be 'auto' or in [{RUN_QUANTUM_S[0]:g}, "
                    f"{RUN_QUANTUM_S[1]:g}], got {self.run_quantum_s!r}")
            in_range("--run-quantum-s", self.run_quantum_s, *RUN_QUANTUM_S)
        in_range("--ready-timeout-s", self.ready_timeout_s, 0.0, READY_TIMEOUT_S, lo_open=True)
        in_range("--mps-health-s", self.mps_health_s, *MPS_HEALTH_S)
        # an integral float (a TOML file's ``9400.0``) is accepted and kept as the int it is
        for name, lo in (("gpu", 0), ("silent_periods", 1), ("unready_periods", 0)):
            object.__setattr__(self, name, int_at_least(flag_of(name), getattr(self, name), lo))
        if self.socket_group is not None:
            from gpucontrol.node._runtime import resolve_group

            try:
                resolve_group(self.socket_group)
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from None
        if self.stall_timeout_s is not None and finite("--stall-timeout-s (0: off)",
                                                       self.stall_timeout_s) != 0:
            in_range("--stall-timeout-s (0: off)", self.stall_timeout_s, *STALL_TIMEOUT_S)
        if self.metrics_port is not None:
            port = int_at_least("--metrics-port", self.metrics_port, 0)
            in_range("--metrics-port", port, 0, 65535)
            object.__setattr__(self, "metrics_port", port)
        check_metrics_addr(self.metrics_addr)

    def _validate_sources(self) -> None:
        choice("--latency-source", self.latency_source, LATENCY_SOURCES)
        choice("--share-backend", self.share_backend, SHARE_BACKENDS)
        shares = self.green_shares
        if isinstance(shares, str):
            try:
                shares = tuple(float(x) for x in shares.split(",") if x.strip())
            except ValueError:
                raise ConfigurationError(f"--green-shares must be comma-separated percentages, "
                                         f"got {self.green_shares!r}") from None
        object.__setattr__(self, "green_shares", tuple(
            in_range("--green-shares", x, 1.0, 100.0) for x in shares))
        if self.latency_source == "prometheus" and not self.prometheus_url:
            raise ConfigurationError("--latency-source prometheus needs --prometheus-url")
        if self.latency_source == "prometheus" and self.scrape_timeout_s < MIN_SCRAPE_TIMEOUT_S:
            lo = MIN_SCRAPE_TIMEOUT_S
            raise ConfigurationError(
                f"--latency-source prometheus needs --period-s >= {2 * lo:g} and "
                f"--stall-timeout-s >= {4 * lo:g} (or 0): a scrape gets min({SCRAPE_TIMEOUT_S:g}"
                f" s, --period-s/2, --stall-timeout-s/4), here {self.scrape_timeout_s:.3g} s")
        if not self.share_cgroup:
            object.__setattr__(self, "share_cgroup", default_share_cgroup(self.gpu))
        if self.share_backend == "cpu" and (self.share_cgroup.startswith("/")
                                            or ".." in self.share_cgroup.split("/")):
            raise ConfigurationError(f"--share-cgroup must be a relative group name, got "
                                     f"{self.share_cgroup!r}")

    def _check_needs(self) -> None:
        """Refuse a setting that would be ignored: every rule of :data:`NEEDS` whose fields
        are away from their defaults must hold."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        also_unset = {"share_cgroup": default_share_cgroup(self.gpu)}  # filled in when empty
        for fields, holds, why in NEEDS:
            if holds(self):
                continue
            for name in fields:
                value = getattr(self, name)
                if value != defaults[name] and value != also_unset.get(name, defaults[name]):
                    raise ConfigurationError(f"{flag_of(name)} {why}")

    # ------------------------------------------------------------------ derived
    @property
    def closed_loop(self) -> bool:
        """True when the :class:`~gpucontrol.TwoTierController` runs (no ``fixed_sleep``)."""
        return self.fixed_sleep is None

    @property
    def scrape_timeout_s(self) -> float:
        """The deadline of one Prometheus scrape, seconds: 1 s, at most half a period and a
        quarter of the stall timeout (of its default when it is off), so that a slow or
        silent ``/metrics`` endpoint costs periods without samples, never the heartbeat.

        >>> DaemonConfig(training_pids=(4242,), fixed_sleep=0, period_s=0.2,
        ...              stall_timeout_s=0.6).scrape_timeout_s
        0.1
        """
        from gpucontrol.node.health import default_stall_timeout

        window = self.stall_timeout_s or default_stall_timeout(self.period_s)
        return min(SCRAPE_TIMEOUT_S, self.period_s / 2, window / 4)

    @property
    def initial_mps_pct(self) -> float:
        """The MPS percentage the training starts at (``fixed_mps`` wins over ``initial_mps``)."""
        return self.fixed_mps if self.fixed_mps is not None else self.initial_mps

    def check_environment(self) -> None:
        """Checks that look at this machine; the daemon runs them before touching anything.

        Raises
        ------
        ConfigurationError
            ``allowed_uids`` without root; a ``training_cmd`` whose program cannot be
            run (not found on PATH, not executable, or an empty command); a ``socket``,
            ``state`` or ``hook`` path that is a directory; a metrics address or port the
            server could not listen on (a trial bind); ``fixed_mps`` on the ``mps`` backend
            where ``mps_binary`` is not found.
        gpucontrol.errors.TargetRefused
            A ``training_pids`` entry may not be paused (init, ourselves, an ancestor, a
            kernel thread, another user's process, or no such process).
        """
        from gpucontrol.node.config_checks import check_environment

        check_environment(self)

    def target_uids(self) -> frozenset[int]:
        """The uids a training process may run as: the daemon's own, ``allowed_uids`` and the
        ``training_user``'s (a PID file narrows this to its owner)."""
        extra = {self.training_uid()} if self.training_user is not None else set()
        return frozenset({os.geteuid(), *self.allowed_uids, *extra})

    def training_uid(self) -> int:
        """The uid of ``training_user`` (raises ConfigurationError for an unknown user)."""
        from gpucontrol.node.actuators.procs import account_spec

        try:
            return int(account_spec(str(self.training_user)).split(":")[0])
        except ValueError as exc:
            raise ConfigurationError(f"--training-user: {exc}") from None

    def pid_file_owners(self) -> frozenset[int]:
        """The owners whose ``training_pid_file`` is read: the daemon's user, root and
        ``allowed_uids``."""
        return frozenset({os.geteuid(), 0, *self.allowed_uids})

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DaemonConfig:
        """Build from the namespace parsed by :func:`gpucontrol.node.cli.add_arguments`.

        The settings of ``--config`` (:mod:`gpucontrol.node.config_file`), then the flags given,
        which win.

        Parameters
        ----------
        args : argparse.Namespace
            Parsed arguments; attributes the namespace lacks keep their defaults (or the
            file's), attributes that are not settings (``func`` of a subcommand) are ignored.

        Returns
        -------
        DaemonConfig
            The validated configuration.
        """
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        # an unset flag (None) keeps the field's default
        kw: dict[str, Any] = {k: v for k, v in vars(args).items()
                              if k in defaults and (v is not None or defaults[k] is None)}
        for flag_name, field in (("training_pid", "training_pids"),
                                 ("allow_uid", "allowed_uids")):
            if getattr(args, flag_name, None):
                kw[field] = tuple(getattr(args, flag_name))
        path = getattr(args, "config", None)
        if path:
            from gpucontrol.node.config_file import merge, read_config_file

            kw = merge(read_config_file(path, fields=field_names(), path_fields=PATH_FIELDS),
                       kw)
        return cls(**kw)


def field_names() -> set[str]:
    """The settings' names (the configuration file's keys).

    >>> {"slo_ms", "training_pids", "mode"} <= field_names()
    True
    """
    return {f.name for f in dataclasses.fields(DaemonConfig)}
