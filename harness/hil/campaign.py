"""One command for a session's hardware runs: ``python -m harness.hil.campaign STEP ...``.

A GPU is often lent for a short, metered time (minutes per call, tens of minutes per session),
and the files of a call come back only from one output folder. The campaign runs the named
steps (smoke checks, the ``gpu`` tests, the experiments of docs/gpu.md) one after another in
child processes and, whatever happens, leaves behind a folder laid out like ``docs/results/``:

* ``<out>/gpu.json`` — ``python -m harness.hil`` (GPU name, SMs, driver, versions, MPS binary),
  copied into every step's folder;
* ``<out>/<folder>/`` per step — what the step wrote, ``log.txt`` (its output) and
  ``COMMAND.txt`` (the exact commands, the git commit, the date, exit codes, wall time);
* ``<out>/campaign.json`` — every step's outcome;
* with ``--archive FILE``: all of it as one ``.tar.gz``, rewritten after every step, so a call
  cut off at its time limit still returns everything finished so far.

Each step runs under a time limit (its own, and what is left of ``--deadline`` after keeping
room to stop a step and archive); a step that would not fit in the time left is skipped, not
started, so the campaign ends by the deadline. A step past its limit gets SIGTERM
(the GPU plant then stops its processes and quits its private MPS daemon), then SIGKILL after
a grace period, followed by a ``quit`` to any private MPS daemon left behind. SIGTERM or
Ctrl-C to the campaign does the same for the running step, then writes the archive.

Unpack on the workstation with ``tar xzf campaign.tar.gz -C docs/results``.

>>> [s for s in STEPS]  # doctest: +NORMALIZE_WHITESPACE
['info', 'smoke', 'tests', 'tests-fast', 'tests-slow', 'knobs', 'mps', 'identify', 'burst',
 'sweep', 'spatial', 'identify-green', 'burst-daemon', 'sweep-h100']
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.results import atomic_write_bytes, atomic_write_text

__all__ = ["STEPS", "Command", "Step", "StepOutcome", "main", "run_campaign"]

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Command:
    """One child process: ``python <argv>`` (the strings ``{out}`` and ``{dir}`` are replaced
    by the campaign folder and the step's folder); ``stdout`` names a file in the step's folder that
    receives its standard output (otherwise it goes to ``log.txt`` with the errors)."""

    argv: tuple[str, ...]
    stdout: str | None = None


@dataclass(frozen=True)
class Step:
    """A named group of commands with its result folder and time limits (seconds)."""

    name: str
    folder: str
    commands: tuple[Command, ...]
    expected_s: float
    timeout_s: float
    about: str = ""

    def __post_init__(self) -> None:
        if not self.commands:
            raise ValueError(f"step {self.name!r}: commands must not be empty")
        if not (0 < self.expected_s <= self.timeout_s):
            raise ValueError(f"step {self.name!r}: need 0 < expected_s <= timeout_s, got "
                             f"{self.expected_s!r}, {self.timeout_s!r}")


def _cli(*args: str) -> tuple[str, ...]:
    return ("-m", "harness.cli", *args, "--out", "{out}", "--no-progress")


def _h100_preset() -> str:
    """The simulated ``h100`` preset (the controllers' nominal model, calibrated on the H100
    runs) where it exists; the paper's ``fig8`` otherwise. The GPU side of the H100 steps is
    the same either way: ``--plant gpu-green`` runs batch 105 as named, unsized."""
    from harness.sim.simulated import PRESETS

    return "h100" if "h100" in PRESETS else "fig8"


#: The preset of the H100 steps (see :func:`_h100_preset`).
H100_PRESET = _h100_preset()


def _h100_slo_ms() -> float:
    """The calibrated preset's suggested SLO (:func:`harness.sim.presets.suggested_slo_ms`:
    30 ms for ``h100``, between the 75 % and 50 % partitions under MPS and inside the
    sleep-only range); 30 ms from the H100 table when the preset names none."""
    try:
        from harness.sim.presets import suggested_slo_ms

        v = suggested_slo_ms(H100_PRESET) if H100_PRESET == "h100" else None
    except ImportError:
        v = None
    return float(v) if v else 30.0


#: The SLO of the H100 steps (ms per batch of 105): the one place the steps take it from.
H100_SLO_MS = _h100_slo_ms()
#: The sweep's second SLO, from the H100 table: between green context + MPS at 75 % (33.9 ms,
#: 3.0 it/s) and the time-sliced training unslept (40.5 ms), where sleeping alone gives 1.83
#: it/s at 34.6 ms -- the comparison the restart-free backend is built on.
H100_SLO_HIGH_MS = 35.0


#: The hardware work of docs/gpu.md, sized so that a few fit in one 10-minute call.
STEPS: dict[str, Step] = {s.name: s for s in (
    Step("info", ".", (Command(("-m", "harness.hil"), stdout="gpu.json"),), 20, 120,
         "GPU name, SM count, driver, versions, MPS binary"),
    Step("smoke", "smoke", (
        Command(("-m", "harness.hil.smid", "--samples", "5"), stdout="smid.jsonl"),
        Command(("-m", "harness.hil.training_emulator", "--iterations", "20", "--json"),
                stdout="training_emulator.jsonl"),
        Command(("-m", "harness.hil.inference", "--batches", "20", "--json"),
                stdout="inference.jsonl")), 60, 240,
         "%smid sampler, emulator iteration time, inference latency"),
    Step("tests", "gpu_tests", (
        Command(("-m", "pytest", "-m", "gpu", "tests/harness/hil", "-q", "-rs",
                 "-p", "no:cacheprovider", "--junitxml", "{dir}/junit.xml"),
                stdout="pytest.txt"),), 360, 540, "the @pytest.mark.gpu tests"),
    Step("tests-fast", "gpu_tests_fast", (
        Command(("-m", "pytest", "-m", "gpu and not slow", "tests/harness/hil", "-q", "-rs",
                 "-p", "no:cacheprovider", "--junitxml", "{dir}/junit.xml"),
                stdout="pytest.txt"),), 180, 480, "the @pytest.mark.gpu tests but the slow"),
    Step("tests-slow", "gpu_tests_slow", (
        Command(("-m", "pytest", "-m", "gpu and slow", "tests/harness/hil", "-q", "-rs",
                 "-p", "no:cacheprovider", "--junitxml", "{dir}/junit.xml"),
                stdout="pytest.txt"),), 210, 480,
         "the slow @pytest.mark.gpu tests (closed loop, MPS shadow restart)"),
    Step("knobs", "knobs", (Command(_cli("knobs", "--plant", "gpu")),), 300, 540,
         "GPUColo paper, Fig. 4: MPS vs Sleep vs Sleep+MPS"),
    Step("mps", "mps_restart", (
        Command(("-m", "harness.hil.mps_study", "--out", "{dir}", "--levels", "100,60,20")),),
         240, 540, "MPS restart downtime (cold vs shadow), SM share per MPS level"),
    Step("identify", "identify", (
        Command(_cli("identify", "--plant", "gpu", "--preset", "fig8", "--periods", "30",
                     "--mps", "40,100")),), 330, 540, "Fig 6/7, shortened: 2 MPS levels"),
    Step("burst", "burst", (
        Command(_cli("burst", "--plant", "gpu", "--controllers", "gslice,ours",
                     "--duration", "200", "--burst", "60,140", "--relative-slo")),), 500, 570,
         "Fig 8, shortened: GSLICE-extended vs ours, 200 s each"),
    Step("sweep", "slo_sweep", (
        Command(_cli("sweep", "--plant", "gpu", "--slos", "75,95", "--controllers", "ours",
                     "--duration", "160", "--warmup", "60", "--relative-slo")),), 420, 570,
         "Fig 9, shortened: two SLOs, ours"),
    Step("spatial", "spatial", (
        Command(("-m", "harness.hil.spatial_study", "--out", "{dir}")),), 420, 570,
         "green-context vs MPS-restart vs sleep: resize latency, latency after a resize, "
         "%smid share per commanded share"),
    # ---- the H100 steps (docs/gpu.md, "The next calls"): batch 105, the H100 SLO --------------
    Step("identify-green", "identify_green", (
        Command(_cli("identify", "--plant", "gpu-green", "--preset", H100_PRESET, "--period", "2",
                     "--periods", "24", "--mps", "25,50,75,100", "--sleep", "0,0.4")),),
         250, 480, "identification on green context + MPS at 25/50/75/100 %, white-noise "
                   "sleep: latency and training rate per share"),
    Step("burst-daemon", "daemon_burst", (
        Command(("-m", "harness.hil.daemon_run", "--out", "{dir}", "--slo-ms",
                 f"{H100_SLO_MS:g}", "--preset", H100_PRESET, "--duration", "100")),), 460, 540,
         "the node agent as its own process through a burst: sleep only, MPS restarts "
         "(--outer-every 12), green context + MPS (--outer-every 1)"),
    Step("sweep-h100", "slo_sweep_h100", (
        Command(_cli("sweep", "--plant", "gpu-green", "--preset", H100_PRESET, "--slos",
                     f"{H100_SLO_MS:g},{H100_SLO_HIGH_MS:g}", "--controllers", "ours",
                     "--duration", "100", "--warmup", "40")),), 260, 480,
         "SLO sweep at two SLOs on green context + MPS, ours"),
)}


@dataclass
class StepOutcome:
    name: str
    folder: str
    status: str  # "ok", "failed", "timed out", "skipped", "interrupted"
    wall_s: float = 0.0
    returncodes: list[int | None] = field(default_factory=list)
    note: str = ""


class _Interrupted(Exception):
    pass


def git_commit(root: Path = REPO_ROOT) -> str:
    """``git rev-parse HEAD`` of the source tree, or "unknown" (a copy without .git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def quit_leftover_mps(tmp_root: str | None = None, binary: str = "nvidia-cuda-mps-control"
                      ) -> list[str]:
    """Send ``quit`` to private MPS daemons the harness started under the temp folder
    (``gpucontrol-mps-*/pipe``) whose control pipe is still there; returns their pipes.
    Only daemons of this harness are touched, never the system's."""
    root = Path(tmp_root or tempfile.gettempdir())
    exe = shutil.which(binary)
    done = []
    for pipe in sorted(root.glob("gpucontrol-mps-*/pipe")):
        if exe is None or not (pipe / "control").exists():
            continue
        env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe)}
        try:
            subprocess.run([exe], input="quit\n", text=True, env=env, timeout=20,
                           capture_output=True, check=False)
            done.append(str(pipe))
        except (OSError, subprocess.SubprocessError):
            pass
    return done


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _archive(out: Path, archive: Path) -> None:
    """``out`` as a .tar.gz whose members are relative to ``out``, written atomically."""
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(out.rglob("*")):
            if p.is_file() and not p.name.startswith(".") and p.resolve() != archive.resolve():
                tar.add(p, arcname=str(p.relative_to(out)))
    atomic_write_bytes(archive, buf.getvalue())


