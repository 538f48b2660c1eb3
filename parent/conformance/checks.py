"""The checks of `tether conformance`: what protocol v1 requires of any child, one check each.

A check gets a fresh child (`wire.Wire`), drives it with deadlines on every wait, and passes
when it returns; it fails with `CheckFailed` carrying a sentence that says what the child did
wrong. The suite (`suite.py`) runs them and reports one line each.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

from tether.parent.conformance.wire import (
    REPLY_TIMEOUT,
    CheckFailed,
    Reply,
    Wire,
    describe,
    describe_status,
    show,
    typed_result,
)
from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES, ErrorCode, RequestId
from tether.protocol.codec import ErrorResponse, Response
from tether.protocol.connection import RequestReceived
from tether.protocol.messages import (
    PROTOCOL_VERSION,
    AgentCancelParams,
    AgentDefinition,
    AgentEventParams,
    AgentMessageParams,
    AgentRunParams,
    ChatMessage,
    InitializeParams,
    InitializeResult,
    ModelCompleteParams,
    ModelCompleteResult,
    PeerInfo,
    RunResult,
    ToolCall,
    Usage,
)

RUN_TIMEOUT = 15.0
"""How long a scripted run, or a cancelled one, has to answer `agent/run`."""
EOF_EXIT_TIMEOUT = 1.0
EXIT_TIMEOUT = 2.0
QUIET_AFTER = 0.2
"""After the last expected reply, how long the kit listens for replies that should not come."""
MAX_CAP_TESTED = 256 * 1024 * 1024
COMPLETE_SUMMARY = "conformance: the scripted task is done"
SUPPORTED_BOGUS_VERSION = 999


# --- what the kit says and expects -------------------------------------------------------------


def init_params(version: int = PROTOCOL_VERSION) -> InitializeParams:
    return InitializeParams(
        protocol_version=version,
        client_info=PeerInfo(name="tether-conformance", version="1"),
        max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES,
    )


def completing(
    paths: Sequence[str] = (), *, summary: str = COMPLETE_SUMMARY
) -> Callable[[ModelCompleteParams], Awaitable[ModelCompleteResult]]:
    """A model of one turn that calls `complete` with a known summary and these paths."""
    call_id = "conformance-call-1" if summary == COMPLETE_SUMMARY else "conformance-call-2"

    async def model(params: ModelCompleteParams) -> ModelCompleteResult:
        call = ToolCall(
            id=call_id,
            name="complete",
            arguments={"summary": summary, "paths": list(paths)},
        )
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="Done.", tool_calls=[call]),
            usage=Usage(input_tokens=3, output_tokens=2),
            stop_reason="tool_use",
        )

    return model


scripted_complete = completing()


async def never_complete(params: ModelCompleteParams) -> ModelCompleteResult:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def initialize(w: Wire) -> InitializeResult:
    got: InitializeResult = await w.result("initialize", init_params())
    return got


def expect_error(reply: Reply, code: ErrorCode, after: str) -> ErrorResponse:
    if isinstance(reply, Response):
        raise CheckFailed(
            f"{after} was answered with a result ({show(reply.result)}), not error "
            f"{int(code)} {code.name}"
        )
    if reply.error.code != code:
        raise CheckFailed(
            f"{after} was answered with error {reply.error.code} ({reply.error.message!r}), "
            f"not {int(code)} {code.name}"
        )
    return reply


async def error_with_null_id(
    w: Wire, code: ErrorCode, sent_id: RequestId | None, what: str
) -> ErrorResponse:
    """Wait for the error answering a line whose id the child may not be able to read: its id
    must be `null`, or the id the line carried when it had one."""
    allowed: set[Any] = {None, sent_id}

    def match(r: Reply) -> bool:
        return r.id in allowed

    reply: Reply = await w.wait_for(
        lambda: w.take_reply(match), f"no answer to {what}", REPLY_TIMEOUT
    )
    return expect_error(reply, code, what)


async def still_serves(w: Wire, after: str) -> None:
    """A `ping` right after something unusual must still get `{}`."""
    reply = await w.reply(await w.request("ping"), f"a ping sent after {after}")
    typed_result("ping", reply)


def run_params(run_id: str, workspace: str) -> AgentRunParams:
    return AgentRunParams(
        run_id=run_id,
        prompt="Call the complete tool to finish this conformance task.",
        description="conformance",
        workspace=workspace,
        agent=AgentDefinition(type="general", max_iterations=4),
    )


def run_events(w: Wire, run_id: str) -> list[AgentEventParams]:
    return [
        n.params
        for n in w.notifications
        if isinstance(n.params, AgentEventParams) and n.params.run_id == run_id
    ]


def model_requests(w: Wire) -> list[RequestReceived]:
    return [r for r in w.requests if r.method == "model/complete"]


# --- the checks -----------------------------------------------------------------------------


async def check_handshake(w: Wire) -> None:
    init = await initialize(w)
    if init.protocol_version != PROTOCOL_VERSION:
        raise CheckFailed(
            f"initialize answered protocolVersion {init.protocol_version}, not {PROTOCOL_VERSION}"
        )
    if not init.server_info.name:
        raise CheckFailed("initialize answered an empty serverInfo.name")
    if init.pid <= 0:
        raise CheckFailed(f"initialize answered pid {init.pid}, not a process id")
    if init.max_message_bytes < 1:
        raise CheckFailed(f"initialize announced maxMessageBytes {init.max_message_bytes}")
    await still_serves(w, "initialize")


async def check_unsupported_version(w: Wire) -> None:
    what = f"initialize with protocolVersion {SUPPORTED_BOGUS_VERSION}"
    reply = await w.call("initialize", init_params(SUPPORTED_BOGUS_VERSION))
    err = expect_error(reply, ErrorCode.UNSUPPORTED_VERSION, what)
    data = err.error.data
    versions = data.get("supportedVersions") if isinstance(data, dict) else None
    if not isinstance(versions, list) or PROTOCOL_VERSION not in versions:
        raise CheckFailed(
            f"the UNSUPPORTED_VERSION error carries data {data!r}, not "
            f"{{'supportedVersions': [...{PROTOCOL_VERSION}...]}}"
        )
    # A refused handshake leaves the child uninitialized: the parent may retry.
    await initialize(w)
    await still_serves(w, "a refused and a retried initialize")


async def check_already_initialized(w: Wire) -> None:
    await initialize(w)
    reply = await w.call("initialize", init_params())
    expect_error(reply, ErrorCode.ALREADY_INITIALIZED, "a second initialize")
    await still_serves(w, "a second initialize")


async def check_not_initialized(w: Wire) -> None:
    reply = await w.call("ping")
    expect_error(reply, ErrorCode.NOT_INITIALIZED, "a ping before initialize")
    await initialize(w)
    await still_serves(w, "a refused ping and initialize")


async def check_ping(w: Wire) -> None:
    await initialize(w)
    for _ in range(3):
        reply = await w.call("ping")
        typed_result("ping", reply)
        assert isinstance(reply, Response)
        if msgspec.json.decode(reply.result) != {}:
            raise CheckFailed(f"ping answered {show(reply.result)}, not {{}}")


async def check_parse_error(w: Wire) -> None:
    await initialize(w)
    await w.send(b'{"jsonrpc": "2.0", "method": "ping", "id": 7, "params": {"x": "unterminated\n')
    await error_with_null_id(w, ErrorCode.PARSE_ERROR, None, "a line that is not valid JSON")
    await still_serves(w, "malformed JSON")


async def check_invalid_request(w: Wire) -> None:
    await initialize(w)
    await w.send(
        b'{"jsonrpc": "2.0", "id": "invalid-1", "method": 42, "params": {}}\n', expect="invalid-1"
    )
    await error_with_null_id(
        w, ErrorCode.INVALID_REQUEST, "invalid-1", 'a request whose "method" is a number'
    )
    await w.send(b'{"jsonrpc": "1.0", "id": "invalid-2", "method": "ping"}\n', expect="invalid-2")
    await error_with_null_id(
        w, ErrorCode.INVALID_REQUEST, "invalid-2", 'a request with "jsonrpc": "1.0"'
    )
    await still_serves(w, "invalid requests")


async def check_method_not_found(w: Wire) -> None:
    await initialize(w)
    rid = await w.request("conformance/no-such-method", {})
    reply = await w.reply(rid, "a request for an unknown method")
    expect_error(reply, ErrorCode.METHOD_NOT_FOUND, "a request for an unknown method")
    await still_serves(w, "an unknown method")


async def check_invalid_params(w: Wire) -> None:
    await initialize(w)
    rid = await w.request("agent/run", {"runId": 7, "workspace": ["not", "a", "path"]})
    reply = await w.reply(rid, "agent/run with params that do not fit its schema")
    expect_error(reply, ErrorCode.INVALID_PARAMS, "agent/run with a numeric runId and no prompt")
    await still_serves(w, "invalid params")


async def check_notifications_get_no_reply(w: Wire) -> None:
    await initialize(w)
    await w.notify("conformance/no-such-notification", {"x": 1})
    await w.notify("agent/cancel", AgentCancelParams(run_id="conformance-no-such-run"))
    await still_serves(w, "two notifications")
    await anyio.sleep(QUIET_AFTER)
    extra = w.pending_replies()
    if extra:
        raise CheckFailed(f"a notification was answered: {describe(extra[0])}")


async def check_run(w: Wire) -> None:
    await initialize(w)
    run_id = "conformance-run-1"
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as ws:
        rid = await w.request("agent/run", run_params(run_id, ws))
        reply = await w.reply(
            rid, "agent/run (the kit's model answers a turn calling complete)", RUN_TIMEOUT
        )
    asked = model_requests(w)
    if not asked:
        raise CheckFailed("the run ended without asking the parent for a model turn")
    for req in asked:
        params: ModelCompleteParams = req.params
        if params.run_id != run_id:
            raise CheckFailed(f"model/complete named runId {params.run_id!r}, not {run_id!r}")
        if not params.messages:
            raise CheckFailed("model/complete sent no messages")
    result: RunResult = typed_result("agent/run", reply)
    if not (result.success and result.status == "completed"):
        raise CheckFailed(
            f"the run answered success={result.success} status={result.status!r} "
            f"({result.message!r}), not a completed run"
        )
    if result.summary != COMPLETE_SUMMARY:
        raise CheckFailed(
            f"the run's summary is {result.summary!r}, not the one passed to complete "
            f"({COMPLETE_SUMMARY!r})"
        )
    events = run_events(w, run_id)
    if not events:
        raise CheckFailed("the run sent no agent/event notifications")
    seqs = [e.seq for e in events]
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        raise CheckFailed(f"agent/event seq does not increase: {seqs[:20]}")


ARTIFACT_TEXT = b"written by the conformance kit\n"


def _artifact_workspace(tmp: str) -> str:
    """`tmp/workspace` holding `conformance.txt` and `sub/`, next to `tmp/outside.txt`."""
    ws = os.path.join(tmp, "workspace")
    os.makedirs(os.path.join(ws, "sub"))
    with open(os.path.join(ws, "conformance.txt"), "wb") as f:
        f.write(ARTIFACT_TEXT)
    with open(os.path.join(tmp, "outside.txt"), "wb") as f:
        f.write(b"outside the workspace\n")
    return ws


async def check_artifacts(w: Wire) -> None:
    paths = ["conformance.txt", "sub", "missing.txt", "../outside.txt"]
    w.model = completing(paths)
    await initialize(w)
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as tmp:
        ws = _artifact_workspace(tmp)
        rid = await w.request("agent/run", run_params("conformance-artifacts-1", ws))
        reply = await w.reply(rid, f"agent/run (complete with paths {paths})", RUN_TIMEOUT)
    result: RunResult = typed_result("agent/run", reply)
    if not result.success:
        raise CheckFailed(f"the run failed ({result.message!r}) instead of completing")
    real_ws = os.path.realpath(ws)
    got = sorted((a.path, a.fs_type) for a in result.artifacts)
    want = sorted(
        (os.path.join(root, name), kind)
        for root in {ws, real_ws}
        for name, kind in (("conformance.txt", "file"), ("sub", "directory"))
    )
    if not got or not set(got) <= set(want) or len(got) != 2:
        raise CheckFailed(
            f"complete({paths}) gave artifacts {got}, not the absolute paths of conformance.txt "
            f"and sub/ under the workspace {real_ws}"
        )
    size = next(a.size for a in result.artifacts if a.fs_type == "file")
    if size != len(ARTIFACT_TEXT):
        raise CheckFailed(f"the artifact's size is {size}, not {len(ARTIFACT_TEXT)}")
    skipped = sorted(s.path for s in result.skipped)
    if skipped != sorted(paths[2:]):
        raise CheckFailed(f"complete({paths}) skipped {skipped}, not {sorted(paths[2:])}")


async def check_cancel(w: Wire) -> None:
    w.model = never_complete
    await initialize(w)
    run_id = "conformance-cancel-1"
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as ws:
        rid = await w.request("agent/run", run_params(run_id, ws))
        await w.wait_for(
            lambda: model_requests(w) or w.take_reply(lambda r: r.id == rid),
            "the run did not ask for a model turn",
            RUN_TIMEOUT,
        )
        early = w.take_reply(lambda r: r.id == rid)
        if early is not None:
            raise CheckFailed(f"agent/run ended before its model turn: {describe(early)}")
        await w.notify("agent/cancel", AgentCancelParams(run_id=run_id, reason="conformance"))
        reply = await w.reply(rid, "agent/run after agent/cancel", RUN_TIMEOUT)
    result: RunResult = typed_result("agent/run", reply)
    if result.status != "aborted" or result.success:
        raise CheckFailed(
            f"the cancelled run answered success={result.success} status={result.status!r}, "
            "not success=false status='aborted'"
        )
    await still_serves(w, "a cancelled run")


async def check_byte_cap(w: Wire) -> None:
    init = await initialize(w)
    cap = init.max_message_bytes
    if cap > MAX_CAP_TESTED:
        raise CheckFailed(
            f"the child announces a {cap}-byte cap; the kit tests up to {MAX_CAP_TESTED}"
        )
    # A line of exactly the cap is a message like any other.
    await w.send(_padded_ping("at-cap", cap), expect="at-cap", method="ping")
    reply = await w.reply("at-cap", f"a ping line of exactly the announced {cap} bytes", 30.0)
    typed_result("ping", reply)
    # One byte more is refused with MESSAGE_TOO_LARGE, and the child reads on.
    await w.send(_padded_ping("over-cap", cap + 1), expect="over-cap", method="ping")
    err = await error_with_null_id(
        w, ErrorCode.MESSAGE_TOO_LARGE, "over-cap", f"a line of {cap + 1} bytes (cap {cap})"
    )
    del err
    await still_serves(w, "an oversized line")
    if w.take_reply(lambda r: r.id == "over-cap"):
        raise CheckFailed("the oversized line was also answered as a request")


def _padded_ping(rid: str, size: int) -> bytes:
    head = b'{"jsonrpc":"2.0","id":"' + rid.encode() + b'","method":"ping","params":{"pad":"'
    tail = b'"}}'
    pad = size - len(head) - len(tail)
    assert pad >= 0
    return head + b"x" * pad + tail + b"\n"


async def check_shutdown_exit(w: Wire) -> None:
    await initialize(w)
    reply = await w.call("shutdown")
    if isinstance(reply, ErrorResponse):
        raise CheckFailed(f"shutdown was answered with error {reply.error.code}")
    if bytes(reply.result).strip() != b"null":
        raise CheckFailed(f"shutdown answered {show(reply.result)}, not null")
    await w.notify("exit")
    status = await w.wait_exit(EXIT_TIMEOUT)
    if status is None:
        raise CheckFailed(f"the child was still running {EXIT_TIMEOUT:g}s after shutdown and exit")
    if status != 0:
        raise CheckFailed(f"after shutdown and exit the child ended with {describe_status(status)}")


async def check_eof_exit(w: Wire) -> None:
    await initialize(w)
    w.close_stdin()
    status = await w.wait_exit(EOF_EXIT_TIMEOUT)
    if status is None:
        raise CheckFailed(f"the child was still running {EOF_EXIT_TIMEOUT:g}s after stdin EOF")


async def check_stdout_is_protocol(w: Wire) -> None:
    """A whole session; `run_suite` adds what every earlier check saw on stdout."""
    await initialize(w)
    await still_serves(w, "initialize")
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as ws:
        rid = await w.request("agent/run", run_params("conformance-stdout-1", ws))
        await w.reply(rid, "agent/run", RUN_TIMEOUT)
    await w.call("shutdown")
    await w.notify("exit")
    await w.wait_exit(EXIT_TIMEOUT)
    with anyio.move_on_after(1.0):
        await w.wait_for(lambda: w.stdout_closed, "", 1.0)


FOLLOW_UP = "conformance: one more thing, then call complete again."
FOLLOW_UP_SUMMARY = "conformance: the follow-up is done"


def continuable_params(run_id: str, workspace: str) -> AgentRunParams:
    return msgspec.structs.replace(run_params(run_id, workspace), continuable=True)


async def check_message_continues(w: Wire) -> None:
    """`agent/message` continues a finished continuable run on its own transcript (a child
    announcing `agentMessage: true`); one announcing `false` refuses it with UNKNOWN_RUN."""
    init = await initialize(w)
    if not init.capabilities.agent_message:
        reply = await w.call(
            "agent/message", AgentMessageParams(run_id="conformance-never-run", message="hi")
        )
        expect_error(
            reply,
            ErrorCode.UNKNOWN_RUN,
            "agent/message for a run that never started (the child announced agentMessage: false)",
        )
        return
    run_id = "conformance-continue-1"
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as ws:
        rid = await w.request("agent/run", continuable_params(run_id, ws))
        first: RunResult = typed_result(
            "agent/run", await w.reply(rid, "agent/run with continuable: true", RUN_TIMEOUT)
        )
        if not (first.success and first.status == "completed"):
            raise CheckFailed(
                f"the continuable run answered status={first.status!r} ({first.message!r}), "
                "not a completed run"
            )
        before = len(model_requests(w))
        events_before = len(run_events(w, run_id))
        w.model = completing(summary=FOLLOW_UP_SUMMARY)
        rid = await w.request("agent/message", AgentMessageParams(run_id=run_id, message=FOLLOW_UP))
        reply = await w.reply(rid, "agent/message for the finished continuable run", RUN_TIMEOUT)
    result: RunResult = typed_result("agent/message", reply)
    asked = [r.params for r in model_requests(w)[before:]]
    if not asked:
        raise CheckFailed("the follow-up was answered without a model turn")
    sent: list[ChatMessage] = asked[0].messages
    if asked[0].run_id != run_id:
        raise CheckFailed(f"the follow-up's model/complete named runId {asked[0].run_id!r}")
    prompt = run_params(run_id, "").prompt
    if not any(m.role == "user" and m.content == prompt for m in sent):
        raise CheckFailed(
            "the follow-up's model turn does not carry the run's prompt: it did "
            "not continue the run's transcript"
        )
    if not any(c.id == "conformance-call-1" for m in sent for c in m.tool_calls):
        raise CheckFailed(
            "the follow-up's model turn does not carry the first activation's "
            "complete call: it did not continue the run's transcript"
        )
    if not (sent[-1].role == "user" and sent[-1].content == FOLLOW_UP):
        raise CheckFailed("the follow-up's model turn does not end with the message sent")
    if not (result.success and result.status == "completed"):
        raise CheckFailed(
            f"the follow-up answered status={result.status!r} ({result.message!r}), not a "
            "completed run"
        )
    if result.summary != FOLLOW_UP_SUMMARY:
        raise CheckFailed(
            f"the follow-up's summary is {result.summary!r}, not the one passed to complete"
        )
    seqs = [e.seq for e in run_events(w, run_id)]
    earlier, later = seqs[:events_before], seqs[events_before:]
    if not later:
        raise CheckFailed("the follow-up sent no agent/event notifications")
    # One numbering per run: a follow-up's events go on from the run's (the `run` check is
    # the one about seq increasing at all).
    if earlier and max(earlier) > 0 and later[0] <= max(earlier):
        raise CheckFailed(
            f"the follow-up's agent/event seq starts again at {later[0]} after {max(earlier)}: "
            "a run's events are numbered once, across its activations"
        )


async def check_message_refusals(w: Wire) -> None:
    """`agent/message` to a run still in progress is RUN_BUSY; to a run that was not
    continuable, or never started, UNKNOWN_RUN."""
    gate = anyio.Event()

    async def gated(params: ModelCompleteParams) -> ModelCompleteResult:
        await gate.wait()
        return await scripted_complete(params)

    w.model = gated
    await initialize(w)
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as ws:
        live = "conformance-live-1"
        rid = await w.request("agent/run", continuable_params(live, ws))
        await w.wait_for(
            lambda: model_requests(w) or w.take_reply(lambda r: r.id == rid),
            "the run did not ask for a model turn",
            RUN_TIMEOUT,
        )
        early = w.take_reply(lambda r: r.id == rid)
        if early is not None:
            raise CheckFailed(f"agent/run ended before its model turn: {describe(early)}")
        busy = await w.call("agent/message", AgentMessageParams(run_id=live, message="hurry"))
        expect_error(busy, ErrorCode.RUN_BUSY, "agent/message for a run still in progress")
        gate.set()
        typed_result("agent/run", await w.reply(rid, "agent/run", RUN_TIMEOUT))

        plain = "conformance-plain-1"
        rid = await w.request("agent/run", run_params(plain, ws))
        typed_result("agent/run", await w.reply(rid, "agent/run", RUN_TIMEOUT))
    for run_id, what in (
        (plain, "agent/message for a finished run that was not continuable"),
        ("conformance-never-run", "agent/message for a run that never started"),
    ):
        reply = await w.call("agent/message", AgentMessageParams(run_id=run_id, message="more"))
        expect_error(reply, ErrorCode.UNKNOWN_RUN, what)
    await still_serves(w, "refused messages")


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Wire], Awaitable[None]]
    summary: str


CHECKS: tuple[Check, ...] = (
    Check("handshake", check_handshake, "initialize v1 answers version, serverInfo and pid"),
    Check(
        "unsupported-version",
        check_unsupported_version,
        "a version it does not speak gets UNSUPPORTED_VERSION with supportedVersions",
    ),
    Check("already-initialized", check_already_initialized, "a second initialize is refused"),
    Check("not-initialized", check_not_initialized, "a request before initialize is refused"),
    Check("ping", check_ping, "ping answers {}"),
    Check("parse-error", check_parse_error, "malformed JSON gets -32700 with id null"),
    Check("invalid-request", check_invalid_request, "an invalid envelope gets -32600"),
    Check("method-not-found", check_method_not_found, "an unknown method gets -32601"),
    Check("invalid-params", check_invalid_params, "params off the schema get -32602"),
    Check(
        "notifications-unanswered",
        check_notifications_get_no_reply,
        "notifications, known or not, get no reply",
    ),
    Check("run", check_run, "agent/run brokers model/complete and streams ordered events"),
    Check(
        "artifacts",
        check_artifacts,
        "complete's paths become artifacts (absolute, under the workspace) or skipped ones",
    ),
    Check("cancel", check_cancel, "agent/cancel makes the pending run answer aborted"),
    Check(
        "message-continues",
        check_message_continues,
        "agent/message continues a continuable run on its transcript (agentMessage: true)",
    ),
    Check(
        "message-refusals",
        check_message_refusals,
        "agent/message to a live run is RUN_BUSY, to an unknown or plain one UNKNOWN_RUN",
    ),
    Check("byte-cap", check_byte_cap, "a line over maxMessageBytes gets MESSAGE_TOO_LARGE"),
    Check("shutdown-exit", check_shutdown_exit, "shutdown answers null, exit ends with status 0"),
    Check("eof-exit", check_eof_exit, f"stdin EOF ends the child within {EOF_EXIT_TIMEOUT:g}s"),
    Check("stdout-protocol-only", check_stdout_is_protocol, "nothing but protocol on stdout"),
)
CHECK_NAMES: tuple[str, ...] = tuple(c.name for c in CHECKS)
