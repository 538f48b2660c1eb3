"""The store's SQL: one blocking function per operation, run inside a transaction `Database`
opened for it (`write` or `read`).

Everything a child or a model supplies reaches SQL as a bound parameter, never as SQL text.
Every write on behalf of an activation first checks the activation's lease token in the same
transaction (`_check_token`), so an owner whose lease was taken over cannot write one more
turn: the token is a fencing token.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import msgspec

from tether.parent.agents.sessions.errors import LeaseLost, TranscriptFull
from tether.parent.agents.sessions.lease import Clock, LeaseRow, heartbeat_age, judge
from tether.parent.agents.sessions.owner import ProcessIdentity, probe, this_process
from tether.parent.agents.sessions.records import (
    AgentDetail,
    AgentStatus,
    AgentSummary,
    Busy,
    Holder,
    ReportEntry,
    SpawnSettings,
    StoreBounds,
    TakenOver,
    Unavailable,
)
from tether.protocol.messages import AgentDefinition, ChatMessage, ToolCall, Usage

_encode = msgspec.json.Encoder().encode
_decode_message = msgspec.json.Decoder(ChatMessage).decode
_decode_definition = msgspec.json.Decoder(AgentDefinition).decode
_decode_spawn = msgspec.json.Decoder(SpawnSettings).decode


def now() -> Clock:
    return Clock(wall=time.time(), mono=time.monotonic())


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


# ---------------------------------------------------------------------------------------------
# encoding, within bounds


def encode_definition(definition: AgentDefinition) -> bytes:
    return _encode(definition)


def encode_message(message: ChatMessage, limit: int) -> bytes:
    """`message` as stored: its JSON, cut to `limit` bytes (see `StoreBounds`)."""
    body = _encode(message)
    if len(body) <= limit:
        return body
    original = len(body)
    content = message.content.encode()
    budget = max(0, len(content) - (len(body) - limit) - 200)
    while True:
        kept = content[:budget].decode("utf-8", "ignore")
        note = (
            f"\n[tether: cut to keep this message within the store's bound of {limit} bytes; "
            f"it was {original} bytes]"
        )
        shorter = msgspec.structs.replace(message, content=kept + note)
        body = _encode(shorter)
        if len(body) <= limit:
            return body
        if budget == 0:
            break
        budget //= 2  # JSON escapes made the content longer than its UTF-8 bytes
    bare = msgspec.structs.replace(
        shorter,
        tool_calls=[
            ToolCall(id=c.id, name=c.name, arguments={"cut_by_tether": True})
            for c in shorter.tool_calls
        ],
    )
    body = _encode(bare)
    if len(body) <= limit:
        return body
    raise TranscriptFull(
        f"a {message.role} message is {original} bytes and its tool calls alone do not fit the "
        f"store's bound of {limit} bytes per message"
    )


def decode_message(body: bytes) -> ChatMessage:
    return _decode_message(body)


# ---------------------------------------------------------------------------------------------
# rows to records


def _lease_row(row: sqlite3.Row, *, agent_id: str) -> LeaseRow:
    return LeaseRow(
        agent_id=agent_id,
        token=row["token"],
        owner=ProcessIdentity(
            pid=row["owner_pid"],
            start=row["owner_start"],
            boot=row["owner_boot"],
            pidns=row["owner_pidns"],
        ),
        acquired_at=row["acquired_at"],
        heartbeat_wall=row["heartbeat_wall"],
        heartbeat_mono=row["heartbeat_mono"],
    )


def holder_of(lease: LeaseRow, *, here: ProcessIdentity, at: Clock, stale_after: float) -> Holder:
    liveness = probe(lease.owner, here)
    verdict = judge(lease, now=at, here=here, liveness=liveness, stale_after=stale_after)
    state = {"owner_dead": "dead", "stale": "stale"}.get(verdict, liveness)
    return Holder(
        pid=lease.owner.pid,
        since=lease.acquired_at,
        heartbeat_age=heartbeat_age(lease, at, here),
        state=state,  # type: ignore[arg-type]
    )


def effective_status(stored: AgentStatus, holder: Holder | None) -> AgentStatus:
    """What a reader should act on: a `running` session nobody live is running was interrupted."""
    if stored == "running" and (holder is None or holder.state in ("dead", "stale")):
        return "interrupted"
    return stored


_SUMMARY_COLUMNS = """
    a.id, a.agent_type, a.provider, a.label, a.workspace, a.parent_run, a.status, a.question,
    a.last_summary, a.input_tokens, a.output_tokens, a.message_count, a.transcript_bytes,
    a.activations, a.created_at, a.updated_at, a.activation_started_at, a.activation_ended_at,
    l.agent_id AS lease_agent, l.token, l.owner_pid, l.owner_start, l.owner_boot, l.owner_pidns,
    l.acquired_at, l.heartbeat_wall, l.heartbeat_mono
