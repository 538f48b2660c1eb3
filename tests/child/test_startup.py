"""What the child loads to answer `initialize`: none of jsonrpcserver's JSON-Schema machinery.

jsonrpcserver's package `__init__` imports jsonschema (and its HTTP server) for a default
validator the child never uses; `dispatch.py` loads only its dispatcher. These tests watch the
real child with `-X importtime`, which lists every module as it is imported.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import threading
from importlib import metadata

import pytest
from child_harness import ChildProcess

from tether.child.session import SERVER_VERSION

NEVER = ("jsonschema", "referencing", "rpds", "attrs", "http.server", "jsonrpcserver.main")
"""Modules the child never imports on its own: jsonrpcserver's schema validator and server."""
NOT_FOR_THE_HANDSHAKE = ("importlib.metadata", "argparse", "email", "ctypes", "termios")
"""Top-level packages a child that runs nothing never loads (`ctypes` is ≈ 1.3 ms of a cold start
over `_ctypes`, which its death signal and dumpability are set through; `termios` was one
constant)."""


def _imported(stderr: str) -> set[str]:
    return set(re.findall(r"^import time:.*\| +(\S+)$", stderr, re.MULTILINE))


def test_the_child_never_imports_jsonschema_nor_jsonrpcservers_server() -> None:
    with ChildProcess([sys.executable, "-X", "importtime", "-I", "-m", "tether.child"]) as child:
        child.initialize()
        assert child.call("ping")["result"] == {}
        child.call("shutdown")
        child.notify("exit")
        assert child.wait_exit() == 0
        child._drain.join(5)  # stderr read to its end
        imported = _imported(child.stderr)
    assert "tether.child.dispatch" in imported  # the probe sees the child's own imports
    assert not imported & set(NEVER), sorted(imported & set(NEVER))
    assert not {m for m in imported if m.split(".")[0] in NOT_FOR_THE_HANDSHAKE}


def test_a_hosted_agent_that_imports_jsonrpcserver_gets_the_whole_library() -> None:
    code = (
        "import tether.child.dispatch, jsonrpcserver, sys\n"
        "assert jsonrpcserver.dispatch_to_response and 'jsonschema' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], timeout=30, check=False)
    assert done.returncode == 0


def test_the_version_the_child_announces_is_the_installed_distributions() -> None:
    assert metadata.version("tether") == SERVER_VERSION


def test_initialize_is_served_before_jsonrpcservers_dispatcher_is_loaded_and_ping_loads_it() -> (
    None
):
    code = """
import sys, anyio
import tether.child.server
from tether.child.dispatch import Dispatcher

CORE = ("oslash", "tether.child._jsonrpcserver.dispatcher")
assert not [m for m in CORE if m in sys.modules], "loaded on the handshake's import path"

async def hello(params):
    return {"hello": params}

async def main():
    d = Dispatcher({"initialize": hello, "ping": hello})
    assert await d.request("initialize", 1) == {"hello": 1}
    assert not [m for m in CORE if m in sys.modules], "loaded to serve initialize"
    assert await d.request("ping", 2) == {"hello": 2}
    assert all(m in sys.modules for m in CORE)

anyio.run(main)
"""
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr


def _warm_up_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Answer `initialize` on a bare session; the names of the threads its warm-up started."""
    from tether.child import session as session_module

    started: list[str] = []
    real = threading.Thread

    class Recorded(real):  # type: ignore[misc, valid-type]
        def start(self) -> None:
            started.append(self.name)
            super().start()
            self.join(5)

    monkeypatch.setattr(session_module.threading, "Thread", Recorded)
    session = session_module.Session(None)
    session.initialized = True
    session.answered("initialize")
    return started


def test_a_child_that_has_its_machinery_loaded_starts_no_warm_up_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What a zygote's child finds: the dispatcher and the agent machinery already imported.
    from tether.child import dispatch

    dispatch.preload()
    importlib.import_module("tether.child.runs")
    assert _warm_up_threads(monkeypatch) == []


def test_a_child_with_its_dispatcher_still_to_load_warms_up_in_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether.child import dispatch

    monkeypatch.setattr(dispatch, "_loaded", None)
    assert _warm_up_threads(monkeypatch) == ["tether-warm-up"]
    assert dispatch.preloaded()
