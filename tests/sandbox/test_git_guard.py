"""Files the user's own tools run (issue 30, break 4): a hostile sandboxed child plants payloads
beside a one-line change, and the user's own git commands afterwards — run here by the test
process, outside every sandbox, as root — must run none of them.

- `.git/hooks` and `.git/config` are refused in the sandbox (read-only mounts; `git config`
  fails on the rename over a mount point) unless the run opts in with
  `ChildConfig(allow_git_config=True)`; with the opt-in the same payloads are written, listed in
  `sensitiveChanges`, and would run (which shows the payloads are live);
- the rest (`.envrc`, `package.json` scripts, a Makefile target, ...) are the child's to write,
  and are listed in `sensitiveChanges` with their content;
- ordinary git use in a guarded repository keeps working, for both spawners.
The verifier's side of it, through a real orchestration, is in tests/orchestrate."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from git_payloads import git, git_payloads, repository, users_git
from sandbox_targets import config, needs_root, needs_sandbox, run_bash

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.isolation import plan_for, probe_host
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import RunResult

pytestmark = [pytest.mark.anyio, needs_sandbox]
SPAWNERS = pytest.mark.parametrize("spawner", ["exec", "zygote"])


async def plant(ws: Path, command: str, spawner: str, **cfg: object) -> tuple[RunResult, str]:
    async with Supervisor(config(spawner=spawner, isolation="sandbox", **cfg)) as sup:
        with anyio.fail_after(120):
            return await run_bash(sup, ws, command)


@SPAWNERS
async def test_a_hostile_child_cannot_plant_a_hook_or_a_git_config_command_for_the_users_git(
    tmp_path: Path, spawner: str
) -> None:
    ws = repository(tmp_path)
    marks = tmp_path / "marks"
    result, out = await plant(ws, git_payloads(marks), spawner)
    assert result.success, result
    for said in ("planted-", "moved-git", "moved-hooks", "removed-config"):
        assert said not in out, out
    assert ".git/hooks/post-checkout: Read-only file system" in out
    assert "could not write config file .git/config: Device or resource busy" in out
    assert (ws / "app.py").read_text() == "print('hello, world')\n"  # the change itself landed
    users_git(ws)
    assert sorted(os.listdir(marks)) == []  # no payload ran
    assert result.sensitive_changes == []  # nothing the user's tools run has changed
    config = (ws / ".git" / "config").read_text()
    assert "fsmonitor" not in config and "pager" not in config


@SPAWNERS
async def test_with_the_opt_in_the_same_payloads_get_in_are_listed_and_would_run(
    tmp_path: Path, spawner: str
) -> None:
    """The opt-in per run lets the child write `.git`: the result lists what it planted, with
    the content, and the user's git would run it (so the payloads above are live ones)."""
    ws = repository(tmp_path)
    marks = tmp_path / "marks"
    result, out = await plant(ws, git_payloads(marks, tamper=False), spawner, allow_git_config=True)
    assert "planted-hook" in out and "planted-fsmonitor" in out and "planted-pager" in out, out
    got = {c.path: c for c in result.sensitive_changes}
    assert sorted(got) == [".git/config", ".git/hooks/post-checkout"], got
    hook = got[".git/hooks/post-checkout"]
    assert hook.change == "added" and hook.executable and f"touch {marks}/hook" in hook.content
    config = got[".git/config"]
    assert config.change == "modified"
    assert f'fsmonitor = "touch {marks}/fsmonitor; false"' in config.content
    assert f'pager = "touch {marks}/pager; cat"' in config.content
    users_git(ws)
    assert sorted(os.listdir(marks)) == ["fsmonitor", "hook", "pager"]


OTHER_PAYLOADS = {
    ".envrc": "touch {marks}/direnv\n",
    "package.json": '{"name": "app", "scripts": {"postinstall": "touch {marks}/npm"}}\n',
    "Makefile": "all:\n\ttouch {marks}/make\n",
    ".vscode/tasks.json": '{"tasks": [{"command": "touch {marks}/vscode", '
    '"runOptions": {"runOn": "folderOpen"}}]}\n',
    ".pre-commit-config.yaml": "repos: [{repo: local, hooks: [{id: x, name: x, "
    "entry: 'touch {marks}/precommit', language: system}]}]\n",
    "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "evil"\n'
    'backend-path = ["."]\n',
}


@SPAWNERS
async def test_every_other_payload_is_listed_with_its_content_and_the_users_git_runs_none(
    tmp_path: Path, spawner: str
) -> None:
    ws = repository(tmp_path)
    marks = tmp_path / "marks"
    files = {rel: text.replace("{marks}", str(marks)) for rel, text in OTHER_PAYLOADS.items()}
    command = "echo \"print('hello, world')\" > app.py && mkdir -p .vscode && " + " && ".join(
        f"printf '%s' {_quote(text)} > {rel}" for rel, text in files.items()
    )
    result, out = await plant(ws, command, spawner)
    assert out.startswith("exit status 0"), out
    got = {c.path: c for c in result.sensitive_changes}
    assert sorted(got) == sorted(files)
    for rel, text in files.items():
        assert got[rel].change == "added", rel
        if rel == "package.json":
            assert f"touch {marks}/npm" in got[rel].content
        elif rel == "pyproject.toml":
            assert '"build-backend": "evil"' in got[rel].content
        else:
            assert got[rel].content == text, rel
    users_git(ws)
    assert sorted(os.listdir(marks)) == []


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@SPAWNERS
async def test_ordinary_git_use_in_a_guarded_repository_keeps_working(
    tmp_path: Path, spawner: str
) -> None:
    ws = repository(tmp_path)
    command = " && ".join(
        [
            "git checkout -q -b feature",
            "echo more >> app.py && git add app.py",
            "git -c user.name=T -c user.email=t@example.invalid commit -qm second",
            "git branch spare && git stash list && git status --short",
            "git checkout -q spare && git merge -q --ff-only feature",
            "git log --oneline | wc -l",
        ]
    )
    result, out = await plant(ws, command, spawner)
    assert out.startswith("exit status 0"), out
    assert out.strip().endswith("2"), out
    heads = git(ws, "branch", "--format=%(refname:short)").split()
    assert len(heads) == 3 and {"feature", "spare"} <= set(heads)
    assert result.sensitive_changes == []


