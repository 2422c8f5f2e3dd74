"""Screen a change to the default controller: every Control v3 target figure on the plant
zoo, per plant and seed, kept as JSON, and the difference between two screens.

The default's rows of ``control_quality.py``'s table (the same runs, without the baselines,
the references and the ablation: about a minute for 8 seeds on 2 cores), each target judged
at its worst seed (:mod:`harness.experiments.zoo_screen`). Screen the code before a change and
after it (two worktrees, or a scratch branch), then compare the two files: the failing cells
in each, those that newly fail or no longer fail, and every figure that moved. A screen also
prints how the share changes' predicted gains realised (each move and exploration on the
trace and at steady load: the gain the outer loop predicted, the price it judged it against,
and the training it got). ``--day`` stretches the trace's one swing of the load over more
periods (the table's 600 are a day in 40 min; 21600 is a day of 4-s periods): the trace's
cells at another time scale, the rest the same.

    python benchmarks/zoo_screen.py [--seeds 8] [--plants a,b] [--jobs 2] [--fuzz] [--day 600]
                                    [--json FILE] [--plot PNG]
    python benchmarks/zoo_screen.py --compare BEFORE.json AFTER.json

Run from a worktree other than the one the package is installed from, put that worktree
first on ``PYTHONPATH``: the screen measures the code it imports (the JSON names its commit,
and whether the tree had uncommitted changes).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# run as a script, this folder is first on sys.path and its sysid.py would shadow the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import numpy as np  # noqa: E402

from harness.args import (  # noqa: E402
    DefaultsHelpFormatter,
    OneLineParser,
    integer,
    name_list,
    note_replaced,
    out_file,
    run_script,
)
from harness.experiments.zoo_screen import (  # noqa: E402
    DAY,
    compare,
    failing,
    gains,
    plot_gains,
    screen,
)
from harness.hil.campaign import REPO_ROOT, git_commit  # noqa: E402
from harness.results import write_json  # noqa: E402
from harness.sim import zoo  # noqa: E402


def _screen_file(path: str) -> dict[str, Any]:
    """A screen written by ``--json`` (argparse type: a bad file is refused by name)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise argparse.ArgumentTypeError(f"cannot read a screen from {path!r}: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("plants"), dict):
        raise argparse.ArgumentTypeError(f"{path!r} is not a screen (no \"plants\" in it)")
    try:   # read it as compare will: a plant's seeds, each seed's runs and figures
        failing(doc)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(
            f"{path!r} is not a screen (its \"plants\" are not per seed figures: "
            f"{type(e).__name__} {e})") from None
    return doc


def _edited() -> bool:
    """Whether the imported packages differ from their commit (a variant not yet committed)."""
    try:
        r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                            "gpucontrol", "harness", "sysid"],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and bool(r.stdout.strip())


def main() -> None:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--seeds", type=integer(1, 1000), default=8,
                    help="plant seeds per figure (default %(default)s, as the target table)")
    ap.add_argument("--plants", type=name_list(zoo.PLANTS), default=",".join(zoo.PLANTS),
                    help="comma-separated zoo plants (default: all of them, %(default)s)")
    ap.add_argument("--jobs", type=integer(1, 64), default=2,
                    help="runs at once, one process each (default %(default)s; the figures "
                         "are the same at any value)")
    ap.add_argument("--fuzz", action="store_true",
                    help="also the training after 10,000 fuzzed readings (two runs more "
                         "per seed)")
    ap.add_argument("--day", type=integer(100, 100_000), default=DAY, metavar="PERIODS",
                    help="periods of the trace's one swing of the load (default %(default)s, the "
                         "target table's: a day in 40 min; 21600: a day of 4-s periods)")
    ap.add_argument("--json", type=out_file, default=None, metavar="FILE",
                    help="write every seed's figures here (refused before the runs if it "
                         "cannot be written)")
    ap.add_argument("--plot", type=out_file, default=None, metavar="PNG",
                    help="also draw each share change's realised gain over its predicted one")
    ap.add_argument("--compare", type=_screen_file, nargs=2, metavar=("BEFORE", "AFTER"),
                    help="compare two screens instead of running one")
    args = ap.parse_args()
    if args.compare:
        unused = [flag for flag, v in (("--json", args.json), ("--plot", args.plot)) if v]
        if unused:    # they were ignored: no file where the user looks for one
            ap.error(f"--compare runs no screen and writes nothing; {' and '.join(unused)} "
                     "go with a screen run")
        print("\n".join(compare(*args.compare)))
        return
    note_replaced("zoo_screen.py", {"--json": args.json, "--plot": args.plot})
    t0 = time.perf_counter()
    # the code the runs import, read before they start: a long screen outlives commits
    commit, edited = git_commit(), _edited()
    doc = screen(args.seeds, tuple(dict.fromkeys(args.plants)), args.jobs, args.fuzz,
                 day=args.day)
    doc.update(commit=commit, edited=edited, python=platform.python_version(),
               numpy=np.__version__, elapsed_s=round(time.perf_counter() - t0, 1))
    cells = failing(doc)
    bad = [c for c in cells if not c.ok]
    n = len(doc["plants"])
    at = doc["commit"][:9] + (" with uncommitted changes" if doc["edited"] else "")
    k = doc["seeds"]
    print(f"zoo screen at {at}: {k} seed{'s' if k > 1 else ''}, {n} plant"
          f"{'s' if n > 1 else ''}, a {args.day}-period trace, {doc['elapsed_s']:.0f} s; "
          f"{len(bad)} of {len(cells)} target cells fail at their worst seed")
    for c in bad:
        print(f"  {c.target} | {c.plant}: mean {c.mean:.3f}, worst seed {c.worst:.3f}")
    print("\nHow the share changes' predicted gains realised (training over the oracle's, "
          "periods 15-35 after a change over the 20 before it):")
    print("\n".join(gains(doc)))
    if args.json:
        write_json(doc, args.json)
        print(f"Figures: {args.json}")
    if args.plot:
        plot_gains(doc, args.plot)
        print(f"Plot: {args.plot}")


if __name__ == "__main__":
    run_script(main, "zoo_screen.py")
