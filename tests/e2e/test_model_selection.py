"""The parent alone decides models: a child selects among the providers the parent resolved
before the spawn, and no model string from the wire is ever built, opened or connected to."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tether.parent import models as model_registry
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.config import ChildConfig
from tether.parent.supervisor import Supervisor
from tether.protocol import ErrorCode
from tether.protocol.messages import AgentDefinition

CHILDREN = Path(__file__).resolve().parent.parent / "children"
NAMES_MODELS = [sys.executable, "-I", str(CHILDREN / "names_models.py")]

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""


class Listener:
    """A loopback TCP listener that counts the connections it is offered."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    got = Listener()
    yield got
    got.close()


def outcomes(summary: str) -> list[str]:
    return summary.splitlines()


async def test_a_child_naming_an_http_model_at_its_own_listener_gets_an_error_and_no_connection(
    tmp_path: Path, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-never-sent")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-canary-never-sent")
    names = [
        f"openai:x@http://127.0.0.1:{listener.port}/v1",
        f"anthropic:x@http://127.0.0.1:{listener.port}",
    ]
    async with Supervisor() as sup:
        result = await sup.run(
            "\n".join(names),
            workspace=tmp_path,
            model=ScriptedModel.from_json('[{"text": "mine"}]'),
            command=NAMES_MODELS,
        )
    assert result.success, result
    for line in outcomes(result.summary):
        assert line.startswith(f"error {int(ErrorCode.NO_MODEL)} "), line
        assert "is not one this run may use" in line
    await anyio.sleep(0.3)  # anything the parent had started would have connected by now
    assert listener.connections == 0


async def test_a_child_naming_a_fifo_or_a_device_as_its_model_is_refused_at_once(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    names = [f"scripted:{fifo}", "scripted:/dev/zero", "scripted:/dev/stdin"]
    async with Supervisor() as sup:
        with anyio.fail_after(10):
            result = await sup.run(
                "\n".join(names),
                workspace=tmp_path,
                model=ScriptedModel.from_json('[{"text": "mine"}]'),
                command=NAMES_MODELS,
            )
    assert [line.split()[:2] for line in outcomes(result.summary)] == [
        ["error", str(int(ErrorCode.NO_MODEL))]
    ] * 3


async def test_no_model_string_from_the_wire_is_ever_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved: list[str] = []
    real = model_registry.resolve_model

    def spy(spec: str) -> model_registry.ModelProvider:
        resolved.append(spec)
        return real(spec)

    monkeypatch.setattr(model_registry, "resolve_model", spy)
    script = tmp_path / "main.json"
    script.write_text('[{"text": "one"}, {"text": "two"}]')
    names = [f"scripted:{tmp_path}/other-{i}.json" for i in range(100)]
    async with Supervisor() as sup:
        result = await sup.run(
            "\n".join([*names, "-", f"scripted:{script}"]),
            workspace=tmp_path,
            model=f"scripted:{script}",
            command=NAMES_MODELS,
        )
    got = outcomes(result.summary)
    assert all(line.startswith("error") for line in got[:100])
    # The run's own model, unnamed or named by the string the parent configured, still works.
    assert got[100:] == ["ok one", "ok two"]
    assert resolved == [f"scripted:{script}"]  # once, before the spawn


async def test_the_callers_model_wins_over_the_definitions_and_serves_the_name_the_child_knows(
    tmp_path: Path,
) -> None:
    mine = ScriptedModel.from_json('[{"text": "callers model"}, {"text": "again"}]')
    definition = AgentDefinition(type="general", model="openai:gpt-never-built")
    async with Supervisor() as sup:
        result = await sup.run(
            "openai:gpt-never-built\nmain",
            workspace=tmp_path,
            agent=definition,
            model=mine,
            command=NAMES_MODELS,
        )
    assert outcomes(result.summary) == ["ok callers model", "ok again"]


async def test_the_definitions_compaction_model_is_resolved_by_the_parent_and_selectable(
    tmp_path: Path,
) -> None:
    summaries = tmp_path / "summaries.json"
    summaries.write_text('[{"text": "first"}, {"text": "second"}]')
    definition = AgentDefinition(type="general", compaction_model=f"scripted:{summaries}")
    async with Supervisor() as sup:
        result = await sup.run(
            f"compaction\nscripted:{summaries}",
            workspace=tmp_path,
            agent=definition,
            model=ScriptedModel.from_json('[{"text": "main"}]'),
            command=NAMES_MODELS,
        )
    # Named as a role or by the string the parent configured: the same parent-built provider.
    assert outcomes(result.summary) == ["ok first", "ok second"]


@pytest.mark.in_memory
async def test_a_fifo_given_as_the_runs_own_model_script_is_bad_usage_not_a_hang(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    async with Supervisor(IN_MEMORY) as sup:
        with anyio.fail_after(10), pytest.raises(ValueError, match="not a regular file"):
            await sup.run("go", workspace=tmp_path, model=f"scripted:{fifo}")
