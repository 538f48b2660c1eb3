"""Dependency direction: protocol stays light; child and parent never import each other — with
one documented exception: the in-memory transport serves tether's own runtime inside the
parent, so `parent/run/transport/memory.py` imports `tether.child`, lazily (inside the function
that opens a child), and nothing else in the parent imports that module's child side at import
time."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("anyio", "psutil", "jsonrpcserver", "httpx")
PROTOCOL_MODULES = [
    "tether.protocol",
    "tether.protocol.codec",
    "tether.protocol.connection",
    "tether.protocol.errors",
    "tether.protocol.framing",
    "tether.protocol.messages",
    "tether.protocol.methods",
    "tether.protocol.schema",
]
# Third-party packages each folder may use (the design's dependency table); stdlib always.
ALLOWED_THIRD_PARTY = {
    "protocol": {"msgspec"},
    "wire": {"msgspec", "anyio"},
    # oslash is jsonrpcserver's own result type (`Either`), used only next to it.
    "child": {"msgspec", "anyio", "jsonrpcserver", "oslash"},
    # h11: the model gateway and the egress proxy; acp (+ pydantic, its models' errors): the
    # ACP driver; jsonschema: the task tool validates a model's arguments; mcp: `tether mcp`
    # only (tests/mcp checks); ray: the optional scale-out extra, imported only inside
    # `placement/` functions (tests/placement/test_parts.py checks nothing loads it);
    # cryptography: a run's certificate authority, imported only when a network policy carries
    # a credential (tests/egress checks nothing else loads it).
    "parent": {"msgspec", "anyio", "psutil", "httpx", "h11", "acp", "pydantic", "jsonschema"}
    | {"mcp", "ray", "cryptography"},
    # Runs in the trampoline (`python -I -S`, no site-packages): the standard library only.
    "contain": set(),
    # The curated `tether` package: its names load lazily from the folders above.
    "api": set(),
}
MEMORY_TRANSPORT = "parent/run/transport/memory.py"
EXCEPTIONS = {MEMORY_TRANSPORT: ("tether.child",)}
"""Files allowed one otherwise forbidden sibling (see the module docstring)."""
FORBIDDEN_SIBLING = {
    "protocol": ("tether.child", "tether.parent", "tether.wire"),
    "wire": ("tether.child", "tether.parent"),
    "child": ("tether.parent",),
    "parent": ("tether.child",),
    "contain": ("tether.child", "tether.parent", "tether.protocol", "tether.wire"),
    "api": (),
}


@pytest.mark.parametrize("module", PROTOCOL_MODULES)
def test_importing_the_protocol_loads_no_io_or_runtime_library(module: str) -> None:
    code = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r} or m.startswith(('tether.child', 'tether.parent')))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [], f"importing {module} pulled in heavy modules"


def _python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute module an import names, with its line (`from a import b` gives a and a.b)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _violations(folder: str, banned: tuple[str, ...]) -> list[str]:
    bad = []
    for path in _python_files(folder):
        allowed = EXCEPTIONS.get(str(path.relative_to(ROOT)), ())
        for line, name in _imports(path):
            if any(name == a or name.startswith(a + ".") for a in allowed):
                continue
            if any(name == b or name.startswith(b + ".") for b in banned):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return bad


def test_the_memory_transport_imports_the_child_runtime_only_when_it_opens_a_child() -> None:
    path = ROOT / MEMORY_TRANSPORT
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tether.child"):
            top_level.append(node.module)
        elif isinstance(node, ast.Import):
            top_level += [a.name for a in node.names if a.name.startswith("tether.child")]
    assert top_level == []
    lazy = [name for _, name in _imports(path) if name.startswith("tether.child")]
    assert lazy, "the exception is no longer used: remove it"


def test_importing_the_supervisor_and_its_providers_loads_no_child_code() -> None:
    code = (
        "import json, sys\n"
        "import tether.parent.supervisor, tether.parent.providers.builtin, "
        "tether.parent.run.transport\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tether.child') "
        "or m == 'acp')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


@pytest.mark.parametrize("folder", sorted(FORBIDDEN_SIBLING))
def test_no_code_folder_imports_a_sibling_it_must_not_depend_on(folder: str) -> None:
    assert _violations(folder, FORBIDDEN_SIBLING[folder]) == []


@pytest.mark.parametrize("folder", sorted(ALLOWED_THIRD_PARTY))
def test_each_code_folder_imports_only_the_stdlib_tether_and_its_allowed_packages(
    folder: str,
) -> None:
    allowed = ALLOWED_THIRD_PARTY[folder] | set(sys.stdlib_module_names) | {"tether"}
    bad = []
    for path in _python_files(folder):
        for line, name in _imports(path):
            if name.split(".")[0] not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == []


@pytest.mark.parametrize(
    "folder",
    ["protocol", "wire", "child", "parent", "contain", "api", "tests", "scripts", "examples"],
)
def test_nothing_imports_a_bare_code_folder(folder: str) -> None:
    assert _violations(folder, ("parent", "child", "protocol", "wire", "contain", "api")) == [], (
        "import tether.parent / .child / .protocol / .wire / .contain, never the bare folder"
    )


def test_the_import_scan_sees_from_imports_of_submodules(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "from tether import child\nimport tether.parent.cli as c\nLAUNCH = 'tether.child'\n"
    )
    names = [name for _, name in _imports(sample)]
    assert "tether.child" in names and "tether.parent.cli" in names
    assert len(names) == 3  # the string literal is not an import


CONTAIN_MODULES = [
    "tether.contain",
    "tether.contain.confined",
    "tether.contain.landlock",
    "tether.contain.mounts",
    "tether.contain.plan",
    "tether.contain.privileges",
    "tether.contain.seccomp",
    "tether.contain.sequence",
]


@pytest.mark.parametrize("module", CONTAIN_MODULES)
def test_tether_contain_imports_without_site_packages_and_loads_only_the_stdlib(
    module: str,
) -> None:
    """The trampoline runs `python -I -S`: each module must import with only the directory
    holding `tether/` on the path, and pull in nothing from site-packages."""
    import tether.contain

    tether_root = str(Path(tether.contain.__file__).parent.parent.parent)
    code = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {tether_root!r})\n"
        f"importlib.import_module({module!r})\n"
        "std = set(sys.stdlib_module_names)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] not in std "
        "and not m.startswith('tether.contain') and m not in ('tether', '__main__'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


# --- layers and cycles -----------------------------------------------------------------------

CODE_FOLDERS = {
    "api": "tether",
    "protocol": "tether.protocol",
    "wire": "tether.wire",
    "contain": "tether.contain",
    "child": "tether.child",
    "parent": "tether.parent",
}
PARENT_LAYERS = {
    # a layer: the parent's packages above it, which it must never import (not even lazily)
    "tether.parent.roles": (
        "tether.parent.process",
        "tether.parent.run",
        "tether.parent.agents",
        "tether.parent.delegation",
        "tether.parent.providers",
        "tether.parent.mcp_server",
        "tether.parent.placement",
        "tether.parent.cli",
        "tether.parent.supervisor",
    ),
    "tether.parent.process": (
        "tether.parent.run",
        "tether.parent.agents",
        "tether.parent.delegation",
        "tether.parent.providers",
        "tether.parent.mcp_server",
        "tether.parent.placement",
        "tether.parent.cli",
        "tether.parent.supervisor",
    ),
    # Traces sit below the run core: the broker records into them, the replay model reads them.
    "tether.parent.trace": (
        "tether.parent.run",
        "tether.parent.agents",
        "tether.parent.delegation",
        "tether.parent.providers",
        "tether.parent.mcp_server",
        "tether.parent.placement",
        "tether.parent.cli",
        "tether.parent.supervisor",
    ),
    "tether.parent.run": (
        "tether.parent.agents",
        "tether.parent.delegation",
        "tether.parent.mcp_server",
        "tether.parent.placement",
        "tether.parent.cli",
        "tether.parent.supervisor",
    ),
    "tether.parent.agents": (
        "tether.parent.delegation",
        "tether.parent.mcp_server",
        "tether.parent.placement",
        "tether.parent.cli",
    ),
    "tether.parent.delegation": (
        "tether.parent.mcp_server",
        "tether.parent.placement",
        "tether.parent.cli",
    ),
}


def _module_table() -> dict[str, Path]:
    table: dict[str, Path] = {}
    for folder, package in CODE_FOLDERS.items():
        for path in _python_files(folder):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            table[".".join(parts)] = path
    return table


def _module_edges(table: dict[str, Path]) -> dict[str, set[str]]:
    """Every import of a tether module by another: module level, inside functions, under
    `if TYPE_CHECKING:`, relative, and the dotted strings a package's lazy `_LAZY` table
    names. `from pkg import sub` is an import of `pkg.sub` when that is a module."""

    def owner(name: str) -> str | None:
        while name and name not in table:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in table}
    for module, path in table.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    names.append(sub if sub in table else base)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("tether.")
                and "_LAZY" in path.read_text(encoding="utf-8")
            ):
                names = [node.value]
            for name in names:
                target = owner(name)
                if target is not None and target != module:
                    edges[module].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_tether_module_is_in_an_import_cycle_counting_every_import() -> None:
    assert _cycles(_module_edges(_module_table())) == []


def test_the_cycle_finder_sees_a_cycle_through_a_function_local_import(tmp_path: Path) -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("layer", sorted(PARENT_LAYERS))
def test_a_layer_of_the_parent_never_imports_one_above_it(layer: str) -> None:
    table = _module_table()
    edges = _module_edges(table)
    above = PARENT_LAYERS[layer]
    bad = sorted(
        f"{module} imports {target}"
        for module, targets in edges.items()
        if module == layer or module.startswith(layer + ".")
        for target in targets
        if any(target == a or target.startswith(a + ".") for a in above)
    )
    assert bad == []
