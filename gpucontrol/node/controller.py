"""The daemon's controller, built in one place from its settings, the model file and the
share backend: :func:`make_controller`.

Without an outer loop (``--outer none``, no share knob, or a held share) the controller is
still the default one, its share knob reduced to the one level it stands at: the inner loop
keeps its gain schedule, detune and oscillation guard. The GPUColo paper's deadbeat loop on a
fitted line, which ``outer="none"`` gives the library's callers, limit-cycled between sleep 0
and 0.116 s on an H200 (half the periods over the SLO): time-sliced, the latency's slope near
sleep 0 was 2.7 times the line's.

What the daemon passes the :class:`~gpucontrol.TwoTierController`: the model file
(:mod:`gpucontrol.node.model_file`: the latency and training-rate curves with their sleep
span), the SLO, the period, the mode, the outer-loop object (none without a share knob or
with a held share), the detune (the controller's default, 0.5 with the throughput loop,
unless ``--detune``), the share knob (the green-context partitions as its levels; a change
costs nothing on a restart-free backend, else the controller's prior until a restart is
measured), the sleep knob (its range, a duty cycler's run quantum: the duty is
``q / (q + s)``), and a controller record restored from the state file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpucontrol.controllers import OuterMPSOptimizer
from gpucontrol.errors import ConfigurationError
from gpucontrol.knobs import ShareKnob, SleepKnob
from gpucontrol.node.model_file import load_model
from gpucontrol.node.share import controller_restart_s
from gpucontrol.outer import ThroughputOuter, least_latency_ms
from gpucontrol.two_tier import TwoTierController

__all__ = ["check_slo", "make_controller"]


def make_controller(cfg: Any, *, share_ok: bool,
                    restored: Mapping[str, float] | None = None) -> TwoTierController | None:
    """The controller the settings ask for; None in open loop (``fixed_sleep``).

    Parameters
    ----------
    cfg : DaemonConfig
        The settings.
    share_ok : bool
        Whether a share knob runs (else the outer loop is off).
    restored : mapping or None
        A fresh controller record (``sleep_s``, ``mps_pct``) to start from.

    Returns
    -------
    TwoTierController or None
        The controller.

    Raises
    ------
    ConfigurationError
        The model file, or the controller on that model, is refused (``--model`` named).
    """
    if cfg.fixed_sleep is not None:
        return None
    held = not share_ok or cfg.fixed_mps is not None or cfg.share_backend == "none"
    strategy = "none" if held else cfg.outer
    outer: ThroughputOuter | OuterMPSOptimizer = (
        OuterMPSOptimizer(strategy, every=cfg.outer_every) if strategy in ("paper", "mid-range")
        else ThroughputOuter(every=cfg.outer_every))
    quantum = None if cfg.sleep_method == "hook" or cfg.run_quantum_s == "auto" else \
        float(cfg.run_quantum_s)                       # a duty cycler: duty q / (q + s)
    try:
        share = ShareKnob(
            # the training's partitions, and the whole device (no command)
            levels_pct=(*cfg.green_shares, 100.0) if cfg.green_shares else None,
            change_s=controller_restart_s(cfg.share_backend) if cfg.outer == "throughput"
            else None,
            initial_pct=restored["mps_pct"] if restored and share_ok else cfg.initial_mps_pct)
        if strategy == "none":     # the share held: the default loop on one level
            share = ShareKnob(levels_pct=(share.start_pct,), change_s=0.0,
                              initial_pct=share.start_pct)
        sleep = SleepKnob((0.0, cfg.max_sleep_s), run_quantum_s=quantum,
                          initial_s=restored["sleep_s"] if restored else None)
        return TwoTierController(load_model(cfg.model), cfg.slo_ms,
                                 inner_period_s=cfg.period_s, mode=cfg.mode, outer=outer,
                                 share=share, sleep=sleep, design=cfg.detune)
    except ValueError as exc:  # the model file, or the controller on that model
        msg = str(exc)
        raise ConfigurationError(f"--model {cfg.model}: {msg}" if cfg.model not in msg
                                 else f"--model: {msg}") from None


def check_slo(ctl: TwoTierController, cfg: Any) -> None:
    """Refuse an SLO no setting of the knobs can meet on the model: under the least latency
    its curves predict at any share the controller's knob offers and the longest sleep
    (:func:`gpucontrol.outer.least_latency_ms`), as ``gpucontrol burst`` refuses one under the
    least latency its plant reaches.

    Parameters
    ----------
    ctl : TwoTierController
        The controller :func:`make_controller` built.
    cfg : DaemonConfig
        The settings (``model``, for the message).

    Raises
    ------
    ConfigurationError
        ``--slo-ms`` under that latency (one line naming it and the least SLO the model meets).
    """
    least, pct = least_latency_ms(ctl.family, ctl.share, ctl.sleep_knob)
    if ctl.slo_ms < least:
        levels = ctl.share.levels_pct or ctl.share.bounds_pct
        lo, hi = min(levels), max(levels)
        offered = f"{lo:g} %" if lo == hi else f"[{lo:g}, {hi:g}] %"
        ms = math.ceil(least * 10.0) / 10.0  # rounded up: an SLO of that is accepted
        raise ConfigurationError(
            f"--slo-ms {ctl.slo_ms:g}: no setting of the knobs can meet it: the least latency "
            f"--model {cfg.model} predicts is {ms:.1f} ms, at the longest sleep "
            f"({ctl.sleep_knob.bounds_s[1]:g} s) and share {pct:g} % (of {offered}); give an "
            f"SLO of at least {ms:.1f} ms")
