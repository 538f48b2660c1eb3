"""`tether agents list|show|send` over a session database: what a person reads (the child's
words cleaned for a terminal), what a script reads (`--json`), and the exit statuses."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agent_models import Commanded

from tether.parent import Supervisor

HOSTILE = "\x1b]0;pwned\x07done \x1b[31mred\x1b[0m \u202egnp.exe"


def tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.parent.cli", "agents", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, Path]:
    def script(name: str, summary: str) -> Path:
        path = tmp_path / f"{name}.json"
        call = {"name": "complete", "arguments": {"summary": summary}}
        path.write_text(json.dumps([{"text": summary, "toolCalls": [call]}]))
        return path

    return {"first": script("first", HOSTILE), "again": script("again", "resumed fine")}


def populate(state: Path, workspace: Path, model: Any, **kwargs: Any) -> str:
    async def go() -> str:
        async with Supervisor(state_dir=state) as sup:
            agent = await sup.spawn_agent(
                "look around",
                agent="explorer",
                workspace=workspace,
                model=model,
                keep_alive=0,
                **kwargs,
            )
            await agent.result()
            return agent.id

    return anyio.run(go)


def test_list_and_show_print_the_agents_with_the_childs_words_cleaned(
    state: Path, workspace: Path, scripts: dict[str, Path]
) -> None:
    agent_id = populate(state, workspace, f"scripted:{scripts['first']}", label="survey \x1b[2J")
    listed = tether("list", "--state", str(state))
    assert listed.returncode == 0, listed.stderr
    assert agent_id in listed.stdout and "idle" in listed.stdout and "survey" in listed.stdout
    shown = tether("show", agent_id, "--state", str(state))
    assert shown.returncode == 0, shown.stderr
    assert "done red" in shown.stdout and "complete(" in shown.stdout
    for out in (listed.stdout, shown.stdout):
        assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out

    as_json = json.loads(tether("list", "--state", str(state), "--json").stdout)
    assert [a["id"] for a in as_json] == [agent_id]
    assert as_json[0]["lastSummary"] == HOSTILE  # JSON carries the stored text as it is
    detail = json.loads(tether("show", agent_id, "--state", str(state), "--json").stdout)
    assert [m["role"] for m in detail["transcript"]] == ["user", "assistant", "tool"]
    nothing = tether("list", "--state", str(state / "elsewhere"))
    assert nothing.returncode == 0 and nothing.stdout.startswith("no agents")
    assert not (state / "elsewhere").exists()


def test_send_resumes_an_agent_cold_with_its_stored_model(
    state: Path, workspace: Path, scripts: dict[str, Path]
) -> None:
    agent_id = populate(state, workspace, f"scripted:{scripts['first']}")
    # The stored model is scripts["first"]; a different script for the resume proves --model.
    sent = tether(
        "send",
        agent_id,
        "anything else?",
        "--state",
        str(state),
        "--model",
        f"scripted:{scripts['again']}",
    )
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("completed: resumed fine")
    again = tether("send", agent_id, "and now?", "--state", str(state), "--json", "--quiet")
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["success"] and result["summary"] == HOSTILE and again.stderr == ""
    [summary] = json.loads(tether("list", "--state", str(state), "--json").stdout)
    assert summary["activations"] == 3 and summary["messageCount"] == 9


def test_send_refuses_bad_ids_unknown_agents_and_agents_it_has_no_model_for(
    state: Path, workspace: Path
) -> None:
    agent_id = populate(state, workspace, Commanded())  # a model object: nothing to store
    no_model = tether("send", agent_id, "hi", "--state", str(state))
    assert no_model.returncode == 2 and "resume it with a model" in no_model.stderr
    garbled = tether("send", "ag_\x1b[31m", "hi", "--state", str(state))
    assert garbled.returncode == 2 and "not an agent id" in garbled.stderr
    assert "\x1b" not in garbled.stderr
    unknown = tether("send", "ag_" + "2" * 20, "hi", "--state", str(state))
    assert unknown.returncode == 2 and "no agent ag_2222" in unknown.stderr


def test_send_to_an_agent_busy_in_another_process_exits_3(hosts: Any, state: Path) -> None:
    host = hosts.start()
    host.ask(op="spawn", prompt="first", keepAlive=60)
    agent_id = host.answer()["id"]
    busy = tether("send", agent_id, "hi", "--state", str(state), "--model", "scripted:/nonexistent")
    assert busy.returncode == 3, busy.stderr
    assert f"owner pid {host.proc.pid}" in busy.stderr
    assert host.finish() == 0


# --- a cold resume trusts nothing the state directory says about where keys go -----------------


class Listener:
    """A TCP listener on 127.0.0.1 that records whatever connects."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]

    def heard(self) -> list[bytes]:
        got = []
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return got
            with conn:
                conn.settimeout(1)
                got.append(conn.recv(65536))