def _command_text(step: Step, lines: list[str], outcome: StepOutcome, commit: str,
                  started: str) -> str:
    rc = ", ".join("-" if r is None else str(r) for r in outcome.returncodes)
    return "\n".join([
        f"# {step.name}: {step.about}".rstrip(": "),
        f"# started {started} (UTC), {outcome.wall_s:.1f} s, status {outcome.status}"
        + (f" ({outcome.note})" if outcome.note else ""),
        f"# git commit {commit}; host {platform.node()}; python {platform.python_version()}",
        f"# exit codes: {rc}",
        "# run from the repository root with PYTHONPATH including it:",
        *lines, ""])


def run_campaign(names: Sequence[str], out: str | os.PathLike[str], *,
                 archive: str | os.PathLike[str] | None = None, deadline_s: float = 570.0,
                 steps: Mapping[str, Step] | None = None,
                 extra: Mapping[str, Sequence[str]] | None = None, grace_s: float = 30.0,
                 commit: str | None = None, python: str = sys.executable,
                 cwd: str | os.PathLike[str] = REPO_ROOT,
                 log: Callable[[str], None] | None = None) -> list[StepOutcome]:
    """Run the named steps in order; see the module docstring. ``extra`` appends arguments
    to a step's last command (``{"burst": ["--slo", "30"]}``). Returns one outcome per step."""
    table = dict(STEPS if steps is None else steps)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown step(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(table)}")
    if not names:
        raise ValueError("names must name at least one step")
    if not deadline_s > 0:
        raise ValueError(f"deadline_s must be > 0, got {deadline_s!r}")
    for n in extra or {}:
        if n not in names:
            raise ValueError(f"extra arguments for step {n!r}, which is not run")
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    out_dir = Path(out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    arch = Path(archive).resolve() if archive is not None else None
    commit = commit or git_commit(Path(cwd))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(cwd).resolve()), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    t_end = time.monotonic() + deadline_s
    outcomes: list[StepOutcome] = []
    stopping: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        if not stopping:  # the first SIGTERM/SIGINT stops the step; later ones are ignored
            stopping.append(signal.Signals(signum).name)
            raise _Interrupted(stopping[0])

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for name in names:
            step = table[name]
            sdir = (out_dir / step.folder).resolve()
            sdir.mkdir(parents=True, exist_ok=True)
            # keep room to stop a step that runs to its limit (SIGTERM grace, SIGKILL, archive)
            left = t_end - time.monotonic() - (grace_s + 15.0)
            if left < step.expected_s:
                outcomes.append(StepOutcome(name, step.folder, "skipped", note=(
                    f"needs about {step.expected_s:.0f} s, {max(left, 0):.0f} s left")))
                say(f"[campaign] {name}: skipped ({outcomes[-1].note})")
                continue
            outcome = StepOutcome(name, step.folder, "ok")
            outcomes.append(outcome)
            started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            lines: list[str] = []
            limit = min(step.timeout_s, left)
            say(f"[campaign] {name}: {step.about} (limit {limit:.0f} s)")
            try:
                _run_step(step, sdir, out_dir, outcome, lines, limit_s=limit,
                          extra=list((extra or {}).get(name, ())), python=python, cwd=cwd,
                          env=env, grace_s=grace_s)
            except (OSError, subprocess.SubprocessError) as exc:  # e.g. python not found
                outcome.status, outcome.note = "failed", f"{type(exc).__name__}: {exc}"
            finally:
                if outcome.status != "ok":
                    quit_leftover_mps()
                atomic_write_text(sdir / "COMMAND.txt",
                                  _command_text(step, lines, outcome, commit, started))
                say(f"[campaign] {name}: {outcome.status} in {outcome.wall_s:.0f} s"
                    + (f" ({outcome.note})" if outcome.note else ""))
                _finish_step(out_dir, outcomes, commit, arch)
    except _Interrupted:
        pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _finish_step(out_dir, outcomes, commit, arch)
    return outcomes


