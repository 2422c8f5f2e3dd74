"""Instructions per TwoTierController.update, counted by valgrind: the overhead without the machine.

``controller_overhead.py`` times updates, and on a shared machine its figures move by 10-20 %
between runs of the same code minutes apart; a change worth 5 % cannot be seen in them. The
number of instructions the interpreter executes per update does not depend on the machine's
other work: this script runs each configuration of ``controller_overhead.py`` under
``valgrind --tool=callgrind`` twice, for a short and a longer stream, and prints the
difference per update (the import and set-up cancel out), and the bare formula's, counted the
same way. Compare the counts of two commits, not a count with a time: the controller's repeat
to about 1 % from run to run, the bare formula's (a few thousand) to about 15 %, too little
to divide by. Needs valgrind on the PATH; about a minute per configuration.

    python benchmarks/controller_instructions.py [--configs untimed,p99] [--jobs 2]
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.args import DefaultsHelpFormatter, OneLineParser, integer, name_list, run_script

HERE = Path(__file__).resolve().parent
#: The streams' two lengths: the difference of their counts is the updates' alone.
SHORT, LONG = 500, 3000
CONFIGS = ("bare", "float", "rich", "free", "green", "duty", "p99", "untimed")
NAMES = {"bare": "bare formula (baseline)",
         "float": "default (MPS restarts), float input",
         "rich": "default, Measurement input",
         "free": "default, restart-free share, every period",
         "green": "default, four green-context partitions",
         "duty": "default, duty cycler (run quantum 0.03 s)",
         "p99": "default, p99 mode",
         "untimed": "default, untimed model, node reports times"}

#: Run under valgrind: ``python -c RUN config n`` (the streams of controller_overhead.py).
RUN = """
import random, sys
sys.path.insert(0, {here!r})
import controller_overhead as co
from gpucontrol import Measurement, ShareKnob, SleepKnob, TwoTierController
config, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(0)
floats = [90.0 + rng.gauss(0, 3) for _ in range({long})]    # the same work for any n
rich = [Measurement(x, x * 1.2, 25) for x in floats]
timed = [Measurement(x, x * 1.2, 25, iteration_s=0.5 + rng.gauss(0, 0.02)) for x in floats]
if config == "bare":
    s, m, slo = 0.0, -12.0, 90.0
    for l in floats[:n]:
        s = min(max(s + (slo - l) / m, 0.0), 1.0)
    sys.exit(0)
data, kw = {{"float": (floats, {{}}), "rich": (rich, {{}}),
             "free": (rich, {{"share": ShareKnob(change_s=0.0)}}),
             "green": (rich, {{"share": ShareKnob.green((25, 50, 75, 100))}}),
             "duty": (rich, {{"sleep": SleepKnob(run_quantum_s=0.03)}}),
             "p99": (rich, {{"mode": "p99"}}), "untimed": (timed, {{"model": co.UNTIMED}})}}[config]
update = TwoTierController(kw.pop("model", co.FAMILY), 90.0, **kw).update
for l in data[:n]:
    update(l)
"""


#: The valgrind runs under way, for :func:`main` to end when the run is interrupted.
_RUNNING: set[subprocess.Popen[str]] = set()


def instructions(config: str, n: int) -> int:
    """Instructions valgrind counts for the whole run of ``config`` over ``n`` periods."""
    with subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
             "-c", RUN.format(here=str(HERE), long=LONG), config, str(n)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as p:
        _RUNNING.add(p)
        try:
            _, err = p.communicate()
        finally:
            _RUNNING.discard(p)
    found = re.search(r"Collected : (\d+)", err)
    if p.returncode != 0 or found is None:
        raise SystemExit(f"valgrind on {config!r} failed (exit {p.returncode}):\n"
                         f"{err[-2000:]}")
    return int(found.group(1))


def per_update(config: str) -> float:
    """Instructions per update: the difference of a long and a short run, per period."""
    return (instructions(config, LONG) - instructions(config, SHORT)) / (LONG - SHORT)


def main() -> None:
    ap = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    ap.add_argument("--configs", type=name_list(CONFIGS), default=",".join(CONFIGS[1:]),
                    help=f"comma-separated, of: {', '.join(CONFIGS)}; the bare formula always "
                         "runs (default: every configuration of the controller, %(default)s)")
    ap.add_argument("--jobs", type=integer(1, 64), default=2, help="valgrind runs at once")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH: this benchmark counts instructions "
                         "with it (apt install valgrind)")
    configs = ("bare", *(c for c in args.configs if c != "bare"))
    print(f"python {sys.version.split()[0]}, instructions per update under valgrind "
          f"(runs of {LONG} less {SHORT} periods)", flush=True)
    pool = ThreadPoolExecutor(args.jobs)
    try:
        counts = dict(zip(configs, pool.map(per_update, configs)))
    except BaseException:   # Ctrl-C, SIGTERM: not a minute more for the runs under way
        pool.shutdown(wait=False, cancel_futures=True)
        for p in list(_RUNNING):
            p.kill()
        raise
    pool.shutdown()
    print(f"{'configuration':50s} {'instructions':>13s}")
    for c in configs:
        print(f"{NAMES[c]:50s} {counts[c]:13.0f}")


if __name__ == "__main__":
    run_script(main, "controller_instructions.py")