"""
_SUMMARY_FROM = "FROM agents a LEFT JOIN leases l ON l.agent_id = a.id"


def _summary(
    row: sqlite3.Row, *, here: ProcessIdentity, at: Clock, stale_after: float
) -> AgentSummary:
    holder = None
    if row["lease_agent"] is not None:
        lease = _lease_row(row, agent_id=row["lease_agent"])
        holder = holder_of(lease, here=here, at=at, stale_after=stale_after)
    stored: AgentStatus = row["status"]
    return AgentSummary(
        id=row["id"],
        agent_type=row["agent_type"],
        provider=row["provider"],
        label=row["label"],
        status=effective_status(stored, holder),
        stored_status=stored,
        last_summary=row["last_summary"],
        question=row["question"],
        usage=Usage(input_tokens=row["input_tokens"], output_tokens=row["output_tokens"]),
        message_count=row["message_count"],
        transcript_bytes=row["transcript_bytes"],
        activations=row["activations"],
        parent_run=row["parent_run"],
        workspace=row["workspace"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        activation_started_at=row["activation_started_at"],
        activation_ended_at=row["activation_ended_at"],
        holder=holder,
    )


# ---------------------------------------------------------------------------------------------
# agents


def insert_agent(
    conn: sqlite3.Connection,
    *,
    agent_id: str,
    definition: AgentDefinition,
    provider: str,
    label: str,
    workspace: str,
    parent_run: str | None,
    bounds: StoreBounds,
    spawn: SpawnSettings | None = None,
) -> None:
    """A new session, `idle` until its first activation. Raises `sqlite3.IntegrityError` if the
    id is taken (the caller mints another)."""
    at = now().wall
    conn.execute(
        "INSERT INTO agents (id, agent_type, provider, definition, label, workspace, parent_run,"
        " status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'idle', ?, ?)",
        (
            agent_id,
            definition.type,
            provider,
            encode_definition(definition),
            cut(label, bounds.label_chars),
            workspace,
            parent_run,
            at,
            at,
        ),
    )
    if spawn is not None:
        conn.execute("UPDATE agents SET spawn = ? WHERE id = ?", (_encode(spawn), agent_id))


def select_spawn(conn: sqlite3.Connection, agent_id: str) -> SpawnSettings | None:
    row = conn.execute("SELECT spawn FROM agents WHERE id = ?", (agent_id,)).fetchone()
    if row is None or row["spawn"] is None:
        return None
    return _decode_spawn(row["spawn"])


def select_summary(
    conn: sqlite3.Connection, agent_id: str, *, stale_after: float
) -> AgentSummary | None:
    row = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} {_SUMMARY_FROM} WHERE a.id = ?", (agent_id,)
    ).fetchone()
    if row is None:
        return None
    return _summary(row, here=_here(), at=now(), stale_after=stale_after)


def select_summaries(
    conn: sqlite3.Connection,
    *,
    statuses: Sequence[str] | None,
    parent_run: str | None,
    limit: int,
    stale_after: float,
) -> list[AgentSummary]:
    """Newest first. A status filter applies to the status a reader acts on, so asking for
    `interrupted` finds the `running` sessions whose holder is gone too."""
    if limit <= 0:
        return []
    where: list[str] = []
    params: list[object] = []
    if parent_run is not None:
        where.append("a.parent_run = ?")
        params.append(parent_run)
    wanted = set(statuses) if statuses is not None else None
    if wanted is not None:
        stored = set(wanted)
        if "interrupted" in wanted:
            stored.add("running")
        where.append(f"a.status IN ({', '.join('?' for _ in stored)})")
        params.extend(sorted(stored))
    sql = f"SELECT {_SUMMARY_COLUMNS} {_SUMMARY_FROM}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY a.updated_at DESC, a.id"
    if wanted is None or not wanted & {"running", "interrupted"}:
        # Only a `running` row can read as another status: elsewhere SQL can stop early.
        sql += " LIMIT ?"
        params.append(limit)
    here, at = _here(), now()
    out = []
    for row in conn.execute(sql, params):
        summary = _summary(row, here=here, at=at, stale_after=stale_after)
        if wanted is None or summary.status in wanted:
            out.append(summary)
            if len(out) >= limit:
                break
    return out


def select_transcript(
    conn: sqlite3.Connection, agent_id: str, *, tail: int | None = None
) -> tuple[list[ChatMessage], int]:
    """The stored messages in order (the last `tail` of them), and how many came before."""
    if tail is None:
        rows = conn.execute(
            "SELECT body FROM messages WHERE agent_id = ? ORDER BY seq", (agent_id,)
        ).fetchall()
        return [decode_message(r["body"]) for r in rows], 0
    rows = conn.execute(
        "SELECT body FROM messages WHERE agent_id = ? ORDER BY seq DESC LIMIT ?",
        (agent_id, max(0, tail)),
    ).fetchall()
    total = conn.execute("SELECT message_count FROM agents WHERE id = ?", (agent_id,)).fetchone()
    count = total["message_count"] if total else 0
    return [decode_message(r["body"]) for r in reversed(rows)], max(0, count - len(rows))


def select_detail(
    conn: sqlite3.Connection, agent_id: str, *, tail: int | None, stale_after: float
) -> AgentDetail | None:
    summary = select_summary(conn, agent_id, stale_after=stale_after)
    if summary is None:
        return None
    row = conn.execute(
        "SELECT definition, reports_dropped FROM agents WHERE id = ?", (agent_id,)
    ).fetchone()
    transcript, offset = select_transcript(conn, agent_id, tail=tail)
    reports = [
        ReportEntry(seq=r["seq"], at=r["at"], text=r["text"])
        for r in conn.execute(
            "SELECT seq, at, text FROM reports WHERE agent_id = ? ORDER BY seq", (agent_id,)
        )
    ]
    return AgentDetail(
        summary=summary,
        definition=_decode_definition(row["definition"]),
        transcript=transcript,
        transcript_offset=offset,
        reports=reports,
        reports_dropped=row["reports_dropped"],
    )


def close_agent(
    conn: sqlite3.Connection, agent_id: str, *, stale_after: float
) -> AgentSummary | Busy | Unavailable:
    """Close an agent nobody holds: it stays listed, and can never be activated again."""
    row = conn.execute("SELECT status FROM agents WHERE id = ?", (agent_id,)).fetchone()
    if row is None:
        return Unavailable(agent_id=agent_id, reason="unknown_agent")
    lease = _lease(conn, agent_id)
    if lease is not None:
        here, at = _here(), now()
        holder = holder_of(lease, here=here, at=at, stale_after=stale_after)
        if holder.state in ("alive", "unknown"):
            return Busy(agent_id=agent_id, holder=holder)
        conn.execute("DELETE FROM leases WHERE agent_id = ?", (agent_id,))
    conn.execute(
        "UPDATE agents SET status = 'closed', updated_at = ? WHERE id = ?", (now().wall, agent_id)
    )
    summary = select_summary(conn, agent_id, stale_after=stale_after)
    assert summary is not None
    return summary


# ---------------------------------------------------------------------------------------------
# leases


def _here() -> ProcessIdentity:
    return this_process()


def _lease(conn: sqlite3.Connection, agent_id: str) -> LeaseRow | None:
    row = conn.execute("SELECT * FROM leases WHERE agent_id = ?", (agent_id,)).fetchone()
    return None if row is None else _lease_row(row, agent_id=agent_id)


@dataclass(frozen=True)
class Granted:
    """`acquire` took the lease (the async layer wraps it in an `Activation`)."""

    acquired_at: float
    took_over: TakenOver | None


def acquire(
    conn: sqlite3.Connection,
    agent_id: str,
    *,
    token: str,
    stale_after: float,
    live_here: Collection[str] | None = None,
) -> Granted | Busy | Unavailable:
    """Take the agent's activation lease, from a dead or stale holder if need be; the session
    becomes `running` and its activation count goes up, in the same transaction. `live_here`:
    the tokens this process's live activations hold (`lease.judge`)."""
    row = conn.execute("SELECT status FROM agents WHERE id = ?", (agent_id,)).fetchone()
    if row is None:
        return Unavailable(agent_id=agent_id, reason="unknown_agent")
    if row["status"] == "closed":
        return Unavailable(agent_id=agent_id, reason="closed")
    here, at = _here(), now()
    took_over = None
    lease = _lease(conn, agent_id)
    if lease is not None:
        liveness = probe(lease.owner, here)
        verdict = judge(
            lease,
            now=at,
            here=here,
            liveness=liveness,
            stale_after=stale_after,
            live_here=live_here,
        )
        if verdict == "held":
            return Busy(
                agent_id=agent_id,
                holder=holder_of(lease, here=here, at=at, stale_after=stale_after),
            )
        took_over = TakenOver(pid=lease.owner.pid, since=lease.acquired_at, why=verdict)
        conn.execute("DELETE FROM leases WHERE agent_id = ?", (agent_id,))
    conn.execute(
        "INSERT INTO leases (agent_id, token, owner_pid, owner_start, owner_boot, owner_pidns,"
        " acquired_at, heartbeat_wall, heartbeat_mono) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (agent_id, token, here.pid, here.start, here.boot, here.pidns, at.wall, at.wall, at.mono),
    )
    conn.execute(
        "UPDATE agents SET status = 'running', question = NULL, activations = activations + 1,"
        " activation_started_at = ?, activation_ended_at = NULL, updated_at = ? WHERE id = ?",
        (at.wall, at.wall, agent_id),
    )
    return Granted(acquired_at=at.wall, took_over=took_over)


