"""A child that never completes the handshake is `unresponsive`, within the handshake timeout."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tether.parent.process.limits import DisposePolicy
from tether.parent.supervisor import ChildConfig, Supervisor


@pytest.mark.anyio
async def test_a_child_that_never_answers_initialize_is_unresponsive_after_the_timeout(
    tmp_path: Path,
) -> None:
    config = ChildConfig(
        handshake_timeout=0.5, dispose=DisposePolicy(shutdown=0.2, eof=0.2, term=0.3, kill=1.0)
    )
    async with Supervisor(config) as sup:
        started = time.monotonic()
        result = await sup.run(
            "go",
            workspace=tmp_path,
            command=[sys.executable, "-I", "-c", "import time; time.sleep(60)"],
        )
        elapsed = time.monotonic() - started
    assert not result.success
    assert result.failure is not None and result.failure.kind == "unresponsive"
    assert result.failure.limit == "handshake=0.5s"
    assert "initialize" in result.message
    assert 0.5 <= elapsed < 0.5 + 0.2 + 0.3 + 1.0 + 3.0  # timeout + ladder + start-up margin