def _run_step(step: Step, sdir: Path, out_dir: Path, outcome: StepOutcome, lines: list[str],
              *, limit_s: float, extra: list[str], python: str,
              cwd: str | os.PathLike[str], env: dict[str, str], grace_s: float) -> None:
    """Run a step's commands in turn; fills ``outcome`` and ``lines`` (the commands run)."""
    t0 = time.monotonic()
    try:
        with open(sdir / "log.txt", "ab") as logf:
            for i, cmd in enumerate(step.commands):
                argv = [a.replace("{out}", str(out_dir)).replace("{dir}", str(sdir))
                        for a in cmd.argv]
                if i == len(step.commands) - 1:
                    argv += extra
                line = shlex.join(["python", *argv])
                lines.append(line + (f" > {cmd.stdout}" if cmd.stdout else ""))
                logf.write(f"$ {line}\n".encode())
                logf.flush()
                remaining = limit_s - (time.monotonic() - t0)
                if remaining <= 0:
                    outcome.status, outcome.note = "timed out", f"limit {limit_s:.0f} s"
                    return
                with contextlib.ExitStack() as stack:
                    stdout = (stack.enter_context(open(sdir / cmd.stdout, "wb"))
                              if cmd.stdout else logf)
                    proc = subprocess.Popen([python, *argv], cwd=cwd, env=env, stdout=stdout,
                                            stderr=logf, start_new_session=True)
                    try:
                        rc = proc.wait(timeout=remaining)
                    except subprocess.TimeoutExpired:
                        _stop_group(proc, grace_s)
                        outcome.returncodes.append(proc.returncode)
                        outcome.status, outcome.note = "timed out", f"limit {limit_s:.0f} s"
                        return
                    except _Interrupted as exc:
                        _stop_group(proc, grace_s)
                        outcome.returncodes.append(proc.returncode)
                        outcome.status, outcome.note = "interrupted", str(exc)
                        raise
                outcome.returncodes.append(rc)
                if rc != 0:
                    outcome.status = "failed"
    finally:
        outcome.wall_s = time.monotonic() - t0


