"""The public surface: `import tether` gives the names a user needs and loads nothing until one
is used; `examples/` and `docs/` import only public modules and names, so what they show keeps
working when the internals move."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest

import tether

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = (
    "tether",
    "tether.console",
    "tether.protocol",
    "tether.protocol.messages",
    "tether.child.agent",
    "tether.parent",
    "tether.parent.delegation",
)
"""The module paths a user may import from (see `tether`'s docstring)."""


def test_every_name_tether_offers_resolves() -> None:
    for name in tether.__all__:
        assert getattr(tether, name) is not None, name
    assert set(tether.__all__) <= set(dir(tether))
    with pytest.raises(AttributeError):
        _ = tether.NoSuchThing  # type: ignore[attr-defined]


def test_importing_tether_loads_no_runtime_library_and_no_parent_code(
    modules_loaded_by: Callable[[str], list[str]],
) -> None:
    loaded = modules_loaded_by("import tether")
    heavy = ("anyio", "msgspec", "psutil", "httpx")
    assert [m for m in loaded if m.split(".")[0] in heavy or m.startswith("tether.")] == []


def test_the_version_is_the_installed_distributions() -> None:
    assert tether.__version__ == metadata.version("tether")


def _documented_imports() -> list[tuple[str, str, list[str]]]:
    """Every `from tether... import ...` / `import tether...` in examples/ (Python files) and in
    the Python blocks of README.md and docs/*.md: (where, module, names)."""
    sources: list[tuple[str, str]] = []
    for path in sorted((ROOT / "examples").rglob("*.py")):
        sources.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.DOTALL)):
            sources.append((f"{path.relative_to(ROOT)} block {i + 1}", block))
    found = []
    for where, source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tether"):
                found.append((where, node.module or "", [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("tether"):
                        found.append((where, alias.name, []))
    return found


def test_examples_and_docs_import_only_public_modules_and_names() -> None:
    imports = _documented_imports()
    assert len(imports) > 10  # the scan sees the examples and the docs
    bad = []
    for where, module, names in imports:
        if module not in PUBLIC_MODULES:
            bad.append(f"{where}: {module} is not a public module")
            continue
        exported = getattr(importlib.import_module(module), "__all__", None)
        for name in names:
            if exported is not None and name not in exported:
                bad.append(f"{where}: {module}.{name} is not in its __all__")
    assert bad == []


def test_the_scan_sees_an_internal_import_in_a_doc_block(tmp_path: Path) -> None:
    block = "```python\nfrom tether.parent.run.handle import RunHandle\n```\n"
    [source] = re.findall(r"```python\n(.*?)```", block, re.DOTALL)
    [node] = ast.parse(source).body
    assert isinstance(node, ast.ImportFrom) and node.module not in PUBLIC_MODULES
