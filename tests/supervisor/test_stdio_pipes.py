"""A child's stdio pipes never leak a descriptor, whether the spawn works or fails."""

from __future__ import annotations

import os

import pytest

from tether.parent.process.pipes import stdio_pipes
from tether.parent.process.proc import ChildProcess, SpawnError
from tether.parent.process.start import SpawnSpec


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def test_a_block_that_raises_closes_both_ends_of_every_pipe() -> None:
    before = open_fds()
    with pytest.raises(RuntimeError), stdio_pipes() as pipes:
        assert len(set(pipes.child) | set(pipes.ours)) == 6
        raise RuntimeError("spawn failed")
    assert open_fds() == before


def test_a_block_that_succeeds_keeps_only_our_ends() -> None:
    before = open_fds()
    with stdio_pipes() as pipes:
        pass
    assert open_fds() == before | set(pipes.ours)
    for fd in pipes.ours:
        os.close(fd)


def test_a_spawn_in_a_missing_directory_is_a_spawn_error_that_leaks_nothing() -> None:
    before = open_fds()
    with pytest.raises(SpawnError, match="cannot start"):
        ChildProcess.spawn(SpawnSpec(["true"], {"PATH": os.defpath}, cwd="/no/such/dir"))
    assert open_fds() == before
