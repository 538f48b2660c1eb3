"""The dispose ladder wastes no rung: no rung waits for what an earlier one already waited
for, and with the default graces a child that ignores every rung is gone within
`DisposePolicy().stubborn_seconds(...)` plus the kill. Real processes, real signals."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tether.parent.process.config import ChildConfig
from tether.parent.process.host import host
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.process.spawn import spawn_child
from tether.parent.process.supervised import SupervisedChild
from tether.parent.process.wired import handshake

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

DEAF = Path(__file__).parent.parent / "children" / "deaf_ready.py"
SLACK = 0.9
"""What the SIGKILL and the sweep may take past the graces on a loaded machine; the exact
figure is measured in the bench (`tether.dispose_stubborn_default`)."""


async def deaf(policy: DisposePolicy, *args: str) -> tuple[SupervisedChild, ChildConfig]:
    cfg = ChildConfig(command=(sys.executable, "-I", str(DEAF), *args), dispose=policy)
    return await spawn_child(cfg, Limits(), host(), "ladder"), cfg


def test_the_default_graces_give_up_on_a_stubborn_child_sooner_than_four_seconds() -> None:
    policy = DisposePolicy()
    assert policy.stubborn_seconds(asked_shutdown=True) == 3.0
    assert policy.stubborn_seconds(asked_shutdown=False) == 2.0


async def test_a_ready_child_that_ignores_every_rung_is_gone_in_under_four_seconds() -> None:
    child, cfg = await deaf(DisposePolicy())
    async with child:
        with anyio.fail_after(10):
            assert await handshake(child, cfg)
    report = child.disposed
    assert report is not None and report.rung == "sigkill" and not report.survivors
    grace = DisposePolicy().stubborn_seconds(asked_shutdown=True)
    # The graces were honoured, and nothing else was waited.
    assert grace <= report.seconds < grace + SLACK < 4.0, report
    assert child.proc.exited()


async def test_after_an_unanswered_shutdown_sigterm_follows_without_another_eof_wait() -> None:
    # A long EOF grace that the ladder must not spend: the child read `shutdown`, `exit` and
    # EOF and ignored them all, so only SIGTERM (which it obeys) ends it.
    policy = DisposePolicy(shutdown=0.3, eof=20.0, term=20.0, kill=2.0)
    child, cfg = await deaf(policy, "term")
    async with child:
        with anyio.fail_after(10):
            assert await handshake(child, cfg)
    report = child.disposed
    assert report is not None and report.rung == "sigterm", report
    assert policy.shutdown <= report.seconds < policy.shutdown + 5.0, report
    assert "sigterm" in child.stderr.tail()


async def test_a_child_never_asked_shutdown_still_gets_the_whole_eof_grace() -> None:
    # Not ready (it never reads its stdin): no shutdown rung, so the EOF lifeline is waited
    # in full before SIGTERM.
    policy = DisposePolicy(shutdown=20.0, eof=0.5, term=20.0, kill=2.0)
    child, _ = await deaf(policy, "term", "mute")
    async with child:
        # Disposed once its SIGTERM handler is set: a child still starting (a loaded host can
        # take longer than the EOF grace) dies of SIGTERM's default action, saying nothing.
        with anyio.fail_after(10):
            while "armed" not in child.stderr.tail():
                await anyio.sleep(0.01)
    report = child.disposed
    assert report is not None and report.rung == "sigterm", report
    assert policy.eof <= report.seconds < policy.shutdown, report
    assert "sigterm" in child.stderr.tail()
