"""The shell commands of the README (and the quick ones of the guides) run as written.

Each command line of the chosen ``sh``/``bash`` blocks runs in a fresh folder, with
``gpucontrol`` standing for ``python -m harness.cli`` of this checkout (the console script of
an installed copy may be another version). None needs a GPU; each is bounded in time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(sh|bash)\n(.*?)^```", re.S | re.M)


def blocks(doc: str, marker: str) -> list[str]:
    """The command lines of the sh/bash blocks of ``doc`` that contain ``marker``."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    found = [body for _, body in FENCE.findall(text) if marker in body]
    assert found, f"{doc}: no sh/bash block with {marker!r}"
    lines = []
    for body in found:
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()  # trailing comments
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def run_lines(lines: list[str], cwd: Path, *, subst: dict[str, str] | None = None,
              timeout: float = 120.0) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg",
           "GPUCONTROL_RUNTIME_DIR": str(cwd / "runtime")}
    prelude = f'gpucontrol() {{ "{sys.executable}" -m harness.cli "$@"; }}\n' \
              f'python() {{ "{sys.executable}" "$@"; }}\n'
    outs = []
    for line in lines:
        for k, v in (subst or {}).items():
            line = line.replace(k, v)
        p = subprocess.run(["bash", "-c", prelude + line], cwd=cwd, env=env, text=True,
                           capture_output=True, timeout=timeout)
        assert p.returncode == 0, f"{line!r} exited {p.returncode}:\n{p.stderr[-2000:]}"
        assert "Traceback" not in p.stderr, p.stderr
        outs.append(p.stdout)
    return outs


@pytest.mark.slow
def test_readme_first_commands_run_as_written(tmp_path):
    lines = blocks("README.md", "gpucontrol demo")
    assert any(x.startswith("gpucontrol calibrate") for x in lines)
    outs = run_lines(lines, tmp_path)
    assert outs[0].startswith("gpucontrol ")
    for f in ("results/burst/burst.png", "results/knobs/knobs.png",
              "results/identify/identify_summary.csv", "results/calibration/calibration.json",
              "results/cluster/fig12_gpus.png"):
        assert (tmp_path / f).stat().st_size > 0, f
    # the calibration example is one a reader can trust: the fig8 preset fitted to records
    # it made itself moves little and fits them at least as well, source by source, with no
    # warning (records of two simulated presets would pull the fit between two plants)
    from harness.experiments.calibrate import per_source

    doc = json.loads((tmp_path / "results/calibration/calibration.json").read_text())
    (row,) = per_source(doc)
    assert row["preset"] == doc["base_preset"] == "fig8"
    assert row["latency_rms"] <= row["latency_rms_base"] < 2.0
    assert all(abs(f["change_pct"]) < 5 for f in doc["fitted"].values())
    cal = next(o for line, o in zip(lines, outs) if line.startswith("gpucontrol calibrate"))
    assert "## Fit per source" in cal and "Warning" not in cal


@pytest.mark.slow
def test_daemon_guide_commands_run_as_written(tmp_path):
    lines = blocks("docs/daemon.md",
                   "--model results/identify/model.json --training-pid 4242 --duration-s")
    training = subprocess.Popen(["sleep", "60"])  # stands for the training process 4242
    try:
        outs = run_lines(lines, tmp_path, subst={"4242": str(training.pid),
                                                 "--duration-s 8": "--duration-s 2"})
    finally:
        training.kill()
        training.wait()
    assert '"event": "stopped"' in outs[-1]
    doc = json.loads((tmp_path / "results/identify/model.json").read_text())
    assert doc["points"] and doc["sleep_span_s"] == [0.1, 0.7]   # identify's span, recorded


@pytest.mark.slow
def test_calibrate_guide_commands_run_as_written(tmp_path):
    lines = blocks("docs/simulated_plant.md", "gpucontrol calibrate --from results/knobs")
    run_lines(lines, tmp_path)
    assert (tmp_path / "results/calibration/calibration.json").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_help_lists_the_targets():
    p = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0
    targets = {line.split("\t")[0] for line in p.stdout.splitlines()}
    assert {"help", "demo", "test", "lint", "clean"} <= targets


def _doc_commands() -> list[tuple[str, str]]:
    """Every concrete ``gpucontrol ...`` command in the Markdown docs (code blocks and inline
    code), placeholders (DIR, FILE, PID, ``|``, ``...``, ``<...>``) left out."""
    import shlex

    out = []
    docs = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
    for doc in docs:
        text = doc.read_text(encoding="utf-8").replace("\\\n", " ")
        cands = re.findall(r"`(gpucontrol [^`]+)`", text)
        cands += [ln.strip() for ln in text.splitlines() if ln.strip().startswith("gpucontrol ")]
        for c in cands:
            c = c.split(" #")[0].strip()
            if re.search(r"\b(DIR|FILE|PID|ARGS|CMD)\b|\||\.\.\.|<|…", c):
                continue
            try:
                shlex.split(c)
            except ValueError:
                continue
            out.append((doc.name, c))
    return sorted(set(out))


@pytest.mark.parametrize("doc,command", _doc_commands())
def test_every_documented_command_parses(doc, command):
    """Flags and values of every documented command are accepted by the parser as written."""
    import shlex

    from harness.cli import build_parser

    argv = shlex.split(command)[1:]
    parser = build_parser()
    if len(argv) == 1 and not argv[0].startswith("-"):  # a command named in prose
        assert argv[0] in parser._subparsers._group_actions[0].choices, command
        return
    for i, a in enumerate(argv[:-1]):  # a calibration the guide's earlier steps write
        if a == "--preset" and argv[i + 1].endswith(".json") and \
                not (ROOT / argv[i + 1]).exists():
            argv[i + 1] = "fig8"
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            pytest.fail(f"{doc}: {command!r} is refused by the parser (exit {exc.code})")