@needs_root
async def test_a_submodules_git_directory_is_guarded_too(tmp_path: Path) -> None:
    ws = repository(tmp_path)
    sub = ws / ".git" / "modules" / "lib"
    git(ws, "init", "-q", "--bare", str(sub))
    command = (
        "(printf '#!/bin/sh\\n' > .git/modules/lib/hooks/post-checkout && echo planted) 2>&1; "
        "(echo '[core] pager = x' >> .git/modules/lib/config && echo planted) 2>&1; "
        "(mv .git/modules/lib .git/modules/lib2 && echo planted) 2>&1; true"
    )
    result, out = await plant(ws, command, "exec")
    assert "planted" not in out, out
    assert out.count("Read-only file system") == 2 and "Device or resource busy" in out, out
    assert result.sensitive_changes == []


@needs_root
async def test_a_repository_without_a_hooks_directory_gets_one_the_child_cannot_fill(
    tmp_path: Path,
) -> None:
    """`git init --template=` (and some libraries) make no `hooks`: the sandbox makes it, as
    the repository's owner, so there is something to mount read-only over."""
    ws = repository(tmp_path)
    hooks = ws / ".git" / "hooks"
    for sample in hooks.iterdir():
        sample.unlink()
    hooks.rmdir()
    os.chown(ws / ".git", 1000, 1000)
    command = (
        "(mkdir -p .git/hooks && printf '#!/bin/sh\\n' > .git/hooks/post-checkout"
        " && echo planted) 2>&1"
    )
    result, out = await plant(ws, command, "exec")
    assert "planted" not in out and "Read-only file system" in out, out
    assert hooks.is_dir() and list(hooks.iterdir()) == []
    assert (hooks.stat().st_uid, hooks.stat().st_gid) == (1000, 1000)
    assert result.sensitive_changes == []


async def test_a_git_config_that_is_a_link_cannot_be_guarded_and_the_run_says_how_to_go_on(
    tmp_path: Path,
) -> None:
    ws = repository(tmp_path)
    real = ws / "shared-config"
    (ws / ".git" / "config").rename(real)
    (ws / ".git" / "config").symlink_to(real)
    result, _ = await plant_failing(ws)
    assert result.failure is not None and result.failure.kind == "spawn_failed"
    assert ".git/config" in result.message and "allow_git_config" in result.message
    ok, out = await plant(ws, "git status --short", "exec", allow_git_config=True)
    assert ok.success and out.startswith("exit status 0"), out


async def plant_failing(ws: Path) -> tuple[RunResult, None]:
    never = ScriptedModel.from_json('{"turns": []}')
    async with Supervisor(config(spawner="exec", isolation="sandbox")) as sup:
        with anyio.fail_after(120):
            return await sup.run("x", agent="tester", workspace=ws, model=never), None


def test_the_plan_guards_the_repository_and_its_submodules_unless_the_run_opts_in(
    tmp_path: Path,
) -> None:
    ws = repository(tmp_path)
    (ws / ".git" / "modules" / "a" / "b").mkdir(parents=True)
    (ws / ".git" / "modules" / "a" / "b" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / ".git" / "modules" / "notarepo").mkdir()

    def guarded(**kwargs: bool) -> list[str]:
        setup = plan_for("sandbox", command=["/bin/true"], workspace=str(ws), **kwargs)
        if setup.cleanup is not None:
            setup.cleanup()
        return setup.plan.git_guard

    assert guarded() == [".git", ".git/modules/a/b"]
    assert guarded(allow_git_config=True) == []
    assert guarded(workspace_read_only=True) == []  # read-only already
    (ws / ".git").rename(ws / "real-git")
    (ws / ".git").symlink_to(ws / "real-git")
    assert guarded() == []  # a link is not guarded (nor followed): the watch lists changes
    (ws / ".git").unlink()
    (ws / ".git").write_text("gitdir: /elsewhere\n")
    assert guarded() == [".git"]  # the pointer itself
    assert probe_host().git_unguarded is None  # this host can guard (the tests above show it)


def test_doctor_says_the_sandbox_refuses_git_config_and_hooks_here(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.parent.cli.main import main

    assert main(["doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["isolation"]["gitGuard"] is True
    assert main(["doctor"]) == 0
    assert ".git/config and .git/hooks: writes refused (read-only mounts" in (
        capsys.readouterr().out
    )
