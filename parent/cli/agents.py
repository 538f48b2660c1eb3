"""`tether agents list|show ID|send ID MESSAGE [--state DIR]`: continuable agents from the
command line, over the same session database a supervisor uses.

    tether agents list [--status S] [--parent-run R] [--limit N] [--json]
    tether agents show ID [--tail N | --all] [--json]
    tether agents send ID MESSAGE [--model M] [--wait SECONDS] [--json] [--quiet]

`send` continues the agent in a fresh child of this process (a cold resume; the child is
disposed when the answer is in, since this process ends), with the model and settings stored
with the agent, or `--model`; an answer that asks (`needs_input`) is shown with its question
and the command that answers it. Exit status: 0 when it succeeded or asks (or for `list` and
`show`), 1 when its answer came back unsuccessful, 2 for bad usage (not an agent id, no such
agent, no model to resume it with, a stored model it does not trust, a workspace that holds the
state directory), 3 when the agent is busy in another process (try again, or `--wait`), 4 when
the session store cannot be used (a full, read-only or damaged store, one written by a newer
tether, or one owned by someone else or open to others: one line says which file and what to
do).
A child's words (labels, summaries, questions, reports, transcripts) are cleaned for the
terminal; `--json` prints the records as they are stored, with camelCase keys like the wire
protocol's. `list` and `show` never create a database.
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from tether.parent.agents.sessions import AgentDetail, AgentSummary
    from tether.protocol.messages import ChatMessage

EXIT_BUSY = 3
EXIT_STORE = 4
SHOWN_TAIL = 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state",
        metavar="DIR",
        help="the state directory (default: $XDG_STATE_HOME/tether, else ~/.local/state/tether)",
    )
    common.add_argument("--json", action="store_true", help="print JSON")
    sub = p.add_subparsers(dest="agents_cmd", required=True, parser_class=type(p))
    ls = sub.add_parser("list", parents=[common], help="the stored agents, newest first")
    ls.add_argument("--status", help="only agents in this status (idle, needs_input, ...)")
    ls.add_argument("--parent-run", help="only agents started by this run")
    ls.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    show = sub.add_parser("show", parents=[common], help="one agent, its reports and transcript")
    show.add_argument("agent_id", metavar="ID")
    show.add_argument(
        "--tail", type=int, default=SHOWN_TAIL, help="the last N transcript messages (default 20)"
    )
    show.add_argument("--all", action="store_true", help="the whole transcript")
    send = sub.add_parser("send", parents=[common], help="send a message and print the answer")
    send.add_argument("agent_id", metavar="ID")
    send.add_argument("message", metavar="MESSAGE")
    send.add_argument("--model", help="the model to resume it with (default: the stored one)")
    send.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for another process to let the agent go",
    )
    send.add_argument("--quiet", action="store_true", help="no progress on stderr")


def main(args: argparse.Namespace) -> int:
    import anyio

    from tether.parent.agents.sessions import BadAgentId, SessionError

    try:
        if args.agents_cmd == "list":
            return anyio.run(_list, args)
        if args.agents_cmd == "show":
            return anyio.run(_show, args)
        return _send(args)
    except BadAgentId as exc:
        raise ValueError(str(exc)) from None
    except SessionError as exc:  # the store's trouble: one line, never a traceback
        print(f"tether: {exc}", file=sys.stderr)
        return EXIT_STORE


# --- list and show ----------------------------------------------------------------------------


def _no_database(state: str | None) -> str | None:
    """Where the database would be, if there is none (list and show create nothing)."""
    from tether.parent.agents.sessions import DB_NAME
    from tether.parent.agents.sessions.paths import resolve_state_dir

    path = resolve_state_dir(state) / DB_NAME
    return None if path.exists() else str(path)


async def _list(args: argparse.Namespace) -> int:
    from tether.parent.agents.sessions import AGENT_STATUSES, SessionStore

    if args.status is not None and args.status not in AGENT_STATUSES:
        raise ValueError(f"--status: one of {', '.join(AGENT_STATUSES)}")
    missing = _no_database(args.state)
    if missing is not None:
        if args.json:
            _print_json([])
        else:
            print(f"no agents (no database at {missing})")
        return 0
    async with SessionStore(args.state) as store:
        agents = await store.list_agents(
            status=args.status, parent_run=args.parent_run, limit=args.limit
        )
    if args.json:
        _print_json(agents)
    else:
        print(render_list(agents))
    return 0


async def _show(args: argparse.Namespace) -> int:
    from tether.parent.agents.sessions import SessionStore, parse_agent_id

    parse_agent_id(args.agent_id)
    missing = _no_database(args.state)
    if missing is not None:
        raise ValueError(f"no agent {args.agent_id.strip()}: no database at {missing}")
    async with SessionStore(args.state) as store:
        detail = await store.show(args.agent_id, tail=None if args.all else max(0, args.tail))
    if detail is None:
        raise ValueError(f"no agent {args.agent_id.strip()} in {store.state_dir}")
    if args.json:
        _print_json(detail)
    else:
        print(render_detail(detail))
    return 0


def render_list(agents: list[AgentSummary]) -> str:
    if not agents:
        return "no agents"
    from tether.parent.cli.progress import line

    rows = [("ID", "TYPE", "STATUS", "TOKENS", "UPDATED", "LABEL")]
    for a in agents:
        tokens = a.usage.input_tokens + a.usage.output_tokens
        rows.append(
            (
                a.id,
                line(a.agent_type)[:16],
                a.status,
                str(tokens),
                _when(a.updated_at),
                line(a.label)[:60],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out = []
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[5])
    for a in agents:
        if a.status == "needs_input" and a.question:
            out.append(f"{a.id} asks: {line(a.question)[:200]}")
    return "\n".join(x.rstrip() for x in out)


def render_detail(d: AgentDetail) -> str:
    from tether.parent.run.terminal import clean

    s = d.summary
    tokens = f"{s.usage.input_tokens} in / {s.usage.output_tokens} out"
    lines = [
        f"agent {s.id} ({clean(s.agent_type, multiline=False)}, {s.provider})",
        f"  label: {clean(s.label, multiline=False)}",
        f"  status: {s.status}"
        + (f" (stored {s.stored_status})" if s.status != s.stored_status else ""),
        f"  workspace: {clean(s.workspace, multiline=False)}",
        f"  tokens: {tokens}; activations: {s.activations}; messages: {s.message_count}",
        f"  created {_when(s.created_at)}, updated {_when(s.updated_at)}",
    ]
    if s.holder is not None:
        lines.append(
            f"  active in pid {s.holder.pid} since {_when(s.holder.since)} ({s.holder.state})"
        )
    if s.question:
        lines.append(f"  asks: {clean(s.question)}")
    if s.last_summary:
        lines.append("last summary:")
        lines += [f"  {x}" for x in clean(s.last_summary).splitlines()]
    if d.reports or d.reports_dropped:
        dropped = f" ({d.reports_dropped} older dropped)" if d.reports_dropped else ""
        lines.append(f"reports{dropped}:")
        for r in d.reports:
            lines.append(f"  [{_when(r.at)}] {clean(r.text, multiline=False)[:500]}")
    shown = f"the last {len(d.transcript)}" if d.transcript_offset else "all"
    lines.append(f"transcript ({shown} of {d.transcript_offset + len(d.transcript)} messages):")
    for i, m in enumerate(d.transcript, start=d.transcript_offset + 1):
        lines.append(f"  {i:>4} {_message(m)}")
    return "\n".join(lines)


def _message(m: ChatMessage) -> str:
    from tether.parent.cli.progress import line

    text = line(m.content)[:300]
    calls = " ".join(
        f"[{line(c.name)}({line(msgspec.json.encode(c.arguments).decode())[:120]})]"
        for c in m.tool_calls
    )
    return " ".join(x for x in (f"{m.role}:", text, calls) if x)


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _print_json(value: Any) -> None:
    encoded = msgspec.json.encode(_camel(value))
    sys.stdout.write(msgspec.json.format(encoded).decode() + "\n")


def _camel(value: Any) -> Any:
    """The store's records with camelCase keys, like every other JSON tether prints (the wire
    messages inside them already are; the keys of tool arguments are left as the model wrote
    them)."""
    from tether.parent.agents.sessions.records import Record

    if isinstance(value, list):
        return [_camel(v) for v in value]
    if isinstance(value, Record):
        return {
            _camel_name(f.name): _camel(getattr(value, f.name))
            for f in msgspec.structs.fields(value)
        }
    return msgspec.to_builtins(value)


def _camel_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# --- send -------------------------------------------------------------------------------------


def continue_command(
    agent_id: str, *, state: str | None, model: str | None = None, message: str = "MESSAGE"
) -> str:
    """The `tether agents send` command line that continues `agent_id` from a shell, exactly as
    it works there: with `--state` (absolute) when the store is not the default one, and with
    `--model` when the agent's model names a base URL a cold resume would not trust from the
    store (`unconfigured_base_url`); `model`: the model string the agent was started with."""
    import os
    import shlex

    from tether.parent.models import unconfigured_base_url

    words = ["tether", "agents", "send", agent_id, message]
    if state is not None:
        words += ["--state", os.path.abspath(state)]
    if model is not None and unconfigured_base_url(model) is not None:
        words += ["--model", model]
    return shlex.join(words)


def _send(args: argparse.Namespace) -> int:
    import anyio

    from tether.parent.agents.service import AgentBusy, AgentUnavailable, CannotResume
    from tether.parent.agents.sessions import parse_agent_id
    from tether.parent.cli.output import render

    parse_agent_id(args.agent_id)
    missing = _no_database(args.state)
    if missing is not None:
        raise ValueError(f"no agent {args.agent_id.strip()}: no database at {missing}")
    outcome: dict[str, Any] = {}
    try:
        anyio.run(_send_async, args, outcome)
    except AgentBusy as exc:
        print(f"tether: {exc.message}", file=sys.stderr)
        return EXIT_BUSY
    except (AgentUnavailable, CannotResume) as exc:
        raise ValueError(exc.message) from None
    result = outcome.get("result")
    if result is None:
        return 128 + int(outcome.get("signal", signal.SIGINT))
    if args.json:
        _print_json(result)
    else:
        print(render(result))
        if result.status == "needs_input":
            answer = continue_command(
                args.agent_id.strip(), state=args.state, model=args.model, message="ANSWER"
            )
            print(f"answer it: {answer}")
    return 0 if result.success else 1


async def _send_async(args: argparse.Namespace, outcome: dict[str, Any]) -> None:
    import anyio

    from tether.parent.cli.progress import printer
    from tether.parent.supervisor import Supervisor

    async with Supervisor(state_dir=args.state) as sup, anyio.create_task_group() as tg:

        async def interrupted() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    print(f"tether: {signal.Signals(signum).name}: cancelling", file=sys.stderr)
                    outcome["signal"] = signum
                    tg.cancel_scope.cancel()  # the child is disposed on the way out
                    return

        tg.start_soon(interrupted)
        try:
            outcome["result"] = await sup.send_message(
                args.agent_id,
                args.message,
                model=args.model,
                wait=args.wait,
                on_event=None if args.quiet else printer(sys.stderr),
            )
        except Exception as exc:  # raised as itself below, not in an exception group
            outcome["error"] = exc
        tg.cancel_scope.cancel()
    if "error" in outcome:
        raise outcome["error"]
