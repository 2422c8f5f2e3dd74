"""The controller's state across daemon restarts.

Every period the daemon writes its controller's last actuation into the state file
(``controller``: sleep, MPS share, time, and what it was computed for). A daemon restarted
soon after (by systemd, or by hand) starts from it instead of from no sleep at all, so a crash
does not hand the GPU back to the training unthrottled for the seconds the controller needs to
converge again. The record is used only when it is *fresh* (written within
:func:`fresh_within_s` of now) and was made for the same SLO, model file, mode and bounds;
otherwise the controller starts from its defaults.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from gpucontrol.node.config import DaemonConfig

__all__ = ["controller_record", "fresh_within_s", "restorable"]


def _key(cfg: DaemonConfig) -> dict[str, Any]:
    return {"slo_ms": cfg.slo_ms, "model": os.path.realpath(cfg.model) if cfg.model else None,
            "mode": cfg.mode, "max_sleep_s": cfg.max_sleep_s}


def fresh_within_s(cfg: DaemonConfig) -> float:
    """How old a record may be and still be resumed: five periods, at least 30 s.

    Parameters
    ----------
    cfg : DaemonConfig
        The daemon's configuration (its period).

    Returns
    -------
    float
        Seconds.
    """
    return max(5.0 * cfg.period_s, 30.0)


def controller_record(cfg: DaemonConfig, sleep_s: float, mps_pct: float) -> dict[str, Any]:
    """The ``controller`` record of the state file.

    Parameters
    ----------
    cfg : DaemonConfig
        The daemon's configuration.
    sleep_s, mps_pct : float
        The controller's last actuation.

    Returns
    -------
    dict
        JSON-ready record.
    """
    return {"sleep_s": float(sleep_s), "mps_pct": float(mps_pct), "at": time.time(),
            **_key(cfg)}


def restorable(doc: dict | None, cfg: DaemonConfig,
               now: float | None = None) -> dict[str, float] | None:
    """The actuation to resume from a previous run's state document, when fresh and made for
    the same settings.

    Parameters
    ----------
    doc : dict or None
        The previous run's state document (None: there is none).
    cfg : DaemonConfig
        This run's configuration.
    now : float or None
        The current time (``time.time()`` when None).

    Returns
    -------
    dict or None
        ``{"sleep_s", "mps_pct", "age_s"}`` or None.
    """
    if not cfg.closed_loop or not isinstance(doc, dict):
        return None
    rec = doc.get("controller")
    if not isinstance(rec, dict):
        return None
    try:
        sleep_s, mps_pct, at = float(rec["sleep_s"]), float(rec["mps_pct"]), float(rec["at"])
    except (KeyError, TypeError, ValueError):
        return None
    age = (time.time() if now is None else now) - at
    if not (all(math.isfinite(x) for x in (sleep_s, mps_pct, age))
            and 0.0 <= age <= fresh_within_s(cfg)):
        return None
    if any(rec.get(k) != v for k, v in _key(cfg).items()):
        return None
    if not (0.0 <= sleep_s <= cfg.max_sleep_s and 1.0 <= mps_pct <= 100.0):
        return None
    return {"sleep_s": sleep_s, "mps_pct": mps_pct, "age_s": age}