def _check_token(conn: sqlite3.Connection, agent_id: str, token: str) -> None:
    row = conn.execute("SELECT token FROM leases WHERE agent_id = ?", (agent_id,)).fetchone()
    if row is None or row["token"] != token:
        raise LeaseLost(
            f"agent {agent_id}: this activation no longer holds the lease (it went stale and "
            "was taken over, or was released)"
        )


def heartbeat(conn: sqlite3.Connection, agent_id: str, *, token: str) -> None:
    at = now()
    cur = conn.execute(
        "UPDATE leases SET heartbeat_wall = ?, heartbeat_mono = ? WHERE agent_id = ? AND token = ?",
        (at.wall, at.mono, agent_id, token),
    )
    if cur.rowcount == 0:
        _check_token(conn, agent_id, token)  # raises LeaseLost


def release(
    conn: sqlite3.Connection, agent_id: str, *, token: str, status: AgentStatus | None
) -> bool:
    """Give the lease up, if this token still holds it (else nothing happens: `False`).

    The session takes `status` if given; one left `running` becomes `interrupted`.
    """
    cur = conn.execute("DELETE FROM leases WHERE agent_id = ? AND token = ?", (agent_id, token))
    if cur.rowcount == 0:
        return False
    at = now().wall
    if status is None:
        conn.execute(
            "UPDATE agents SET status = CASE status WHEN 'running' THEN 'interrupted' ELSE status"
            " END, activation_ended_at = ?, updated_at = ? WHERE id = ?",
            (at, at, agent_id),
        )
    else:
        conn.execute(
            "UPDATE agents SET status = ?, activation_ended_at = ?, updated_at = ? WHERE id = ?",
            (status, at, at, agent_id),
        )
    return True


