"""A zygote's start leaves nothing behind, whenever it is cut short: the zygote dies of its
death signal whenever its supervisor dies, so it can be SIGKILLed at any moment of its
rehearsal (`tether.child.zygote._rehearse`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from tether.parent.process.env import build_child_env
from tether.parent.process.proc import SpawnError
from tether.parent.process.zygote import Zygote

pytestmark = pytest.mark.anyio

DEADLINE = 15.0


async def test_a_zygote_killed_the_moment_its_start_writes_to_the_temp_dir_leaves_nothing_there(
    tmp_path: Path,
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = build_child_env(os.environ)
    env["TMPDIR"] = str(temp)
    zygote = Zygote.launch(env)
    killed = False
    try:
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    nonlocal killed
                    while True:  # cancelled when the zygote is ready
                        if any(temp.iterdir()):
                            zygote.proc.send_signal(signal.SIGKILL)
                            killed = True
                            return
                        await anyio.sleep(0.0005)

                tg.start_soon(watch)
                await anyio.wait_readable(zygote._sock.fileno())  # ready (or dead)
                tg.cancel_scope.cancel()
        if not killed:
            zygote._take_ready()  # it started, and said so
    except SpawnError:
        assert killed, "the zygote failed to start on its own"
    finally:
        await zygote.aclose()
    assert not killed, f"the zygote's start wrote {sorted(p.name for p in temp.iterdir())}"
    assert list(temp.iterdir()) == []
