"""The default controller's Control v3 target figures on the plant zoo, per plant and seed, and
what changed between two such screens.

A change to the outer or inner loop moves share paths, and a share path is chaotic (one ulp
moves it), so "did this change help" is a question about every target cell at once: which
cells fail at their worst seed, which newly fail, which figures moved. :func:`screen` runs the
default's rows of ``benchmarks/control_quality.py``'s table (the same
:func:`~harness.experiments.zoo_control.run` calls, without the baselines, the references and
the ablation: about a minute for 8 seeds on 2 cores) and keeps every seed's figures;
:func:`failing` judges them against the targets, each at its worst seed and each seed against
its own bound (3 % over, not 2 %, on a seed whose plant reports a period late);
:func:`compare` sets two screens side by side (a variant on a scratch branch against the
code it branched from). ``benchmarks/zoo_screen.py`` is the command line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucontrol._validate import int_at_least
from harness.experiments.zoo_control import run
from harness.pool import worker_pool
from harness.progress import Progress
from harness.sim import zoo

__all__ = ["DAY", "GAIN_RUNS", "RUNS", "STEP", "TARGETS", "Cell", "compare", "failing", "figures",
           "gains", "plot_gains", "realised", "screen"]

#: Load step per plant: +30 %, but +10 % (the paper's burst, batch 105 -> 115) on "ours", whose
#: inference alone takes 93 ms at +30 % (no operating point meets the 90 ms SLO).
STEP = {"ours": 1.1}
#: Decision windows after period 100 of a 500-period steady run (every 25 periods).
WINDOWS = (500 - 100) / 25
#: Periods of the trace's one swing of the load (:func:`~harness.sim.zoo.load_trace`): the
#: target table's, a day's rise and fall in 40 min of 4-s periods. A day at its own length
#: is 21,600 periods; the fast jitter stays per period whatever the day's length.
DAY = 600


def _trace(seed: int, day: int) -> np.ndarray:
    return zoo.load_trace(day, seed=seed)


def _steady(seed: int, day: int) -> np.ndarray:
    return np.ones(500)


def _step(name: str) -> Callable[[int, int], np.ndarray]:
    return lambda seed, day: np.r_[np.ones(100), np.full(200, STEP.get(name, 1.3))]


#: The runs of one plant and seed: label -> (loads per seed and day, or None for the step's;
#: :func:`~harness.experiments.zoo_control.run`'s keywords).
RUNS: dict[str, tuple[Callable[[int, int], np.ndarray] | None, dict[str, Any]]] = {
    "trace": (_trace, {}),
    "trace_noit": (_trace, {"iteration": False}),
    "free": (_trace, {"knob": "free"}),
    "part": (_trace, {"knob": "partitions"}),
    "steady": (_steady, {}),
    "steady_noit": (_steady, {"iteration": False}),
    "p99": (_trace, {"mode": "p99"}),
    "p99_steady": (_steady, {"mode": "p99"}),
    "step": (None, {}),
}


#: Periods of the windows a change's realised gain is read over: before it, left out after
#: it (the restart and the settling), and after that.
BEFORE, SETTLE, AFTER = 20, 15, 20
#: The runs whose changes' predicted and realised gains a screen keeps (:func:`gains`).
GAIN_RUNS = ("trace", "steady", "p99_steady")


def realised(ratio: np.ndarray, k: int) -> float | None:
    """The gain a share change asked for after period ``k`` realised: the training over the
    oracle's (``ratio``, per period) in the :data:`AFTER` periods that start :data:`SETTLE`
    periods after ``k``, over the same in the :data:`BEFORE` periods up to ``k``, less 1.
    None where a window falls outside the run. On a moving load the oracle's normalisation
    takes the load out to first order only."""
    if k < BEFORE or k + SETTLE + AFTER > len(ratio):
        return None
    before = float(np.mean(ratio[k - BEFORE:k]))
    return float(np.mean(ratio[k + SETTLE:k + SETTLE + AFTER])) / before - 1.0


def _gains(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each move or exploration of run ``r``: its predicted gain, its price and the gain it
    realised, and whether it was the run's first change (out of the share the run starts at,
    where the loop knows only the identification). Escapes, taken whatever they cost, are
    left out."""
    ratio = r["training"] / np.maximum(r["oracle"], 1e-12)
    out = []
    changes = [(k, d) for k, d in r["decisions"] if d.action != "stay" and
               d.best_pct != d.share_pct]
    for n, (k, d) in enumerate(changes):
        got = realised(ratio, k)
        if d.action in ("move", "explore") and got is not None:
            out.append({"action": d.action, "first": n == 0, "predicted": d.gain,
                        "price": d.cost, "realised": got})
    return out


