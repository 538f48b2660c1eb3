"""Choosing the containment tier: `ChildConfig(containment=...)`, refused when the host lacks it,
and named in every result."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tether.parent.process.host import TIERS, available, host, probe
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def test_auto_picks_the_most_complete_tier_this_host_offers() -> None:
    offered = [t for t in TIERS if available(probe(t))]
    assert host("auto").tier == offered[0]
    assert offered[-1] == "process-group"


async def test_an_unknown_tier_is_refused_at_start_with_the_tiers_there_are(
    tmp_path: Path,
) -> None:
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match="cgroup2, hybrid, cgroup1, process-group"):
            await sup.start("go", workspace=tmp_path, config=ChildConfig(containment="jail"))


async def test_a_tier_this_host_lacks_is_refused_at_start_with_the_reason(tmp_path: Path) -> None:
    missing = [t for t in TIERS if not available(probe(t))]
    if not missing:
        pytest.skip("this host offers every tier")
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match=f"{missing[0]!r} is not available on this host: .+"):
            await sup.start("go", workspace=tmp_path, config=ChildConfig(containment=missing[0]))


@pytest.mark.parametrize("tier", [t for t in TIERS if available(probe(t))])
async def test_every_result_names_the_tier_its_child_ran_under(tmp_path: Path, tier: str) -> None:
    async with Supervisor(ChildConfig(containment=tier)) as sup:
        result = await sup.run(
            "go", workspace=tmp_path, command=[sys.executable, "-I", "-c", "raise SystemExit(3)"]
        )
    assert result.failure is not None and result.failure.kind == "exit_nonzero"
    assert result.containment == tier


def _reaps_any_child(call: ast.Call) -> bool:
    name = ast.unparse(call.func).removeprefix("os.")
    if "." in name:
        return False  # a method (`proc.wait()`), not the os function
    first = ast.unparse(call.args[0]) if call.args else ""
    if name == "wait" and not call.args:
        return True
    if name in ("wait3",):
        return True
    if name in ("waitpid", "wait4") and first in ("-1", "0"):
        return True
    return name == "waitid" and first.endswith(("P_ALL", "P_PGID"))


def test_nothing_reaps_by_anything_but_a_pid() -> None:
    # waitpid(-1) / wait() would reap a child another part of the program is watching (and
    # lose its status); every wait names the pid it reaps.
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
        for folder in ("parent", "child")
        for path in sorted((ROOT / folder).rglob("*.py"))
        # The PID namespace's init reaps every orphan of its namespace: that is its job, and
        # nothing else in its process waits for anything.
        if path.relative_to(ROOT).as_posix() != "parent/process/_pidns.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and _reaps_any_child(node)
    ]
    assert found == []


def test_the_reaping_check_would_see_a_wait_for_any_child() -> None:
    for code in ("os.waitpid(-1, 0)", "os.wait()", "os.wait3(0)", "os.waitid(os.P_ALL, 0, 0)"):
        call = ast.parse(code).body[0]
        assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
        assert _reaps_any_child(call.value), code
