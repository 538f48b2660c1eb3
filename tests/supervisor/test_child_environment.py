"""What a real child starts with: a scrubbed environment, its own session, core dumps off.

`children/env_dump.py` writes its environment (both `os.environ` and the raw
`/proc/self/environ`), ids, parent-death signal and `/proc/self/limits` to a JSON file, then
answers the run.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.parent.process.isolation import probe_host
from tether.parent.process.limits import DisposePolicy
from tether.parent.process.markers import marker_prefix
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

CHILDREN = Path(__file__).parent.parent / "children"
GRACES = DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0)
SECRETS = {
    "OPENAI_API_KEY": "sk-canary-openai",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-secret",
    "GITHUB_TOKEN": "ghp_canary",
}


@pytest.fixture
def canaries(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    monkeypatch.setenv("HOME", "/home/canary")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_CTYPE", "C.UTF-8")
    monkeypatch.setenv("TETHER_TEST_NOT_ALLOWED", "nope")
    monkeypatch.setenv("GITHUB_REPOSITORY", "tether/tether")


async def dump(
    tmp_path: Path,
    *,
    pass_env: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    isolation: str = "auto",
) -> dict[str, Any]:
    """Run `env_dump.py` and return its report; its raw /proc environ becomes a dict."""
    out = tmp_path / "report.json"
    config = ChildConfig(
        dispose=GRACES, pass_env=tuple(pass_env), env=dict(env or {}), isolation=isolation
    )
    async with Supervisor(config) as sup:
        with anyio.fail_after(30):
            result = await sup.run(
                "dump",
                workspace=tmp_path,
                command=[sys.executable, "-I", str(CHILDREN / "env_dump.py"), str(out)],
            )
    assert result.success, result
    report: dict[str, Any] = json.loads(out.read_text())
    report["proc"] = dict(item.split("=", 1) for item in report["proc_environ"] if "=" in item)
    return report


@pytest.mark.usefixtures("canaries")
async def test_secrets_in_the_parents_environment_never_reach_the_child(tmp_path: Path) -> None:
    report = await dump(tmp_path)

    for name, value in SECRETS.items():
        assert name not in report["proc"]
        assert not any(value in item for item in report["proc_environ"])
    assert "TETHER_TEST_NOT_ALLOWED" not in report["proc"]


@pytest.mark.usefixtures("canaries")
async def test_the_allowlist_passes_path_home_lang_and_lc_variables(tmp_path: Path) -> None:
    # Process isolation: a sandboxed child gets a private HOME (next test).
    proc = (await dump(tmp_path, isolation="process"))["proc"]

    assert proc["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert proc["HOME"] == "/home/canary"
    assert proc["LANG"] == "C.UTF-8"
    assert proc["LC_CTYPE"] == "C.UTF-8"


@pytest.mark.usefixtures("canaries")
async def test_a_sandboxed_child_gets_a_private_home_and_temp_dir_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    if probe_host().why_not:
        pytest.skip(f"no sandbox on this host: {probe_host().why_not}")
    proc = (await dump(tmp_path, isolation="sandbox"))["proc"]

    assert proc["HOME"] == "/tmp/home" if probe_host().root else proc["HOME"].endswith("/home")
    assert proc["TMPDIR"].startswith("/tmp")
    assert proc["XDG_CACHE_HOME"].startswith(proc["HOME"])
    assert proc["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert proc["LANG"] == "C.UTF-8"


@pytest.mark.usefixtures("canaries")
async def test_the_child_carries_a_tree_marker_minted_by_this_process(tmp_path: Path) -> None:
    proc = (await dump(tmp_path))["proc"]

    assert proc["TETHER_TREE"].startswith(marker_prefix())


@pytest.mark.usefixtures("canaries")
async def test_a_secret_passes_only_when_named_exactly(tmp_path: Path) -> None:
    named = (await dump(tmp_path, pass_env=["GITHUB_TOKEN"]))["proc"]
    globbed = (await dump(tmp_path, pass_env=["GITHUB_*", "*_KEY"]))["proc"]
    everything = (await dump(tmp_path, pass_env=["*"]))["proc"]

    assert named["GITHUB_TOKEN"] == "ghp_canary"
    assert "OPENAI_API_KEY" not in named
    assert "GITHUB_TOKEN" not in globbed
    assert "OPENAI_API_KEY" not in globbed
    assert globbed["GITHUB_REPOSITORY"] == "tether/tether"  # the glob works for the rest
    assert not set(SECRETS) & set(everything)
    assert everything["TETHER_TEST_NOT_ALLOWED"] == "nope"


@pytest.mark.usefixtures("canaries")
async def test_explicit_values_are_merged_over_the_scrubbed_environment(tmp_path: Path) -> None:
    proc = (await dump(tmp_path, env={"LANG": "en_GB.UTF-8", "MY_SETTING": "on"}))["proc"]

    assert proc["LANG"] == "en_GB.UTF-8"
    assert proc["MY_SETTING"] == "on"
    assert proc["PATH"] == "/usr/local/bin:/usr/bin:/bin"  # merged over, not replacing
    assert proc["TETHER_TREE"].startswith(marker_prefix())


@pytest.mark.usefixtures("canaries")
async def test_an_explicit_home_wins_over_the_sandboxs_private_one(tmp_path: Path) -> None:
    proc = (await dump(tmp_path, env={"HOME": str(tmp_path)}))["proc"]

    assert proc["HOME"] == str(tmp_path)


@pytest.mark.usefixtures("canaries")
async def test_inherited_values_that_start_with_parens_are_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LC_EVIL", "() { :; }; echo pwned")
    monkeypatch.setenv("BASH_FUNC_greet%%", "() { echo hi; }")
    monkeypatch.setenv("TERM", "() { :; }")

    proc = (await dump(tmp_path, pass_env=["BASH_FUNC_greet%%"]))["proc"]

    assert "LC_EVIL" not in proc
    assert "BASH_FUNC_greet%%" not in proc  # not even when named
    assert "TERM" not in proc
    assert proc["LC_CTYPE"] == "C.UTF-8"


async def test_the_child_leads_its_own_session_and_process_group(tmp_path: Path) -> None:
    report = await dump(tmp_path)

    assert report["sid"] == report["pid"]
    assert report["pgid"] == report["pid"]


async def test_the_child_runs_with_core_dumps_off_and_a_parent_death_signal(
    tmp_path: Path,
) -> None:
    report = await dump(tmp_path)

    m = re.search(r"^Max core file size\s+(\S+)\s+(\S+)", report["limits"], re.MULTILINE)
    assert m is not None, report["limits"]
    assert m.groups() == ("0", "0")
    assert report["pdeathsig"] == signal.SIGKILL