def figures(name: str, seed: int, fuzz: bool = False, day: int = DAY) -> dict[str, Any]:
    """Every run of :data:`RUNS` on zoo plant ``name`` at ``seed``: training against the oracle,
    % of periods over 1.05 SLO, share changes (after period 100, per 10 decision windows, on
    the steady runs) and, on :data:`GAIN_RUNS`, each change's predicted and realised gain
    (:func:`realised`); with ``fuzz`` the training after 10,000 fuzzed readings over the
    unfuzzed run's (periods 100-600). ``day``: the trace's periods (:data:`DAY`).
    ``delayed``: the plant reports a period late."""
    day = int_at_least("day", day, 100)
    out: dict[str, Any] = {"delayed": isinstance(zoo.make_plant(name, seed=seed),
                                                  zoo.DelayedPlant)}
    for label, (loads, kw) in RUNS.items():
        r = run(name, seed, (loads or _step(name))(seed, day), **kw)
        steady = loads is _steady
        out[label] = {"training": r["efficiency"], "over": r["over"],
                      "changes": r["changes_late"] / WINDOWS * 10 if steady else r["changes"]}
        if label in GAIN_RUNS:
            out[label]["gains"] = _gains(r)
    if fuzz:
        clean = run(name, seed, np.ones(600))
        fz = run(name, seed, np.ones(600), fuzz=10_000)
        out["fuzz"] = {"training": float(fz["training"][100:].sum()
                                         / clean["training"][100:].sum())}
    return out


def _one(job: tuple[str, int, bool, int]) -> tuple[str, int, dict[str, Any]]:
    name, seed, fuzz, day = job
    return name, seed, figures(name, seed, fuzz, day)


def screen(seeds: int, plants: tuple[str, ...] = tuple(zoo.PLANTS), jobs: int = 1,
           fuzz: bool = False, progress: bool | None = None, day: int = DAY) -> dict[str, Any]:
    """:func:`figures` for every plant and seed (``jobs`` processes at once; the figures are
    the same at any number), as ``{"seeds": n, "fuzz": fuzz, "day": day, "plants": {name:
    {seed: figures}}}``; ``progress`` as :class:`~harness.progress.Progress` takes it (None:
    a bar on a terminal, else a line every 10 s)."""
    todo = [(p, s, fuzz, day) for p in plants for s in range(seeds)]
    per: dict[str, dict[str, Any]] = {p: {} for p in plants}
    with worker_pool(min(jobs, len(todo))) as ex, \
            Progress(len(todo), "zoo screen", enabled=progress) as bar:
        for name, seed, figs in ex.map(_one, todo):
            per[name][str(seed)] = figs
            bar.advance()
    return {"seeds": seeds, "fuzz": fuzz, "day": day, "plants": per}


@dataclass(frozen=True)
class Cell:
    """One target on one plant: its figure at the worst seed and whether every seed meets it."""

    target: str
    plant: str
    worst: float
    mean: float
    ok: bool


#: The targets: (name, run label, figure, bound per seed (delayed -> bound), "min" or "max").
TARGETS: tuple[tuple[str, str, str, Callable[[bool], float], str], ...] = (
    ("training, trace", "trace", "training", lambda d: 0.95, "min"),
    ("training without iteration times, trace", "trace_noit", "training", lambda d: 0.95, "min"),
    ("training, restart-free share, trace", "free", "training", lambda d: 0.95, "min"),
    ("training, four partitions, trace", "part", "training", lambda d: 0.95, "min"),
    ("training, steady load", "steady", "training", lambda d: 0.95, "min"),
    ("training without iteration times, steady load", "steady_noit", "training",
     lambda d: 0.95, "min"),
    ("% over, trace", "trace", "over", lambda d: 3.0 if d else 2.0, "max"),
    ("% over without iteration times, trace", "trace_noit", "over",
     lambda d: 3.0 if d else 2.0, "max"),
    ("% over, restart-free share, trace", "free", "over", lambda d: 3.0 if d else 2.0, "max"),
    ("% over, four partitions, trace", "part", "over", lambda d: 3.0 if d else 2.0, "max"),
    ("% over after a load step", "step", "over", lambda d: 3.0, "max"),
    ("p99 mode: % over, trace", "p99", "over", lambda d: 3.0, "max"),
    ("p99 mode: share changes per 10 windows, steady load", "p99_steady", "changes",
     lambda d: 1.0, "max"),
    ("training after 10,000 fuzzed readings / unfuzzed", "fuzz", "training",
     lambda d: 0.98, "min"),
)


def failing(doc: dict[str, Any]) -> list[Cell]:
    """Every target cell of a :func:`screen` (those it ran), met or not; a cell fails when
    some seed misses its bound."""
    cells = []
    for target, label, fig, bound, worst in TARGETS:
        for plant, seeds in doc["plants"].items():
            rows = [s for s in seeds.values() if label in s]
            if not rows:
                continue
            xs = np.array([s[label][fig] for s in rows])
            ok = all((x >= bound(s["delayed"]) - 1e-9) if worst == "min" else
                     (x <= bound(s["delayed"]) + 1e-9) for x, s in zip(xs, rows))
            cells.append(Cell(target, plant, float(xs.min() if worst == "min" else xs.max()),
                              float(xs.mean()), ok))
    return cells