# ---------------------------------------------------------------------------------------------
# an activation's writes (each checks the token first)


def append(
    conn: sqlite3.Connection,
    agent_id: str,
    *,
    token: str,
    bodies: Sequence[bytes],
    usage: Usage,
    bounds: StoreBounds,
) -> int:
    """Append encoded messages and add `usage`; the transcript's new length in messages."""
    _check_token(conn, agent_id, token)
    row = conn.execute(
        "SELECT next_seq, message_count, transcript_bytes FROM agents WHERE id = ?", (agent_id,)
    ).fetchone()
    added = sum(len(b) for b in bodies)
    if row["transcript_bytes"] + added > bounds.transcript_bytes:
        raise TranscriptFull(
            f"agent {agent_id}: the transcript is {row['transcript_bytes']} bytes and this turn "
            f"adds {added}, past the store's bound of {bounds.transcript_bytes}; nothing of the "
            "turn was stored"
        )
    first = row["next_seq"]
    conn.executemany(
        "INSERT INTO messages (agent_id, seq, body) VALUES (?, ?, ?)",
        [(agent_id, first + i, body) for i, body in enumerate(bodies)],
    )
    count = row["message_count"] + len(bodies)
    conn.execute(
        "UPDATE agents SET next_seq = ?, message_count = ?, transcript_bytes = ?,"
        " input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, updated_at = ?"
        " WHERE id = ?",
        (
            first + len(bodies),
            count,
            row["transcript_bytes"] + added,
            usage.input_tokens,
            usage.output_tokens,
            now().wall,
            agent_id,
        ),
    )
    return int(count)


