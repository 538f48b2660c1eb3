"""`[[provider]]` tables in a definitions file: named ACP agents and tether-protocol executables
that definitions, `--provider` and `agentType` can name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tether.parent.delegation.files import load_definitions, load_providers
from tether.parent.providers.acp_provider import AcpProvider
from tether.parent.providers.tables import FixedCommandProvider
from tether.parent.roles.definitions import DefinitionError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(text)
    return path


def test_provider_tables_sit_beside_agent_tables_and_definitions_name_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "child").write_text("#!/bin/sh\n")
    path = write(
        tmp_path,
        """
[[provider]]
name = "claude"
kind = "acp"
command = ["node", "/opt/agents/index.js"]
summary = "Claude Code over ACP"
readPaths = ["/opt/agents"]
env = { DISABLE_AUTOUPDATER = "1" }
handshake = 60

[[provider]]
name = "local-child"
kind = "command"
command = "bin/child --fast"

[[agent]]
type = "coder"
description = "Makes changes."
provider = "claude"
readOnly = false
""",
    )
    claude, local = load_providers(path)
    assert isinstance(claude, AcpProvider)
    assert claude.name == "claude" and claude.command == ("node", "/opt/agents/index.js")
    assert claude.summary == "Claude Code over ACP" and claude.handshake == 60.0
    assert claude.env == {"DISABLE_AUTOUPDATER": "1"} and claude.read_paths == ("/opt/agents",)
    assert isinstance(local, FixedCommandProvider)
    # A relative path that names a file next to the definitions file is made absolute.
    assert local.command == (str(tmp_path / "bin" / "child"), "--fast")
    [coder] = load_definitions(path)
    assert coder.provider == "claude"


def test_a_file_without_provider_tables_has_none(tmp_path: Path) -> None:
    path = write(tmp_path, '[[agent]]\ntype = "explorer"\n')
    assert load_providers(path) == []


@pytest.mark.parametrize(
    ("table", "key", "expected"),
    [
        ('name = "Bad Name"\nkind = "acp"\ncommand = "x"', "name", "lower-case"),
        ('name = "a"\nkind = "ssh"\ncommand = "x"', "kind", "acp, command"),
        ('name = "a"\nkind = "acp"', "command", "a string or an array"),
        ('name = "a"\nkind = "acp"\ncommand = []', "command", "empty"),
        ('name = "a"\nkind = "acp"\ncommand = "x"\nport = 1', "port", "unknown key"),
        ('name = "a"\nkind = "acp"\ncommand = "x"\nhandshake = 0', "handshake", "positive"),
        ('name = "a"\nkind = "command"\ncommand = "x"\nenv = { A = "1" }', None, "kind = 'acp'"),
    ],
)
def test_a_wrong_provider_table_is_refused_with_where_and_what(
    tmp_path: Path, table: str, key: str | None, expected: str
) -> None:
    path = write(tmp_path, f"[[provider]]\n{table}\n")
    with pytest.raises(DefinitionError) as err:
        load_providers(path)
    assert err.value.key == key and expected in str(err.value)
    assert str(err.value).startswith(f"{path}: [[provider]] #1")


def test_two_providers_may_not_share_a_name(tmp_path: Path) -> None:
    one = f'[[provider]]\nname = "a"\nkind = "acp"\ncommand = "{sys.executable}"\n'
    with pytest.raises(DefinitionError, match="duplicate provider name 'a'"):
        load_providers(write(tmp_path, one + one))
