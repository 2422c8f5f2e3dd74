"""Draft the README of each hardware result folder: ``python -m harness.hil.readme DIR``.

After a campaign (:mod:`harness.hil.campaign`) has been unpacked into ``docs/results/``, every
experiment folder needs a short README (docs/gpu.md, "What to commit"): what ran, on which
GPU and driver, anything unusual, and the comparison with the paper and with the simulated
plant in shapes and ratios. This module writes a draft of it from the files alone:

* the GPU (``gpu.json``), the exact commands and their status (``COMMAND.txt``);
* ``knobs/``: measured vs paper (RTX 3090) vs simulated plant (the ``sim_latency_ms`` and
  ``sim_sm_pct`` columns the knobs experiment writes into ``knobs_summary.csv``), and the
  after/before latency and SM ratios of each run;
* ``mps_restart/``: the SM share and latency per MPS level, the median iteration gap of cold
  and shadow restarts against the goal (< 0.5 s with shadow) and the paper's 5-15 s;
* ``identify/``: the fitted gain per MPS level next to the simulated preset's slope, and the
  ratio of the gains between levels (the shape);
* ``burst/``, ``slo_sweep/``: the summary with the SLO it ran at;
* ``spatial/``: the green-context partitions (SMs given and reached), resize latency and
  latency per backend and share, green context vs sleep (:mod:`harness.hil.spatial_study`);
* ``gpu_tests/``: the junit counts; ``smoke/``: the last JSON line of each check;
* flags for what needs a human sentence: a step that did not finish, MPS unavailable.

A README.md a person wrote is never replaced: the draft then goes to ``README.draft.md``.
The identify comparison evaluates the simulated preset (no GPU); the knobs comparison reads
the simulated reference the experiment wrote, so this module never runs an experiment.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.results import atomic_write_text, markdown_table, read_csv, read_json

__all__ = ["draft_readme", "draft_readmes", "main"]

PAPER_GPU = "RTX 3090, CUDA 11.6, PyTorch 1.12.1"
#: The GPUColo paper (Chen et al., ICDCS 2024), Sec. IV-B: the MPS restart downtime it
#: measured, s.
PAPER_RESTART_S = (5.0, 15.0)
SHADOW_GOAL_S = 0.5


def _read_json(path: Path) -> dict[str, Any]:
    return read_json(path) or {}


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _gpu_line(info: Mapping[str, Any]) -> str:
    gpu = info.get("gpu") or {}
    if not gpu:
        why = info.get("gpu_error") or "no gpu.json"
        return f"GPU: unknown ({why})."
    parts = [f"**{gpu.get('name', '?')}**", f"{gpu.get('multiprocessor_count', '?')} SMs",
             f"driver {gpu.get('driver') or '?'}",
             f"CUDA driver API {gpu.get('cuda_driver_api', '?')}",
             f"runtime {gpu.get('cuda_runtime', '?')}", f"CuPy {gpu.get('cupy', '?')}",
             f"torch {info.get('torch') or '?'}", f"Python {info.get('python') or '?'}"]
    mps = info.get("mps_control")
    parts.append(f"MPS control binary: {mps if mps else 'not found (sleep-only fallback)'}")
    return "GPU: " + ", ".join(parts) + "."


def _command_block(folder: Path) -> list[str]:
    p = folder / "COMMAND.txt"
    if not p.is_file():
        return ["No COMMAND.txt: add the exact command line, the git commit and the date."]
    text = p.read_text(encoding="utf-8").splitlines()
    heads = [x[2:] for x in text if x.startswith("# ")]
    cmds = [x for x in text if x.strip() and not x.startswith("#")]
    return [*(f"- {h}" for h in heads[1:]), "", "```bash", *cmds, "```"]


def _status(folder: Path) -> str | None:
    p = folder / "COMMAND.txt"
    if not p.is_file():
        return None
    for line in p.read_text(encoding="utf-8").splitlines():
        if " status " in line:
            return line.split(" status ", 1)[1].strip()
    return None


# ---- per experiment -----------------------------------------------------------------------------
def _knobs(folder: Path, sim: bool) -> list[str]:
    rows = read_csv(folder / "knobs_summary.csv")
    table = []
    for r in rows:
        # the knobs experiment writes the simulated plant's reference next to the measurement
        sim_ms = r.get("sim_latency_ms", math.nan) if sim else math.nan
        sim_sm = r.get("sim_sm_pct", math.nan) if sim else math.nan
        table.append({"run": r["run"], "phase": r["phase"], "latency ms": r["latency_ms"],
                      "paper ms": r["paper_latency_ms"], "sim ms": sim_ms,
                      "training SM %": r["sm_pct"], "paper SM %": r["paper_sm_pct"],
                      "sim SM %": sim_sm})
    ratios = []
    for run in dict.fromkeys(r["run"] for r in rows):
        b = {x["phase"]: x for x in table if x["run"] == run}
        if "before" not in b or "after" not in b:
            continue
        ratios.append({"run": run, **{
            f"latency after/before, {k}": b["after"][c] / b["before"][c]
            for k, c in (("measured", "latency ms"), ("paper", "paper ms"), ("sim", "sim ms"))},
            **{f"SM after/before, {k}": b["after"][c] / b["before"][c]
               for k, c in (("measured", "training SM %"), ("paper", "paper SM %"),
                            ("sim", "sim SM %"))}})
    return ["## Measured vs paper vs simulated plant", "",
            markdown_table(table, list(table[0]) if table else ["run"], digits=2),
            "## Shapes: after / before the first change", "",
            markdown_table(ratios, list(ratios[0]) if ratios else ["run"], digits=3),
            ("The paper's absolute numbers are from an RTX 3090 and the simulated plant is "
            "calibrated to them; compare the ratios, not the milliseconds.")]


def _mps_restart(folder: Path, sim: bool) -> list[str]:
    out: list[str] = []
    levels = read_csv(folder / "levels.csv") if (folder / "levels.csv").is_file() else []
    restarts = read_csv(folder / "restarts.csv") if (folder / "restarts.csv").is_file() else []
    if levels:
        table = [{"mode": r["mode"], "MPS %": r["mps_pct"], "latency ms": r["latency_ms"],
                  "p99 ms": r.get("p99_ms", math.nan),
                  "training SM %": 100 * _num(r["training_sm_share"]),
                  "training it/s": r.get("training_throughput", math.nan)} for r in levels]
        out += ["## Latency and training SM share per MPS level", "",
                markdown_table(table, list(table[0]), digits=2),
                ("The GPUColo paper (Chen et al., ICDCS 2024), Fig. 4 (RTX 3090, batch 5, "
                 "inference at MPS 80 %): training SM share 38.15 % at MPS 80 % and 1.13 % at "
                 "MPS 20 %."), ""]
    if restarts:
        rows = []
        for mode in ("cold", "shadow"):
            gaps = [_num(r["gap_s"]) for r in restarts
                    if r["mode"] == mode and _num(r.get("ok")) == 1 and math.isfinite(
                        _num(r["gap_s"]))]
            if gaps:
                med = statistics.median(gaps)
                verdict = ("goal < 0.5 s: met" if med < SHADOW_GOAL_S else
                           "goal < 0.5 s: **not met**") if mode == "shadow" else ""
                rows.append({"mode": mode, "restarts": len(gaps), "median gap s": med,
                             "max gap s": max(gaps), "verdict": verdict})
        out += ["## MPS restart: training iteration gap", "",
                markdown_table(rows, ["mode", "restarts", "median gap s", "max gap s",
                                      "verdict"], digits=3),
                (f"The paper measured {PAPER_RESTART_S[0]:g}-{PAPER_RESTART_S[1]:g} s of "
                "downtime per MPS change (without a shadow process).")]
    return out or ["No levels.csv or restarts.csv found."]


def _identify(folder: Path, sim: bool) -> list[str]:
    rows = read_csv(folder / "identify_summary.csv")
    meta = _read_json(folder / "identify_meta.json")
    table = []
    ref = None
    if sim:
        import numpy as np

        from harness.sim.simulated import SimulatedColocation

        ref = SimulatedColocation.preset(str(meta.get("preset", "fig8")))
        lo, hi = meta.get("sleep_range_s") or (0.1, 0.7)
        s = np.linspace(float(lo), float(hi), 21)
    for r in rows:
        row = {"MPS %": r["mps_pct"], "gain ms/s": r["gain"], "offset ms": r["offset"],
               "R²": r["r2"], "R² held out": r.get("r2_validation", math.nan)}
        if ref is not None:
            lat = np.asarray(ref.expected_latency_ms(s, float(r["mps_pct"])), float)
            g = float(np.polyfit(s, lat, 1)[0])
            row["sim gain ms/s"] = g
            row["gain / sim"] = _num(r["gain"]) / g if g else math.nan
        table.append(row)
    out = ["## Latency vs sleep per MPS level (GPUColo paper, Figs. 6/7)", "",
           markdown_table(table, list(table[0]) if table else ["MPS %"], digits=3)]
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        shape = _num(b["gain"]) / _num(a["gain"]) if _num(a["gain"]) else math.nan
        line = (f"Shape: gain at MPS {b['mps_pct']:g} % / at MPS {a['mps_pct']:g} % = "
                f"{shape:.2f} measured")
        if table and "sim gain ms/s" in table[0]:
            sim_shape = table[-1]["sim gain ms/s"] / table[0]["sim gain ms/s"]
            line += f", {sim_shape:.2f} on the simulated `{meta.get('preset', 'fig8')}` preset"
        out += [line + ". The paper reports R² > 79 % for its linear fits.", ""]
    return out


def _summary_md(name: str, csv_name: str) -> Callable[[Path, bool], list[str]]:
    def render(folder: Path, sim: bool) -> list[str]:
        meta = _read_json(folder / f"{name}_meta.json")
        md = folder / f"{name}_summary.md"
        out = []
        if "slo_ms" in meta or "slos" in meta:
            slo = meta.get("slo_ms", meta.get("slos"))
            given = meta.get("slo_given_ms", meta.get("slos_given"))
            rng = meta.get("latency_range_ms")
            line = f"SLO: {slo} ms"
            if meta.get("relative_slo"):
                line += (f" (the paper's {given} ms on the RTX 3090 preset, moved to the same "
                         f"place in the preset's latency range {rng} ms)")
            out += [line + f"; preset `{meta.get('preset', '?')}`.", ""]
        if md.is_file():
            out += [md.read_text(encoding="utf-8").strip(), ""]
        if name == "burst":
            out += [("The paper reports GPUColo's training throughput 1.515× GSLICE-extended's "
                    "(`training_vs_gslice`).")]
        return out or [f"No {csv_name} summary found."]
    return render


def _gpu_tests(folder: Path, sim: bool) -> list[str]:
    p = folder / "junit.xml"
    if not p.is_file():
        return ["No junit.xml found."]
    try:
        root = ET.parse(p).getroot()
    except ET.ParseError as exc:
        return [f"junit.xml does not parse ({exc})."]
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tot = {k: sum(int(s.get(k, 0)) for s in suites)
           for k in ("tests", "failures", "errors", "skipped")}
    lines = [(f"`pytest -m gpu`: {tot['tests']} tests, {tot['failures']} failures, "
             f"{tot['errors']} errors, {tot['skipped']} skipped."), ""]
    for case in root.iter("testcase"):
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                msg = (el.get("message") or "").splitlines()[0][:200] if el.get("message") else ""
                lines.append(f"- {tag}: `{case.get('name')}` {msg}")
    return lines


def _smoke(folder: Path, sim: bool) -> list[str]:
    out = []
    for name in ("smid.jsonl", "training_emulator.jsonl", "inference.jsonl"):
        p = folder / name
        last = None
        if p.is_file():
            for line in p.read_text(encoding="utf-8").splitlines():
                if line.startswith("{"):
                    last = line
        out.append(f"- `{name}`: " + (f"`{last[:400]}`" if last else "no output"))
    return out


def _daemon_burst(folder: Path, sim: bool) -> list[str]:
    meta = _read_json(folder / "meta.json")
    md = folder / "summary.md"
    src = "; ".join(f"{m}: {(d or {}).get('source', 'model.json')}"
                    for m, d in (meta.get("models") or {}).items())
    out = [f"SLO {meta.get('slo_ms', '?')} ms; the daemon's models: {src or '?'}.", ""]
    if md.is_file():
        out += [md.read_text(encoding="utf-8").strip(), ""]
    out.append("Target (issue: restart-free spatial sharing): green context + MPS at least 1.5x "
               "the training of sleep only (`training_vs_sleep`) with at most 2 % of periods "
               "over 1.05 SLO.")
    return out


def _spatial(folder: Path, sim: bool) -> list[str]:
    from harness.hil.spatial_study import readme_section

    return readme_section(folder, sim)


#: folder name -> (title, what identifies it, renderer)
SECTIONS: dict[str, tuple[str, str, Callable[[Path, bool], list[str]]]] = {
    "knobs": ("Knobs: MPS vs Sleep vs Sleep+MPS (GPUColo paper, Fig. 4)", "knobs_summary.csv",
              _knobs),
    "mps_restart": ("MPS restart downtime and SM share per MPS level (GPUColo paper, Sec. IV-B)",
                    "levels.csv", _mps_restart),
    "identify": ("System identification (GPUColo paper, Figs. 6/7)", "identify_summary.csv",
                 _identify),
    "burst": ("Inference burst (GPUColo paper, Fig. 8)", "burst_summary.csv",
              _summary_md("burst", "burst")),
    "slo_sweep": ("SLO sweep (GPUColo paper, Fig. 9)", "slo_sweep_summary.csv",
                  _summary_md("slo_sweep", "slo_sweep")),
    "gpu_tests": ("Hardware tests (`pytest -m gpu`)", "junit.xml", _gpu_tests),
    "smoke": ("Smoke checks", "smid.jsonl", _smoke),
    "spatial": ("Spatial share: green contexts vs MPS restarts vs sleep", "meta.json", _spatial),
    "spatial_mps": ("Spatial share: green contexts inside MPS (spatial_study --backends "
                    "green-context+mps)", "levels.csv", _spatial),
    "daemon_burst": ("The node agent through a burst: sleep only, MPS restarts, green context "
                     "+ MPS", "summary.csv", _daemon_burst),
    "identify_green": ("System identification on green context + MPS (GPUColo paper, Figs. "
                       "6/7)", "identify_summary.csv", _identify),
    "slo_sweep_h100": ("SLO sweep on green context + MPS (GPUColo paper, Fig. 9)",
                       "slo_sweep_summary.csv", _summary_md("slo_sweep", "slo_sweep")),
}


def draft_readme(folder: str | Path, *, sim: bool = True,
                 gpu_info: Mapping[str, Any] | None = None) -> str:
    """The README draft for one result folder (its name picks the section)."""
    d = Path(folder)
    if d.name not in SECTIONS:
        raise ValueError(f"folder must be one of {', '.join(SECTIONS)}, got {d.name!r}")
    title, _key, render = SECTIONS[d.name]
    info = dict(gpu_info) if gpu_info is not None else _read_json(d / "gpu.json")
    lines = [f"# {title}", "", ("*Draft written by `python -m harness.hil.readme`; edit it: "
             "say what was unusual and what the numbers mean.*"), "", _gpu_line(info), "",
             "## Commands", "", *_command_block(d), ""]
    flags = []
    status = _status(d)
    if status is not None and not status.startswith("ok"):
        flags.append(f"the step ended with status **{status}** (see log.txt)")
    if info and not info.get("mps_control"):
        flags.append("MPS was unavailable: the MPS knob was ignored (sleep-only)")
    if flags:
        lines += ["## Needs a sentence", "", *(f"- {f}" for f in flags), ""]
    lines += [*render(d, sim), "",
              f"Paper testbed: {PAPER_GPU}. Absolute numbers differ between GPUs."]
    return "\n".join(lines).rstrip() + "\n"


def draft_readmes(root: str | Path, *, sim: bool = True, overwrite_drafts: bool = True
                  ) -> list[Path]:
    """Write a draft into every known result folder under ``root`` (``README.md`` when there
    is none, else ``README.draft.md``); returns the files written."""
    base = Path(root)
    if not base.is_dir():
        raise ValueError(f"root must be a results folder, got {str(root)!r} (not a folder)")
    written = []
    for name, (_t, key, _r) in SECTIONS.items():
        d = base / name
        if not (d / key).is_file():
            continue
        text = draft_readme(d, sim=sim)
        target = d / "README.md"
        if target.exists():
            target = d / "README.draft.md"
            if target.exists() and not overwrite_drafts:
                continue
        written.append(atomic_write_text(target, text))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.hil.readme",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="results folder (e.g. docs/results)")
    ap.add_argument("--no-sim", action="store_true",
                    help="leave out the simulated-plant columns")
    args = ap.parse_args(argv)
    try:
        files = draft_readmes(args.root, sim=not args.no_sim)
    except ValueError as exc:
        ap.error(str(exc))
    for f in files:
        print(f)
    if not files:
        print(f"no result folders ({', '.join(SECTIONS)}) found under {args.root}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
