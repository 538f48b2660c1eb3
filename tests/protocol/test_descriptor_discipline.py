"""No `select()` in tether's code: it cannot watch a descriptor numbered 1,024 or more, and a
supervisor with many children (or one that holds many files) has such descriptors. `poll`,
`epoll` and the event loop (`anyio.wait_readable`) have no such limit."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("parent", "child", "protocol", "wire")


def _selects(tree: ast.AST) -> list[ast.AST]:
    """`select.select(...)`, `select.select` passed around, or `from select import select`."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "select"
            and isinstance(node.value, ast.Name)
            and node.value.id == "select"
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "select"
            and any(alias.name == "select" for alias in node.names)
        ):
            found.append(node)
    return found


def test_nothing_in_tethers_code_calls_select() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: {ast.unparse(node)}"
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for node in _selects(ast.parse(path.read_text()))
    ]
    assert found == [], "use poll/epoll or anyio.wait_readable instead"


def test_the_select_check_would_see_each_way_of_reaching_select() -> None:
    for code in (
        "import select\nselect.select([fd], [], [], 0)",
        "import select\nwait = select.select",
        "from select import select",
        "from select import poll, select as sel",
    ):
        assert _selects(ast.parse(code)), code
    for code in ("import select\nselect.poll()", "from select import epoll", "x.select()"):
        assert not _selects(ast.parse(code)), code
