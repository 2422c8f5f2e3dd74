"""The daemon's controller, built in one place from its settings, the model file and the
share backend: :func:`make_controller`.

What the daemon passes the :class:`~gpucontrol.TwoTierController`: the model file
(:mod:`gpucontrol.node.model_file`) with its identified sleep span, the SLO, the period, the
outer loop (none without a share knob or with a held share), the detune (0.5 with the
throughput loop: stable under an unknown one-period delay), the cost of a share change (0 for
a restart-free backend, else the controller's prior until a restart is measured), the run
quantum of a duty cycler (the duty is ``q / (q + s)``), the green-context partitions, and a
controller record restored from the state file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucontrol.errors import ConfigurationError
from gpucontrol.node.model_file import load_model, load_sleep_span
from gpucontrol.node.share import controller_restart_s
from gpucontrol.two_tier import TwoTierController

__all__ = ["make_controller"]


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
    kw: dict[str, Any] = {}
    if cfg.outer == "throughput":  # the default: delay-robust even without a share knob
        kw["detune"] = 0.5
        if (restart_s := controller_restart_s(cfg.share_backend)) is not None:
            kw["restart_s"] = restart_s  # the share backend's cost of a change
    if cfg.detune is not None:
        kw["detune"] = cfg.detune
    if cfg.sleep_method != "hook" and cfg.run_quantum_s != "auto":  # duty q / (q + s)
        kw["run_quantum_s"] = float(cfg.run_quantum_s)
    if cfg.green_shares:  # the training's partitions, and the whole device (no command)
        kw["mps_levels_pct"] = (*cfg.green_shares, 100.0)
    try:
        return TwoTierController(
            load_model(cfg.model), cfg.slo_ms, inner_period_s=cfg.period_s,
            outer_every=cfg.outer_every, sleep_bounds_s=(0.0, cfg.max_sleep_s), mode=cfg.mode,
            outer=cfg.outer if share_ok and cfg.fixed_mps is None else "none",
            identified_span_s=load_sleep_span(cfg.model), **kw,
            initial_mps_pct=(restored["mps_pct"] if restored and share_ok
                             else cfg.initial_mps_pct),
            initial_sleep_s=restored["sleep_s"] if restored else None)
    except ValueError as exc:  # the model file, or the controller on that model
        msg = str(exc)
        raise ConfigurationError(f"--model {cfg.model}: {msg}" if cfg.model not in msg
                                 else f"--model: {msg}") from None
