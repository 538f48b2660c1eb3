"""Named providers from a definitions file: `[[provider]]` tables beside the `[[agent]]` ones.

```toml
[[provider]]
name = "claude"                      # what definitions (`provider = "claude"`), `--provider`
kind = "acp"                         # and the task tool's `agentType` call it
command = ["node", "/opt/acp-agents/node_modules/@zed-industries/claude-agent-acp/dist/index.js"]
summary = "Claude Code over ACP"     # optional: shown by `tether doctor` and to the model
readPaths = ["/opt/acp-agents"]      # optional: more a sandboxed agent may read
env = { DISABLE_AUTOUPDATER = "1" }  # optional: more variables for the agent
handshake = 60                       # optional (acp): seconds for initialize + session/new

[[provider]]
name = "rust-child"
kind = "command"                     # any executable speaking tether's protocol
command = "./target/release/child"   # a string is split like a shell would
```

`kind` is `acp` (an Agent Client Protocol agent, `AcpProvider`) or `command` (a tether-protocol
child, `CommandProvider` with its command fixed). A relative path in `command` that names a
file next to the definitions file is made absolute against the file's directory (a sandboxed
child starts in its workspace, not here). Unknown keys and values of the wrong kind are
refused with the file, the table's index and the key (`DefinitionError`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from tether.parent.process.env import build_child_env
from tether.parent.process.spawn import missing_command
from tether.parent.providers.builtin import CommandProvider
from tether.parent.roles.definitions import DefinitionError
from tether.parent.run.provider import NAME_PATTERN, Provider, SubagentRequest

KINDS = ("acp", "command")
KEYS = ("name", "kind", "command", "summary", "readPaths", "env", "handshake")


class FixedCommandProvider(CommandProvider):
    """The `command` provider with its command fixed, under a name of its own."""

    def __init__(self, name: str, command: Sequence[str], summary: str | None = None) -> None:
        self.name = name
        self.command = tuple(command)
        self.summary = summary or f"the tether-protocol child {' '.join(self.command)!r}"

    def problem(self, argument: str | None = None) -> str | None:
        if argument is not None:
            return f"{self.name} takes no argument"
        return missing_command(self.command, build_child_env(os.environ))

    def prepare(self, request: SubagentRequest) -> SubagentRequest:
        if request.argument is not None or request.command_given:
            raise ValueError(f"provider {self.name!r} runs its own command; it takes no other")
        cfg = dataclasses.replace(request.config, command=self.command)
        return request.replace(config=cfg, command_given=True)


def providers_from_document(doc: Mapping[str, Any], *, file: str | None = None) -> list[Provider]:
    """The providers of a parsed definitions file's `[[provider]]` tables."""
    tables = doc.get("provider", [])
    if isinstance(tables, dict):
        raise DefinitionError(
            "expected [[provider]] tables (an array of tables), found a single [provider] table",
            file=file,
            key="provider",
        )
    if not isinstance(tables, list):
        raise DefinitionError("expected [[provider]] tables", file=file, key="provider")
    base = os.path.dirname(os.path.abspath(file)) if file else os.getcwd()
    out: list[Provider] = []
    seen: set[str] = set()
    for index, table in enumerate(tables):
        provider = _provider(table, base, file, index)
        if provider.name in seen:
            raise DefinitionError(
                f"duplicate provider name {provider.name!r}",
                file=file,
                index=index,
                key="name",
                table="provider",
            )
        seen.add(provider.name)
        out.append(provider)
    return out


def _provider(table: Any, base: str, file: str | None, index: int) -> Provider:
    def fail(problem: str, key: str | None = None) -> DefinitionError:
        return DefinitionError(problem, file=file, index=index, key=key, table="provider")

    if not isinstance(table, dict):
        raise fail(f"expected a table, found a {type(table).__name__}")
    for key in table:
        if key not in KEYS:
            raise fail(f"unknown key; expected one of: {', '.join(KEYS)}", key)
    name = table.get("name")
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        raise fail("expected a name of lower-case letters, digits, '-' or '_'", "name")
    kind = table.get("kind")
    if kind not in KINDS:
        raise fail(f"expected one of: {', '.join(KINDS)}", "kind")
    raw = table.get("command")
    if isinstance(raw, str):
        command = shlex.split(raw)
    elif isinstance(raw, list) and all(isinstance(w, str) for w in raw):
        command = list(raw)
    else:
        raise fail("expected a command: a string or an array of strings", "command")
    if not command:
        raise fail("the command is empty", "command")
    command = [_absolute(w, base) for w in command]
    summary = table.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise fail("expected a string", "summary")
    reads = table.get("readPaths", [])
    if not isinstance(reads, list) or not all(isinstance(p, str) for p in reads):
        raise fail("expected an array of paths", "readPaths")
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise fail("expected a table of strings", "env")
    handshake = table.get("handshake", 30.0)
    if isinstance(handshake, bool) or not isinstance(handshake, int | float) or handshake <= 0:
        raise fail("expected a positive number of seconds", "handshake")
    if kind == "acp":
        from tether.parent.providers.acp_provider import AcpProvider

        return AcpProvider(
            name,
            command,
            summary=summary,
            env=env,
            read_paths=[_absolute(p, base) for p in reads],
            handshake=float(handshake),
        )
    if reads or env or "handshake" in table:
        raise fail("readPaths, env and handshake are for kind = 'acp'")
    return FixedCommandProvider(name, command, summary)


def _absolute(word: str, base: str) -> str:
    """A relative path word that names something next to the file, made absolute."""
    if os.sep in word and not os.path.isabs(word) and not word.startswith("-"):
        candidate = os.path.normpath(os.path.join(base, word))
        if os.path.exists(candidate):
            return candidate
    return word


def absolute_spec(spec: str) -> str:
    """A `NAME:ARGUMENT` spec whose relative path words that name something here are made
    absolute (a sandboxed agent starts in its workspace, and is granted only absolute paths
    its command names)."""
    from tether.parent.run.provider import split_spec

    name, argument = split_spec(spec)
    if argument is None:
        return spec
    words = [_absolute(w, os.getcwd()) for w in shlex.split(argument)]
    return f"{name}:{shlex.join(words)}"
