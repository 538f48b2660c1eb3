"""The replay model on its own: which recorded answer a request gets, what counts as the same
request, and what a divergence says. Pure: recorded runs built here, no process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.models import absolute_model, resolve_model
from tether.parent.models.replay import TraceModel, canonical, first_difference
from tether.parent.trace.format import (
    Header,
    Stopped,
    Turn,
    TurnError,
    TurnRequest,
    encode,
)
from tether.parent.trace.reader import RecordedRun, TraceError, read_trace
from tether.protocol import ErrorCode, RemoteError
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolSpec,
)

WS = "/srv/recorded-ws"


def header(run_id: str, workspace: str = WS) -> Header:
    return Header(
        run_id=run_id,
        wall=1.0,
        mono=1.0,
        tether_version="0",
        protocol_version=1,
        agent="explorer",
        definition=AgentDefinition(type="explorer"),
        prompt="p",
        workspace=workspace,
        provider="spawn",
    )


def msgs(*texts: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=t) for t in texts]


def answer(text: str) -> ModelCompleteResult:
    return ModelCompleteResult(message=ChatMessage(role="assistant", content=text))


def turn(run_id: str, index: int, texts: list[str], reply: str | None, **kw: object) -> Turn:
    return Turn(
        run_id=run_id,
        wall=1.0,
        mono=1.0,
        index=index,
        request=TurnRequest(messages=msgs(*texts)),
        response=answer(reply) if reply is not None else None,
        **kw,  # type: ignore[arg-type]
    )


def run(run_id: str, *lines: object, workspace: str = WS) -> RecordedRun:
    return RecordedRun(header(run_id, workspace), f"{run_id}.jsonl", list(lines))  # type: ignore[arg-type]


def ask(run_id: str, *texts: str) -> ModelCompleteParams:
    return ModelCompleteParams(run_id=run_id, messages=msgs(*texts))


pytestmark = pytest.mark.anyio


async def test_calls_asked_at_once_get_their_own_answers_whatever_the_order() -> None:
    model = TraceModel(
        [run("r", turn("r", 1, ["a"], "A"), turn("r", 2, ["b"], "B"), turn("r", 3, ["c"], "C"))]
    )
    model.bind_run("x", WS)
    got = [await model.complete(ask("x", t)) for t in ("a", "c", "b")]
    assert [g.message.content for g in got] == ["A", "C", "B"]


async def test_runs_with_the_same_first_request_take_the_recorded_runs_in_turn() -> None:
    model = TraceModel(
        [
            run("one", turn("one", 1, ["go"], "first"), turn("one", 2, ["go", "more"], "1b")),
            run("two", turn("two", 1, ["go"], "second")),
        ]
    )
    assert (await model.complete(ask("x", "go"))).message.content == "first"
    assert (await model.complete(ask("y", "go"))).message.content == "second"
    assert (await model.complete(ask("x", "go", "more"))).message.content == "1b"
    with pytest.raises(RemoteError, match=r"every run of the trace \(2\) is replayed already"):
        await model.complete(ask("z", "go"))


async def test_a_model_error_is_answered_again_and_a_parent_refusal_is_left_to_the_parent() -> None:
    failed = TurnError(code=int(ErrorCode.MODEL_ERROR), message="API down", by="model")
    refused = TurnError(code=int(ErrorCode.BUDGET_EXHAUSTED), message="spent", by="parent")
    model = TraceModel(
        [
            run(
                "r",
                turn("r", 1, ["a"], "A"),
                turn("r", 2, ["b"], None, error=refused),
                turn("r", 3, ["b"], None, error=failed),
            )
        ]
    )
    await model.complete(ask("x", "a"))
    with pytest.raises(RemoteError) as got:
        await model.complete(ask("x", "b"))
    assert (got.value.code, got.value.message) == (ErrorCode.MODEL_ERROR, "API down")
    assert model.divergences == []


async def test_a_call_past_a_trace_that_stopped_says_the_trace_stopped_and_why() -> None:
    stopped = Stopped(
        run_id="r", wall=1.0, mono=1.0, reason="the trace reached its size limit", bytes=9
    )
    model = TraceModel([run("r", turn("r", 1, ["a"], "A"), stopped)])
    await model.complete(ask("x", "a"))
    with pytest.raises(
        RemoteError, match=r"asked for call 2; the recorded run r \(explorer\) made 1"
    ):
        await model.complete(ask("x", "a", "b"))
    assert "before its trace stopped (the trace reached its size limit)" in model.divergences[0]


async def test_the_workspace_path_and_file_times_are_set_aside_and_nothing_else() -> None:
    recorded = json.dumps({"path": f"{WS}/out.txt", "modifiedAt": "2026-01-01T00:00:00+00:00"})
    now = json.dumps({"path": "/tmp/copy/out.txt", "modifiedAt": "2026-12-06T05:00:00+00:00"})
    model = TraceModel([run("r", turn("r", 1, [f"in {WS}", recorded], "same"))])
    model.bind_run("x", "/tmp/copy/")
    assert (await model.complete(ask("x", "in /tmp/copy", now))).message.content == "same"
    model = TraceModel([run("r", turn("r", 1, [recorded], "same"))])
    model.bind_run("y", "/tmp/copy")
    other = json.dumps({"path": "/tmp/copy/out.txt", "modifiedAt": "x", "size": 1})
    with pytest.raises(RemoteError, match=r"messages\[0\]\.content, character 50"):
        await model.complete(ask("y", other))


paths = st.from_regex(r"/[a-z]{1,8}(/[a-z0-9_-]{1,8}){0,3}", fullmatch=True)


# What a request can hold: the wire refuses lone surrogates.
words = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/"), max_size=20)


@given(texts=st.lists(words, min_size=1, max_size=4), a=paths, b=paths)
def test_a_request_is_the_same_wherever_its_workspace_lies(
    texts: list[str], a: str, b: str
) -> None:
    def at(root: str) -> list[ChatMessage]:
        return msgs(
            *(f"{t} {root}/f\n{root}\t{json.dumps({'p': root + '/g', 'q': t})}" for t in texts)
        )

    tools = [ToolSpec(name="t", description=f"under {a}")]
    assert canonical("turn", at(a), tools, a) == canonical(
        "turn", at(b), [ToolSpec(name="t", description=f"under {b}")], b
    )


def test_the_first_difference_is_named_by_its_place_and_shown_on_both_sides() -> None:
    a = canonical("turn", msgs("hello world", "x"), [ToolSpec(name="t")], None)
    b = canonical("turn", msgs("hello there", "x"), [ToolSpec(name="t")], None)
    c = canonical("turn", msgs("hello world"), [ToolSpec(name="t")], None)
    d = canonical("compaction", msgs("hello world", "x"), [], None)
    assert first_difference(a, b) == (
        "messages[0].content, character 7: recorded 'hello world', now 'hello there'"
    )
    assert first_difference(a, c) == "messages: recorded 2 item(s), now 1"
    assert first_difference(a, d).startswith("purpose, character 1: recorded 'turn'")
    assert first_difference(a, a) == "nowhere (the requests are the same)"


async def test_scripted_trace_names_a_trace_and_reads_it_with_its_linked_sub_agents(
    tmp_path: Path,
) -> None:
    (tmp_path / "root.jsonl").write_bytes(
        encode(header("root")) + encode(turn("root", 1, ["a"], "A"))
    )
    sub = header("sub")
    (tmp_path / "sub.jsonl").write_bytes(
        encode(Header(**{**_fields(sub), "parent_run_id": "root"}))
        + encode(turn("sub", 1, ["s"], "S"))
    )
    (tmp_path / "other.jsonl").write_bytes(encode(header("other")))
    model = resolve_model(f"scripted:trace:{tmp_path / 'root.jsonl'}")
    assert isinstance(model, TraceModel)
    assert [r.run_id for r in model.runs] == ["root", "sub"]
    assert (await model.complete(ask("x", "s"))).message.content == "S"
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert (
            absolute_model("scripted:trace:root.jsonl") == f"scripted:trace:{tmp_path}/root.jsonl"
        )
    finally:
        os.chdir(here)


def _fields(h: Header) -> dict[str, object]:
    return {f: getattr(h, f) for f in h.__struct_fields__}


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (b"", "no header line"),
        (b'{"kind":"turn"}\n', "line 1: not a trace line"),
        (b"not json\n", "line 1: not a trace line"),
        (encode(turn("r", 1, ["a"], "A")), "a line of run 'r' before its header"),
    ],
)
def test_a_file_that_is_not_a_trace_is_refused_naming_the_line(
    tmp_path: Path, content: bytes, complaint: str
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=complaint):
        read_trace(path)


async def test_a_fifo_named_as_a_trace_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with anyio.fail_after(5), pytest.raises(ValueError, match="is not a regular file"):
        await anyio.to_thread.run_sync(resolve_model, f"scripted:trace:{fifo}")
