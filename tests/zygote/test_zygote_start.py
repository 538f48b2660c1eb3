"""A zygote's start leaves nothing behind, whenever it is cut short: the zygote dies of its
death signal whenever its supervisor dies, so it can be SIGKILLed at any moment of its
rehearsal (`tether.child.zygote._rehearse`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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


def _python(code: str) -> str:
    got = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


def test_the_zygote_imports_its_runtime_with_the_collector_off() -> None:
    # Run as `python -m`, the module turns the collector off before its imports (its main is
    # then stopped at once by an argument that is no socket).
    code = (
        "import gc, runpy, sys\n"
        "sys.argv = ['zygote', 'not-a-socket']\n"
        "try:\n"
        "    runpy.run_module('tether.child.zygote', run_name='__main__')\n"
        "except ValueError:\n"
        "    print(gc.isenabled())\n"
    )
    assert _python(code) == "False"


def test_importing_the_zygote_module_leaves_the_collector_alone() -> None:
    assert _python("import gc\nfrom tether.child import zygote\nprint(gc.isenabled())") == "True"


def test_the_zygote_serves_with_the_collector_on_and_its_warm_heap_frozen() -> None:
    code = (
        "import gc\n"
        "gc.disable()\n"
        "from tether.child import zygote\n"
        "zygote._settle()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 10_000)\n"
    )
    assert _python(code) == "True True"
