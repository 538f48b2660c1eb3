"""If teardown cannot kill part of the tree, the result says so instead of staying silent."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from tether.parent.process.supervised import SupervisedChild
from tether.parent.supervisor import Supervisor


@pytest.mark.anyio
async def test_processes_that_survive_the_sweep_are_named_in_the_result_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_sweep = SupervisedChild._sweep

    async def sweep_that_fails(self: SupervisedChild, grace: float) -> list[int]:
        # The real sweep runs (nothing is left behind); then pretend two pids would not die,
        # as a process in uninterruptible sleep would not.
        await real_sweep(self, grace)
        return [4242, 4343]

    monkeypatch.setattr(SupervisedChild, "_sweep", sweep_that_fails)
    caplog.set_level(logging.WARNING, logger="tether.parent")
    async with Supervisor() as sup:
        result = await sup.run(
            "go", workspace=tmp_path, command=[sys.executable, "-I", "-c", "raise SystemExit(3)"]
        )
    assert result.failure is not None and result.failure.kind == "exit_nonzero"
    assert "2 process(es) of the child's tree could not be killed: pids 4242, 4343" in (
        result.message
    )
    assert "survived teardown" in caplog.text
