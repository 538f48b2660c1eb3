"""Fixtures for the session store tests: a private state directory, and store-using processes
(`store_host.py`) that are always killed and reaped when a test ends. Also lets the tests here
import the shared `session_hosts` module (pytest runs with `--import-mode=importlib`)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from session_hosts import Host  # noqa: E402


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def spawn_host(tmp_path: Path) -> Iterator[Callable[..., Host]]:
    hosts: list[Host] = []

    def spawn(*args: str) -> Host:
        host = Host(list(args), tmp_path / f"host-{len(hosts)}.stderr")
        hosts.append(host)
        return host

    yield spawn
    for host in hosts:
        host.close_stdin()
        if host.proc.poll() is None:
            host.proc.send_signal(signal.SIGCONT)  # a test may have stopped it
            host.kill()
        for stream in (host.proc.stdout, host.proc.stdin):
            if stream is not None and not stream.closed:
                stream.close()
