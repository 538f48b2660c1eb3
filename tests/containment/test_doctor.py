"""`tether doctor` says what this host offers and what enforces each limit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tether.parent.cli.main import main
from tether.parent.process.host import host


def test_doctor_reports_every_key_as_json_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {
        "cgroups",
        "tiers",
        "auto",
        "bwrap",
        "landlock",
        "pidfd",
        "subreaper",
        "keeper",
        "limits",
    } <= set(got)
    assert got["auto"]["tier"] == host().tier and got["auto"]["why"]
    assert set(got["limits"]) == {
        "memory",
        "cpu",
        "wall",
        "idle",
        "processes",
        "open_files",
        "file_size",
    }
    assert {"cgroup2", "cgroup1"} <= set(got["cgroups"])
    assert got["tiers"]["process-group"] is True
    assert {"installed", "works"} <= set(got["bwrap"])


def test_doctor_prints_a_readable_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for needle in ("containment: auto picks", "bwrap:", "landlock:", "pidfd:", "subreaper:"):
        assert needle in out
    assert "  memory: " in out and "  processes: " in out


def test_run_takes_a_launcher_and_a_containment_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = f"{sys.executable} -I -c 'raise SystemExit(3)'"
    argv = ["run", "go", "--workspace", str(tmp_path), "--command", code, "--json", "--quiet"]
    assert main([*argv, "--containment", "process-group", "--launcher", "local"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["containment"] == "process-group"
    assert result["failure"]["kind"] == "exit_nonzero"
    assert main([*argv, "--launcher", "nowhere"]) == 2
    assert "launcher" in capsys.readouterr().err
