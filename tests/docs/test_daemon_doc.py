"""docs/daemon.md says what the daemon does: its numbered lists count once, its Python
snippets define every name they use, and its flag table gives the ranges the daemon checks."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

from gpucontrol.node import config

DOC = (Path(__file__).resolve().parents[2] / "docs" / "daemon.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DOC.index(f"\n## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end >= 0 else None]


def test_crash_safety_list_is_numbered_once():
    numbers = [int(m) for m in re.findall(r"^(\d+)\. ", _section("Crash safety"), re.M)]
    assert numbers == list(range(1, len(numbers) + 1))


def _undefined_names(code: str) -> set[str]:
    """Names the code reads but never imports, defines or assigns (flow-insensitive)."""
    tree = ast.parse(code)
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            defined.add(node.id)
    return {n.id for n in ast.walk(tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - defined


@pytest.mark.parametrize("marker", ["from gpucontrol.node.client import report_latency",
                                    "choose_sleep_actuator(pids=[4242]"])
def test_python_snippets_define_every_name_they_use(marker):
    """The node-agent loop once read `time` and `running` without defining them."""
    block = next(b for b in re.findall(r"^```python\n(.*?)^```", DOC, re.S | re.M)
                 if marker in b)
    undefined = _undefined_names(block)
    if marker.startswith("from gpucontrol.node.client"):  # the inference's own loop
        undefined -= {"requests", "run"}
    assert undefined == set()


def _row(flag: str) -> str:
    return next(line for line in DOC.splitlines() if line.startswith(f"| `{flag}"))


@pytest.mark.parametrize("flag, text", [
    ("--period-s", "[{:g}, {:g}] s".format(*config.PERIOD_S)),
    ("--max-sleep-s", f"(0, {config.MAX_SLEEP_S:g}] s"),
    ("--run-quantum-s", "[{:g}, {:g}] s".format(*config.RUN_QUANTUM_S)),
    ("--shadow", f"(0, {config.READY_TIMEOUT_S:g}] s"),
    ("--mps-health-s", "[{:g}, {:g}] s".format(*config.MPS_HEALTH_S)),
    ("--stall-timeout-s", "[{:g}, {:g}]".format(*config.STALL_TIMEOUT_S)),
    ("--duration-s", f"(0, {config.DURATION_S:g}] s"),
])
def test_the_flag_table_gives_the_checked_ranges(flag, text):
    assert text in _row(flag)
