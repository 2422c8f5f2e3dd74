"""docs/architecture.md's control-core row names the modules the import contract checks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (3.10: the package tomllib came from, a dependency there)
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ROOT = Path(__file__).resolve().parents[2]


def _doc_core() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| control core |"))
    names = re.search(r"`gpucontrol\.\{([^}]*)\}`", row)
    assert names, row
    return {f"gpucontrol.{n.strip()}" for n in names.group(1).split(",")}


def _contract_core() -> set[str]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    first = cfg["tool"]["importlinter"]["contracts"][0]
    assert "control core" in first["name"], first["name"]
    return set(first["source_modules"])


def test_the_core_row_and_the_core_contract_name_the_same_modules() -> None:
    assert _doc_core() == _contract_core()


def test_every_core_module_exists() -> None:
    for name in _contract_core():
        path = ROOT / (name.replace(".", "/") + ".py")
        assert path.is_file(), name
