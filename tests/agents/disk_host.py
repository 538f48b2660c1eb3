"""A supervisor whose state directory is on a small tmpfs of its own, made full or read-only
under it; run by `test_bad_disks.py` inside a private mount namespace (see `tmpfs.py`):

    python disk_host.py full MOUNT WORKSPACE
    python disk_host.py read-only MOUNT WORKSPACE

Each step prints one JSON line (`{"step": ..., ...}`) with what it observed; the test checks
them. The last line is `{"step": "closed"}`: `async with Supervisor` was left without an
exception (an exception would end the script with a traceback and no such line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil

sys.path.insert(0, str(Path(__file__).parent))

from agent_models import Commanded

from tether.parent import Supervisor
from tether.parent.agents.sessions import LeasePolicy, SessionError, SessionStore
from tether.parent.run.events import Event, StoreTrouble

DEADLINE = 60.0


def say(step: str, **facts: Any) -> None:
    sys.stdout.write(json.dumps({"step": step, **facts}) + "\n")
    sys.stdout.flush()


def cli(*args: str) -> dict[str, Any]:
    got = subprocess.run(
        [sys.executable, "-m", "tether.parent.cli", "agents", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    return {"rc": got.returncode, "stdout": got.stdout, "stderr": got.stderr}


def fill(mount: Path) -> int:
    """Fill the file system to the last byte: the bytes it took."""
    written = 0
    with (mount / "filler").open("wb", buffering=0) as f:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    written += f.write(b"\0" * size)
            except OSError:
                continue
    return written


def free(mount: Path) -> None:
    for p in mount.glob("filler*"):
        p.unlink()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def transcript(detail: Any) -> list[str]:
    return [f"{m.role}:{m.content}" for m in detail.transcript]


async def full(mount: Path, ws: Path) -> None:
    state = mount / "state"
    troubles: list[StoreTrouble] = []

    def listen(event: Event) -> None:
        if isinstance(event, StoreTrouble):
            troubles.append(event)

    model = Commanded()
    # Heartbeats every quarter second: the disk fills while a lease is live, so one fails.
    lease = LeasePolicy(stale_after=30.0, heartbeat_every=0.25)
    async with Supervisor(state_dir=state, lease=lease) as sup:
        sup.subscribe(listen)
        kept = await sup.spawn_agent(
            "first", agent="explorer", workspace=ws, model=model, keep_alive=3
        )
        first = await kept.result()
        other = await sup.spawn_agent(
            "for the cli", agent="explorer", workspace=ws, model=model, keep_alive=0
        )
        await other.result()
        second = await sup.send_message(kept.id, "second")  # warm
        with anyio.fail_after(DEADLINE):  # the other's child is gone and its lease let go
            while (got := await sup.agents.show(other.id)) is not None and got.summary.holder:
                await anyio.sleep(0.05)
        before = await sup.agents.show(kept.id)
        other_before = await sup.agents.show(other.id)
        assert before is not None and other_before is not None
        say(
            "ready",
            ok=first.success and second.success,
            warm=sup.agents.is_warm(kept.id),
            transcript=transcript(before),
        )
        say("filled", bytes=fill(mount))
        try:
            await sup.send_message(kept.id, "third, on a full disk")
        except SessionError as exc:
            say("warm", error=type(exc).__name__, message=str(exc))
        else:
            say("warm", error=None)
        # The keep-alive passes: the child is disposed; its lease cannot be released.
        child = kept.run.pid
        with anyio.fail_after(DEADLINE):
            while sup.agents.is_warm(kept.id) or not any("released" in t.message for t in troubles):
                await anyio.sleep(0.05)
        say(
            "kept alive no longer",
            child_alive=child is not None and _alive(child),
            troubles=[{"agent": t.agent_id, "message": t.message} for t in troubles],
        )
        try:
            await sup.send_message(kept.id, "fourth, cold on a full disk")
        except SessionError as exc:
            say("cold", error=type(exc).__name__, message=str(exc))
        else:
            say("cold", error=None)
        say(
            "cli",
            send=await anyio.to_thread.run_sync(
                lambda: cli("send", other.id, "fifth", "--state", str(state), "--model", "x:y")
            ),
            list=await anyio.to_thread.run_sync(lambda: cli("list", "--state", str(state))),
        )
        free(mount)
        after = await sup.agents.show(kept.id)
        other_after = await sup.agents.show(other.id)
        assert after is not None and other_after is not None
        say(
            "freed",
            transcript=transcript(after),
            other_same=transcript(other_after) == transcript(other_before),
        )
        resumed = await sup.send_message(kept.id, "sixth, with room again")
        say(
            "resumed",
            success=resumed.success,
            summary=resumed.summary,
            message=resumed.message,
            warm=sup.agents.is_warm(kept.id),
        )
        # Full again as the supervisor closes with the child warm: its lease cannot be
        # released on the way out either, and the close goes on.
        before_close = len(troubles)
        fill(mount)
    say("closed", troubles=[t.message for t in troubles[before_close:]])
    free(mount)
    async with SessionStore(state) as store:
        final = await store.show(kept.id)
    assert final is not None
    say("reopened", transcript=transcript(final), status=final.summary.status)


async def read_only(mount: Path, ws: Path) -> None:
    state = mount / "state"
    model = Commanded()
    async with Supervisor(state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "first", agent="explorer", workspace=ws, model=model, keep_alive=0
        )
        await agent.result()
        before = await sup.agents.show(agent.id)
        assert before is not None
    # Everything closed: the mount can be made read-only.
    remount = await anyio.run_process(["mount", "-o", "remount,ro", str(mount)], check=False)
    say("remounted", rc=remount.returncode, stderr=remount.stderr.decode())
    listing = await anyio.to_thread.run_sync(lambda: cli("list", "--state", str(state)))
    shown = await anyio.to_thread.run_sync(lambda: cli("show", agent.id, "--state", str(state)))
    sent = await anyio.to_thread.run_sync(
        lambda: cli("send", agent.id, "more", "--state", str(state), "--model", "x:y")
    )
    say("cli", list=listing, show=shown, send=sent)
    async with Supervisor(state_dir=state) as sup:
        try:
            await sup.send_message(agent.id, "more", model=model)
        except SessionError as exc:
            say("send", error=type(exc).__name__, message=str(exc))
        else:
            say("send", error=None)
    await anyio.run_process(["mount", "-o", "remount,rw", str(mount)])
    async with SessionStore(state) as store:
        after = await store.show(agent.id)
    assert after is not None
    say("remounted rw", same=transcript(after) == transcript(before))
    say("closed")


if __name__ == "__main__":
    what, mount, workspace = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    os.chdir(workspace)
    anyio.run({"full": full, "read-only": read_only}[what], mount, workspace)
