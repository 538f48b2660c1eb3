"""The conformance kit: tether's own child passes it, and a child that breaks one rule fails
exactly the check about that rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tether.parent import conformance
from tether.parent.conformance import CHECK_NAMES, run_suite

HERE = Path(__file__).parent
BROKEN_CHILD = [sys.executable, "-I", str(HERE / "broken_child.py")]
TETHER_CHILD = [sys.executable, "-I", "-m", "tether.child"]

# Each breakage of broken_child.py and the one check it must fail.
BREAKS = {
    "answers-unknown-methods": "method-not-found",
    "serves-before-initialize": "not-initialized",
    "cancel-completes": "cancel",
    "repeats-seq": "run",
    "prints-to-stdout": "stdout-protocol-only",
    "ignores-eof": "eof-exit",
    "no-byte-cap": "byte-cap",
    "message-forgets": "message-continues",
    "message-accepted-live": "message-refusals",
}


@pytest.mark.anyio
async def test_tethers_own_child_passes_every_check() -> None:
    report = await run_suite(TETHER_CHILD)
    assert report.failures() == {}
    assert report.passed == len(CHECK_NAMES)


@pytest.mark.anyio
async def test_the_broken_child_passes_every_check_when_told_to_break_nothing() -> None:
    report = await run_suite(BROKEN_CHILD)
    assert report.failures() == {}


@pytest.mark.anyio
@pytest.mark.parametrize(("breakage", "check"), sorted(BREAKS.items()))
async def test_a_child_that_breaks_one_rule_fails_exactly_the_check_about_it(
    breakage: str, check: str
) -> None:
    report = await run_suite([*BROKEN_CHILD, breakage])
    assert list(report.failures()) == [check]
    assert report.passed == len(CHECK_NAMES) - 1


@pytest.mark.anyio
async def test_a_silent_child_fails_at_the_deadlines_and_is_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conformance.wire, "REPLY_TIMEOUT", 0.3)
    silent = [sys.executable, "-I", "-c", "import time; time.sleep(60)"]
    report = await run_suite(silent, only=["handshake", "eof-exit"])
    assert report.failures() == {
        "handshake": "no answer to initialize within 0.3s",
        "eof-exit": "no answer to initialize within 0.3s",
    }
    # The reaper fixture fails this test if either sleeper is still alive.


@pytest.mark.anyio
async def test_a_command_that_cannot_start_fails_every_check_with_the_reason() -> None:
    report = await run_suite(["/nonexistent/tether-child"])
    assert report.passed == 0
    assert set(report.failures().values()) == {
        "cannot start '/nonexistent/tether-child': no such file"
    }


def test_the_cli_prints_a_line_per_check_and_the_totals_and_exits_nonzero_on_failure() -> None:
    cmd = [sys.executable, "-m", "tether.parent.cli", "conformance", "--", *BROKEN_CHILD]
    done = subprocess.run(
        [*cmd, "answers-unknown-methods"], capture_output=True, text=True, timeout=30
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == len(CHECK_NAMES) + 1
    assert [ln.split(":")[0].split()[1] for ln in lines[:-1]] == list(CHECK_NAMES)
    assert lines[CHECK_NAMES.index("method-not-found")].startswith("FAIL method-not-found: ")
    assert sum(ln.startswith("PASS ") for ln in lines) == len(CHECK_NAMES) - 1
    assert lines[-1] == f"{len(CHECK_NAMES) - 1} passed, 1 failed"


def test_the_cli_exits_zero_when_every_check_passes() -> None:
    cmd = [sys.executable, "-m", "tether.parent.cli", "conformance", "--check", "ping"]
    done = subprocess.run([*cmd, "--", *TETHER_CHILD], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["PASS ping", "1 passed, 0 failed"]


def test_the_cli_refuses_a_missing_command_as_bad_usage() -> None:
    cmd = [sys.executable, "-m", "tether.parent.cli", "conformance", "--"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "give the child command" in done.stderr
