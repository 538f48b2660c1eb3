"""A short soak (seconds, not minutes): every spawner's cycles leave nothing behind, and every
run of a concurrent mixed-fault round has its own kind. `scripts/soak` runs the long one."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _report() -> ModuleType:
    """benchmarks/report.py, loaded by path (the repository root is not on the import path)."""
    spec = importlib.util.spec_from_file_location(
        "_bench_report", ROOT / "benchmarks" / "report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


report = _report()
SOAK_HEADING: str = report.SOAK_HEADING
section = report.section
with_section = report.with_section


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_short_soak_leaks_nothing_and_every_mixed_run_has_its_kind(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\n## Targets\n\nt\n\n## Analysis\n\na\n")
    argv = ["--cycles", "12", "--every", "6", "--mixed", "8", "--crash", "2", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", *argv, "--write", "--out", str(doc)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=290,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert [s["spawner"] for s in got["soaks"]] == ["exec", "zygote", "pool"]
    for s in got["soaks"]:
        assert s["clean"], s
        assert len(s["checkpoints"]) == 2 and s["failed"] == []
        assert s["leakedProcesses"] == s["leakedCgroups"] == s["fdGrowth"] == 0
    pool = got["soaks"][2]
    assert pool["pooled"] == pool["cycles"], "every pool cycle took a ready child"
    [mixed] = got["mixed"]
    assert mixed["clean"] and mixed["wrong"] == []
    assert mixed["kinds"] == {"crashed": 2, "timeout": 2, "oversize": 2, "success": 2}
    crashed = got["crash"]
    assert crashed["kills"] == 2 and crashed["violations"] == [] and crashed["acked"] > 0
    text = doc.read_text()
    soak = section(text, SOAK_HEADING)
    assert soak is not None and "| exec | 12 |" in soak and "8 of 8 with the right kind" in soak
    assert "Crash round (`benchmarks/crash.py`, seed 1): 2 SIGKILLs" in soak
    assert text.index("## Targets") < text.index(SOAK_HEADING) < text.index("## Analysis")


def test_the_soak_section_is_replaced_in_place_and_kept_by_a_regenerated_report() -> None:
    report = "# P\n\n## Targets\n\nt\n\n## Analysis\n\na\n"
    first = with_section(report, SOAK_HEADING, "## Soak\n\nold figures\n")
    assert section(first, SOAK_HEADING) == "## Soak\n\nold figures\n"
    second = with_section(first, SOAK_HEADING, "## Soak\n\nnew figures\n")
    assert second.count(SOAK_HEADING) == 1 and "old figures" not in second
    assert second.endswith("## Analysis\n\na\n")
    # What scripts/bench does: a fresh report, with the section taken from the old file.
    kept = section(second, SOAK_HEADING)
    assert kept is not None
    regenerated = with_section(report, SOAK_HEADING, kept)
    assert section(regenerated, SOAK_HEADING) == "## Soak\n\nnew figures\n"
    assert with_section("", SOAK_HEADING, "## Soak\n\nx\n") == "## Soak\n\nx\n"