def replace_transcript(
    conn: sqlite3.Connection,
    agent_id: str,
    *,
    token: str,
    bodies: Sequence[bytes],
    usage: Usage,
    bounds: StoreBounds,
) -> int:
    """Replace the whole transcript (after the child compacted its own)."""
    _check_token(conn, agent_id, token)
    total = sum(len(b) for b in bodies)
    if total > bounds.transcript_bytes:
        raise TranscriptFull(
            f"agent {agent_id}: a replacement transcript of {total} bytes is past the store's "
            f"bound of {bounds.transcript_bytes}; the stored one was kept"
        )
    row = conn.execute("SELECT next_seq FROM agents WHERE id = ?", (agent_id,)).fetchone()
    conn.execute("DELETE FROM messages WHERE agent_id = ?", (agent_id,))
    first = row["next_seq"]
    conn.executemany(
        "INSERT INTO messages (agent_id, seq, body) VALUES (?, ?, ?)",
        [(agent_id, first + i, body) for i, body in enumerate(bodies)],
    )
    conn.execute(
        "UPDATE agents SET next_seq = ?, message_count = ?, transcript_bytes = ?,"
        " input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, updated_at = ?"
        " WHERE id = ?",
        (
            first + len(bodies),
            len(bodies),
            total,
            usage.input_tokens,
            usage.output_tokens,
            now().wall,
            agent_id,
        ),
    )
    return len(bodies)