@pytest.fixture
def listener() -> Iterator[Listener]:
    got = Listener()
    yield got
    got.sock.close()


def rewrite_stored(state: Path, agent_id: str, **changes: Any) -> None:
    """What a process that could write the state directory may do to an agent's session."""
    db = sqlite3.connect(state / "sessions.sqlite3")
    try:
        for column, values in changes.items():
            query = f"SELECT {column} FROM agents WHERE id = ?"
            (stored,) = db.execute(query, (agent_id,)).fetchone()
            data = {**json.loads(stored), **values}
            db.execute(f"UPDATE agents SET {column} = ? WHERE id = ?", (json.dumps(data), agent_id))
        db.commit()
    finally:
        db.close()


@pytest.mark.parametrize(
    "rewritten",
    [
        {"spawn": {"model": "openai:x@http://127.0.0.1:{port}/v1"}},
        {"definition": {"compactionModel": "anthropic:y@http://127.0.0.1:{port}"}},
    ],
    ids=["model", "compaction-model"],
)
def test_send_refuses_a_stored_model_whose_base_url_this_process_was_never_given(
    state: Path,
    workspace: Path,
    scripts: dict[str, Path],
    listener: Listener,
    rewritten: dict[str, dict[str, str]],
) -> None:
    agent_id = populate(state, workspace, f"scripted:{scripts['first']}")
    url = f"http://127.0.0.1:{listener.port}"
    rewrite_stored(
        state,
        agent_id,
        **{
            col: {k: v.format(port=listener.port) for k, v in d.items()}
            for col, d in rewritten.items()
        },
    )
    keys = {"OPENAI_API_KEY": "sk-canary-1", "ANTHROPIC_API_KEY": "sk-canary-2"}
    sent = tether("send", agent_id, "hi", "--state", str(state), env=keys)
    assert sent.returncode == 2, sent.stdout + sent.stderr
    assert f"agent {agent_id} has a stored " in sent.stderr
    assert f"names the base URL {url}" in sent.stderr and "would be sent there" in sent.stderr
    assert listener.heard() == []
    if "spawn" in rewritten:
        # The user's own model wins over the stored one, and is theirs to choose.
        given = tether(
            "send", agent_id, "hi", "--state", str(state),
            "--model", f"scripted:{scripts['again']}", env=keys,
        )  # fmt: skip
        assert given.returncode == 0, given.stderr
        assert given.stdout.startswith("completed: resumed fine")
    assert listener.heard() == []


def test_send_refuses_an_agent_whose_workspace_now_holds_the_store(
    tmp_path: Path, state: Path, workspace: Path, scripts: dict[str, Path]
) -> None:
    agent_id = populate(state, workspace, f"scripted:{scripts['first']}")
    moved = workspace / "state"
    state.rename(moved)
    sent = tether("send", agent_id, "hi", "--state", str(moved))
    assert sent.returncode == 2, sent.stderr
    assert f"directory {moved} lies inside the workspace {workspace}" in sent.stderr
    [summary] = json.loads(tether("list", "--state", str(moved), "--json").stdout)
    assert summary["activations"] == 1  # nothing was started


def test_send_shows_the_question_of_an_agent_that_asks_and_how_to_answer_it(
    tmp_path: Path, state: Path, workspace: Path
) -> None:
    ask = {"name": "ask_orchestrator", "arguments": {"question": "Which \x1b[2Jfile first?"}}
    done = {"name": "complete", "arguments": {"summary": "looked"}}
    book = tmp_path / "book.json"
    book.write_text(
        json.dumps(
            {
                "scripts": [
                    {"when": "PLEASE ASK", "turns": [{"text": "", "toolCalls": [ask]}]},
                    {"turns": [{"text": "", "toolCalls": [done]}]},
                ]
            }
        )
    )
    agent_id = populate(state, workspace, f"scripted:{book}")
    sent = tether("send", agent_id, "PLEASE ASK before you go on", "--state", str(state))
    assert sent.returncode == 0, sent.stderr
    lines = sent.stdout.splitlines()
    assert lines[0] == "needs_input: Which file first?"
    assert f"answer it: tether agents send {agent_id} ANSWER --state {state}" in lines
    as_json = tether("send", agent_id, "PLEASE ASK again", "--state", str(state), "--json")
    result = json.loads(as_json.stdout)
    assert (result["status"], result["question"]) == ("needs_input", "Which \x1b[2Jfile first?")
