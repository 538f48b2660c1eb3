"""docs/architecture.md stays true in the code: every file and folder it names exists, every
package of `parent/` is in its table of layers, and it stays short enough to read."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
ROOTS = ("protocol", "wire", "contain", "child", "parent", "api")


def _named_paths() -> list[str]:
    """Backticked names of files and folders (`x/y.py`, `y.py`, `dir/`); not protocol
    methods (`agent/run`)."""
    names = re.findall(r"`([a-z_][a-z_/]*(?:\.py|/))`", DOC)
    return sorted(set(names))


def _exists(name: str) -> bool:
    """The name is a path of the repository, or of one of its code folders (a section may name
    `run/plan.py` for `parent/run/plan.py`, or `gate.py` where it speaks of `delegation/`)."""
    inside = [ROOT, *(ROOT / r for r in ROOTS), ROOT / "parent", ROOT / "parent" / "run"]
    if any((base / name).exists() for base in inside):
        return True
    leaf = name.rstrip("/")
    return any(p.name == leaf for r in ROOTS for p in (ROOT / r).rglob(leaf))


def test_every_file_and_folder_the_doc_names_exists() -> None:
    names = _named_paths()
    assert len(names) > 30  # the scan sees the doc's paths
    assert [n for n in names if not _exists(n)] == []


def test_every_package_of_parent_is_in_the_table_of_layers() -> None:
    packages = sorted(p.name for p in (ROOT / "parent").iterdir() if (p / "__init__.py").exists())
    assert [p for p in packages if f"`{p}/`" not in DOC] == []


def test_the_doc_is_short_and_the_readme_points_to_it() -> None:
    assert len(DOC.splitlines()) <= 150
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")