def splice(
    conn: sqlite3.Connection,
    agent_id: str,
    *,
    token: str,
    keep: int,
    bodies: Sequence[bytes],
    usage: Usage,
    bounds: StoreBounds,
) -> int:
    """Keep the first `keep` stored messages, replace the rest with `bodies`, add `usage`; the
    transcript's new length. `append` is a splice that keeps everything; `replace_transcript`
    one that keeps nothing."""
    _check_token(conn, agent_id, token)
    row = conn.execute(
        "SELECT next_seq, message_count, transcript_bytes FROM agents WHERE id = ?", (agent_id,)
    ).fetchone()
    keep = max(0, min(keep, row["message_count"]))
    cut_at = conn.execute(
        "SELECT seq FROM messages WHERE agent_id = ? ORDER BY seq LIMIT 1 OFFSET ?",
        (agent_id, keep),
    ).fetchone()
    dropped = 0
    if cut_at is not None:
        dropped = conn.execute(
            "SELECT COALESCE(SUM(length(body)), 0) FROM messages WHERE agent_id = ? AND seq >= ?",
            (agent_id, cut_at["seq"]),
        ).fetchone()[0]
    added = sum(len(b) for b in bodies)
    total = row["transcript_bytes"] - dropped + added
    if total > bounds.transcript_bytes:
        raise TranscriptFull(
            f"agent {agent_id}: this turn would take the transcript to {total} bytes, past the "
            f"store's bound of {bounds.transcript_bytes}; nothing of the turn was stored"
        )
    if cut_at is not None:
        conn.execute(
            "DELETE FROM messages WHERE agent_id = ? AND seq >= ?", (agent_id, cut_at["seq"])
        )
    # New rows take fresh sequence numbers after every one ever used, so order is kept.
    first = row["next_seq"]
    conn.executemany(
        "INSERT INTO messages (agent_id, seq, body) VALUES (?, ?, ?)",
        [(agent_id, first + i, body) for i, body in enumerate(bodies)],
    )
    count = keep + len(bodies)
    conn.execute(
        "UPDATE agents SET next_seq = ?, message_count = ?, transcript_bytes = ?,"
        " input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, updated_at = ?"
        " WHERE id = ?",
        (
            first + len(bodies),
            count,
            total,
            max(0, usage.input_tokens),
            max(0, usage.output_tokens),
            now().wall,
            agent_id,
        ),
    )
    return count


def add_report(
    conn: sqlite3.Connection, agent_id: str, *, token: str, text: str, bounds: StoreBounds
) -> ReportEntry:
    """Store one report; past the bound the oldest are dropped (and counted)."""
    _check_token(conn, agent_id, token)
    at = now().wall
    row = conn.execute("SELECT next_report FROM agents WHERE id = ?", (agent_id,)).fetchone()
    seq = row["next_report"]
    text = cut(text, bounds.report_chars)
    conn.execute(
        "INSERT INTO reports (agent_id, seq, at, text) VALUES (?, ?, ?, ?)",
        (agent_id, seq, at, text),
    )
    dropped = conn.execute(
        "DELETE FROM reports WHERE agent_id = ? AND seq <= ?", (agent_id, seq - bounds.reports)
    ).rowcount
    conn.execute(
        "UPDATE agents SET next_report = ?, reports_dropped = reports_dropped + ?, updated_at = ?"
        " WHERE id = ?",
        (seq + 1, dropped, at, agent_id),
    )
    return ReportEntry(seq=seq, at=at, text=text)


def settle(
    conn: sqlite3.Connection,
    agent_id: str,
    *,
    token: str,
    status: AgentStatus,
    summary: str,
    question: str | None,
    bounds: StoreBounds,
) -> None:
    """A run answered: record its outcome; the activation (a warm child) may go on."""
    _check_token(conn, agent_id, token)
    conn.execute(
        "UPDATE agents SET status = ?, last_summary = ?, question = ?, updated_at = ? WHERE id = ?",
        (
            status,
            cut(summary, bounds.summary_chars),
            None if question is None else cut(question, bounds.question_chars),
            now().wall,
            agent_id,
        ),
    )


def mark_running(conn: sqlite3.Connection, agent_id: str, *, token: str) -> None:
    """A new message for a warm child: the session is `running` again, its question answered."""
    _check_token(conn, agent_id, token)
    conn.execute(
        "UPDATE agents SET status = 'running', question = NULL, updated_at = ? WHERE id = ?",
        (now().wall, agent_id),
    )