def gains(doc: dict[str, Any]) -> list[str]:
    """How the changes' predicted gains realised, every plant and seed together: per run of
    :data:`GAIN_RUNS`, the runs' first changes, then the later explorations and moves: their
    number, the predicted and the realised gain (mean and median), the price the change was
    judged against and the share of changes whose realised gain beat it, as Markdown table
    lines."""
    lines = ["| run | change | n | predicted, mean (median) | realised, mean (median) | "
             "price, mean | realised above the price |", "|---|---|---:|---|---|---|---:|"]
    kinds = {"first": lambda x: x["first"],
             "explore": lambda x: not x["first"] and x["action"] == "explore",
             "move": lambda x: not x["first"] and x["action"] == "move"}
    for label in GAIN_RUNS:
        for kind, pick in kinds.items():
            g = [x for seeds in doc["plants"].values() for s in seeds.values()
                 for x in s.get(label, {}).get("gains", []) if pick(x)]
            if not g:
                continue
            p, r, c = (np.array([x[k] for x in g]) for k in ("predicted", "realised", "price"))
            lines.append(f"| {label} | {kind} | {len(g)} | {100 * p.mean():+.1f} % "
                         f"({100 * np.median(p):+.1f} %) | {100 * r.mean():+.1f} % "
                         f"({100 * np.median(r):+.1f} %) | {100 * c.mean():.1f} % | "
                         f"{100 * np.mean(r > c):.0f} % |")
    return lines


def plot_gains(doc: dict[str, Any], path: str) -> None:
    """Each change's realised gain over its predicted one (:func:`gains`' changes), one panel
    per run of :data:`GAIN_RUNS`, the runs' first changes, later explorations and later moves
    in their own colours, with the line where a prediction comes true."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.results import save_figure

    fig, axes = plt.subplots(1, len(GAIN_RUNS), figsize=(4.2 * len(GAIN_RUNS), 4.0),
                             sharey=True)
    colours = {"first": "tab:green", "explore": "tab:blue", "move": "tab:red"}
    for ax, label in zip(axes, GAIN_RUNS):
        g = [x for seeds in doc["plants"].values() for s in seeds.values()
             for x in s.get(label, {}).get("gains", [])]
        for kind, colour in colours.items():
            pick = [x for x in g if (x["first"] if kind == "first" else
                                     not x["first"] and x["action"] == kind)]
            ax.scatter([100 * x["predicted"] for x in pick], [100 * x["realised"] for x in pick],
                       s=9, alpha=0.6, color=colour, label=f"{kind} ({len(pick)})")
        top = max([100 * x["predicted"] for x in g] + [10.0])
        ax.plot([0, top], [0, top], color="k", lw=0.8, label="as predicted")
        ax.axhline(0.0, color="grey", lw=0.5)
        if not g:   # no change both of whose windows fit in these runs
            ax.text(0.5, 0.5, "no change to show", transform=ax.transAxes, ha="center",
                    color="0.4")
        ax.set_title(label)
        ax.set_xlabel("predicted gain (%)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("realised gain (%)")
    n, day = doc["seeds"], doc.get("day", DAY)
    names = list(doc["plants"])
    fig.suptitle(f"The default's share changes on plant{'' if len(names) == 1 else 's'} "
                 f"{', '.join(names)}, {n} "
                 f"seed{'' if n == 1 else 's'}, a {day}-period trace"
                 f"{', fuzzed readings' if doc.get('fuzz') else ''}:\n"
                 "training over the oracle's 15-35 periods after a change over the 20 before it")
    fig.tight_layout()
    save_figure(fig, path)


def _fmt(c: Cell) -> str:
    digits = 3 if c.target.startswith("training") else 2
    return f"{c.mean:.{digits}f} ({c.worst:.{digits}f})"


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Two screens side by side, as lines: the failing cells' count in each, the cells that
    fail only in ``b`` and only in ``a``, then every cell whose mean or worst seed moved
    (mean (worst seed), ``a`` -> ``b``). Only the cells both screens ran are compared."""
    ca = {(c.target, c.plant): c for c in failing(a)}
    cb = {(c.target, c.plant): c for c in failing(b)}
    both = [k for k in ca if k in cb]
    bad_a = sum(not ca[k].ok for k in both)
    bad_b = sum(not cb[k].ok for k in both)
    lines = [f"failing cells: {bad_a} -> {bad_b} (of {len(both)})"]
    days = a.get("day", DAY), b.get("day", DAY)
    if days[0] != days[1]:     # (a screen written before the day was a setting: 600)
        lines.append(f"the traces differ: a day of {days[0]} periods -> {days[1]}")
    for title, keys in (("newly failing", [k for k in both if ca[k].ok and not cb[k].ok]),
                        ("no longer failing", [k for k in both if cb[k].ok and not ca[k].ok])):
        lines.append(f"{title}: {len(keys)}")
        lines += [f"  {t} | {p}: {_fmt(ca[(t, p)])} -> {_fmt(cb[(t, p)])}" for t, p in keys]
    moved = [k for k in both if not (math.isclose(ca[k].mean, cb[k].mean, abs_tol=1e-12)
                                     and math.isclose(ca[k].worst, cb[k].worst, abs_tol=1e-12))]
    lines.append(f"moved: {len(moved)}")
    lines += [f"  {t} | {p}: {_fmt(ca[(t, p)])} -> {_fmt(cb[(t, p)])}" for t, p in moved]
    return lines
