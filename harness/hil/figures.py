"""Figures drawn from committed hardware results: ``python -m harness.hil.figures``.

``backends``: the one picture of the spatial-share runs -- per backend (sleep, MPS restart,
green context, green context + MPS) the inference latency against the training throughput at
each commanded share (a sleep row's at ``1 / (iteration + sleep)``, as the tables give it),
the inference alone beside them -- from ``spatial/levels.csv``,
``spatial_mps/levels.csv`` and ``smoke/inference.jsonl`` of a results folder::

    python -m harness.hil.figures backends docs/results --out docs/results/h100_backends.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.results import read_csv, save_figure

__all__ = ["backend_rows", "backends_figure", "main"]

#: Backend -> (label, colour, marker); the plotting order.
STYLE = {"sleep": ("sleep only (time-sliced, no MPS)", "tab:green", "o"),
         "mps-restart": ("MPS restart (the paper's knob)", "tab:orange", "s"),
         "green-context": ("green context, no MPS", "tab:grey", "v"),
         "green-context+mps": ("green context + MPS", "tab:blue", "D")}
#: Backend -> where its share labels sit (offset in points, horizontal alignment): on
#: alternate sides of neighbouring lines, so that no two labels of a share overlap.
LABEL_AT = {"sleep": ((-7, 5), "right"), "mps-restart": ((-7, -12), "right"),
            "green-context": ((6, 5), "left"), "green-context+mps": ((7, -12), "left")}


def backend_rows(root: Path) -> list[dict[str, Any]]:
    """The rows of ``spatial/levels.csv`` and ``spatial_mps/levels.csv`` under ``root``.

    Parameters
    ----------
    root : Path
        A results folder.

    Returns
    -------
    list of dict
        One row per backend and share.
    """
    rows: list[dict[str, Any]] = []
    for sub in ("spatial", "spatial_mps"):
        p = root / sub / "levels.csv"
        if p.is_file():
            rows += read_csv(p)
    return rows


def _rate(row: dict[str, Any]) -> float:
    """A row's training rate as the tables give it: where the training slept, ``1 /
    (iteration + sleep)`` from the row's own busy time (the H100 run's harness dropped the
    iterations that ended within the sleep of a period's end;
    :func:`harness.sim.hardware_facts.level_rate`), else the counted rate."""
    from harness.sim.hardware_facts import level_rate

    sm = row.get("training_sm_share")
    sm = float(sm) if isinstance(sm, (int, float)) else float("nan")
    return level_rate(float(row["training_throughput"]), sm,
                      float(row.get("sleep_s") or 0.0))[0]


def _alone_ms(root: Path) -> float | None:
    p = root / "smoke" / "inference.jsonl"
    if not p.is_file():
        return None
    lat = [json.loads(x)["wall_ms"] for x in p.read_text().splitlines()
           if x.startswith("{") and '"wall_ms"' in x and '"summary"' not in x]
    return sum(lat) / len(lat) if lat else None


def backends_figure(rows: list[dict[str, Any]], path: Path, *, alone_ms: float | None = None,
                    gpu: str = "") -> Path:
    """Latency against training throughput per backend, shares annotated (log latency axis).

    Parameters
    ----------
    rows : list of dict
        ``levels.csv`` rows (``backend``, ``share_pct``, ``latency_ms``,
        ``training_throughput``).
    path : Path
        The PNG to write.
    alone_ms : float, optional
        The inference alone, drawn as a line.
    gpu : str
        The GPU's name, for the title.

    Returns
    -------
    Path
        The file written.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    for b, (label, colour, marker) in STYLE.items():
        rs = sorted((r for r in rows if r["backend"] == b), key=lambda r: r["share_pct"])
        if not rs:
            continue
        x = [_rate(r) for r in rs]
        y = [r["latency_ms"] for r in rs]
        ax.plot(x, y, marker=marker, color=colour, label=label, lw=1.6, ms=7)
        at, ha = LABEL_AT[b]
        for r, xr in zip(rs, x):
            ax.annotate(f"{r['share_pct']:g}%", (xr, r["latency_ms"]),
                        textcoords="offset points", xytext=at, ha=ha, fontsize=8,
                        color=colour)
    if alone_ms:
        ax.axhline(alone_ms, color="k", ls=":", lw=1)
        ax.text(0.30, alone_ms * 1.015, f"inference alone {alone_ms:.1f} ms", ha="left",
                va="bottom", transform=ax.get_yaxis_transform(), fontsize=8)
    ax.set_yscale("log")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ticks = [t for t in (15, 20, 25, 30, 40, 50, 70, 100, 150, 200, 300)
             if min(alone_ms or 1e9, *(r["latency_ms"] for r in rows)) * 0.8 <= t
             <= max(r["latency_ms"] for r in rows) * 1.25]
    ax.set_yticks(ticks)
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    lo = min([alone_ms or 1e9, *(r["latency_ms"] for r in rows)])
    ax.set_ylim(lo * 0.85, max(r["latency_ms"] for r in rows) * 1.2)
    x0, x1 = ax.get_xlim()
    ax.set_xlim(x0 - 0.03 * (x1 - x0), x1 + 0.06 * (x1 - x0))   # room for the end labels
    ax.set(xlabel="training throughput (iterations/s)",
           ylabel="inference latency, mean per batch of 105 (ms, log scale)",
           title="ResNet-50 inference beside the training, per commanded training share"
                 + (f"\n{gpu}" if gpu else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    ax.text(0.99, 0.03, "lower right is better: more training at a lower latency",
            transform=ax.transAxes, ha="right", fontsize=8, color="0.35")
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.hil.figures",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("figure", choices=("backends",))
    ap.add_argument("root", help="a results folder (docs/results)")
    ap.add_argument("--out", required=True, help="the PNG to write")
    args = ap.parse_args(argv)
    root = Path(args.root)
    rows = backend_rows(root)
    if not rows:
        print(f"figures: no spatial/levels.csv or spatial_mps/levels.csv under {root}",
              file=sys.stderr)
        return 1
    info = json.loads((root / "gpu.json").read_text()) if (root / "gpu.json").is_file() else {}
    gpu = (info.get("gpu") or {}).get("name", "")
    print(backends_figure(rows, Path(args.out), alone_ms=_alone_ms(root), gpu=gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
