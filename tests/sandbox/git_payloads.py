"""The payloads of tests/sandbox/test_git_guard.py and test_non_root.py: a repository, what a
hostile child plants in its `.git`, and the user's own git commands afterwards, which would
run them (each payload touches a marker file)."""

from __future__ import annotations

import os
import pty
import subprocess
from collections.abc import Sequence
from pathlib import Path

GIT = ["git", "-c", "user.name=User", "-c", "user.email=user@example.invalid"]


def repository(root: Path, owner: int | None = None) -> Path:
    """The user's repository (owned by `owner`, if given), one commit in it, and a directory
    for the payloads' markers."""
    ws = root / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "app.py").write_text("print('hello')\n")
    subprocess.run([*GIT, "-C", str(ws), "add", "app.py"], check=True)
    subprocess.run([*GIT, "-C", str(ws), "commit", "-qm", "first"], check=True)
    marks = root / "marks"
    marks.mkdir(mode=0o777)
    marks.chmod(0o777)
    if owner is not None:
        for path in (ws, *ws.rglob("*")):
            os.lchown(path, owner, owner)
    return ws


def git_payloads(marks: Path, *, tamper: bool = True) -> str:
    """What a hostile child tries in `.git`: a hook, an fsmonitor command set with `git
    config`, a pager appended to `.git/config` by hand and, with `tamper`, moving the git
    directory or its hooks aside and removing the config; each line says whether it got in."""
    lines = [
        "echo \"print('hello, world')\" > app.py",  # the one-line change it was asked for
        f"(printf '#!/bin/sh\\ntouch {marks}/hook\\n' > .git/hooks/post-checkout"
        " && chmod +x .git/hooks/post-checkout && echo planted-hook) 2>&1",
        f"(git config core.fsmonitor 'touch {marks}/fsmonitor; false'"
        " && echo planted-fsmonitor) 2>&1",
        f"(printf '[core]\\n\\tpager = \"touch {marks}/pager; cat\"\\n' >> .git/config"
        " && echo planted-pager) 2>&1",
    ]
    if tamper:
        lines += [
            "(mv .git .git-moved && echo moved-git) 2>&1",
            "(mv .git/hooks .git/hooks-moved && echo moved-hooks) 2>&1",
            "(rm -f .git/config && echo removed-config) 2>&1",
        ]
    return "\n".join([*lines, "true"])


def git(ws: Path, *args: str) -> str:
    """The user's own git, in `ws`: its output."""
    done = subprocess.run([*GIT, "-C", str(ws), *args], capture_output=True, text=True, check=True)
    return done.stdout


def users_git(ws: Path, as_user: Sequence[str] = ()) -> None:
    """What the user does next, outside the sandbox: `git status`, a new branch, and a `git
    log` on a terminal (the pager only runs for one; `PAGER=cat`, which a `core.pager` in the
    repository's config overrides, keeps `less` out of it)."""
    for args in (["status", "--short"], ["checkout", "-q", "-b", "next"]):
        subprocess.run(
            [*as_user, *GIT, "-C", str(ws), *args], check=True, capture_output=True, timeout=30
        )
    parent, child = pty.openpty()
    try:
        subprocess.run(
            [*as_user, *GIT, "-C", str(ws), "log", "--oneline"],
            stdin=child,
            stdout=child,
            stderr=child,
            check=True,
            timeout=30,
            env={**os.environ, "PAGER": "cat"},
        )
    finally:
        os.close(child)
        os.close(parent)