def _finish_step(out_dir: Path, outcomes: list[StepOutcome], commit: str,
                 arch: Path | None) -> None:
    """Copy gpu.json into every step folder, write campaign.json, refresh the archive."""
    info = out_dir / "gpu.json"
    if info.is_file() and info.stat().st_size:
        for o in outcomes:
            d = out_dir / o.folder
            if d.resolve() != out_dir and d.is_dir():
                shutil.copyfile(info, d / "gpu.json")
    atomic_write_text(out_dir / "campaign.json", json.dumps(
        {"commit": commit, "steps": [vars(o) for o in outcomes]}, indent=2) + "\n")
    if arch is not None:
        _archive(out_dir, arch)


def _parse_extra(items: Sequence[str]) -> dict[str, list[str]]:
    extra: dict[str, list[str]] = {}
    for item in items:
        name, sep, args = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--extra must look like STEP='--flag value', got {item!r}")
        extra.setdefault(name.strip(), []).extend(shlex.split(args))
    return extra


def _new_archive(text: str) -> str:
    """argparse type of ``--archive``: a ``.tar.gz`` that can be written and does not exist
    yet (the campaign rewrites it after every step: an archive of an earlier call would be
    replaced by this call's)."""
    from harness.args import check_out_file

    try:
        p = check_out_file(text, None)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not p.name.endswith((".tar.gz", ".tgz")):
        raise argparse.ArgumentTypeError(f"{text!r}: give a .tar.gz file")
    if p.exists():
        raise argparse.ArgumentTypeError(
            f"{text!r} exists, and the campaign rewrites its archive after every step; give "
            f"a new file (or remove that one)")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    from harness.args import OneLineParser, number, out_dir

    steps_help = "; ".join(f"{s.name}: {s.about} (~{s.expected_s:.0f} s)" for s in STEPS.values())
    ap = OneLineParser(
        prog="python -m harness.hil.campaign", description=__doc__.split("\n\n")[0],
        epilog=f"Steps: {steps_help}.")
    ap.add_argument("steps", nargs="+", metavar="STEP", help=f"any of {', '.join(STEPS)}")
    ap.add_argument("--out", type=out_dir, default="results/campaign", help="result folder")
    ap.add_argument("--archive", type=_new_archive, default=None,
                    help="also write everything to this .tar.gz (a new file)")
    ap.add_argument("--deadline", type=number(0, 86400, lo_open=True, unit="s"), default=570.0,
                    help="seconds for the whole campaign, in (0, 86400] (default 570)")
    ap.add_argument("--extra", action="append", default=[], metavar="STEP='ARGS'",
                    help="extra arguments for a step's command, e.g. burst='--slo 30'")
    ap.add_argument("--commit", default=None, help="git commit to record (default: git)")
    args = ap.parse_args(argv)
    try:
        outcomes = run_campaign(args.steps, args.out, archive=args.archive,
                                deadline_s=args.deadline, extra=_parse_extra(args.extra),
                                commit=args.commit)
    except ValueError as exc:
        ap.error(str(exc))
    for o in outcomes:
        print(f"{o.name:9s} {o.status:11s} {o.wall_s:7.1f} s  {o.note}")
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
