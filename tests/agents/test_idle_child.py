"""A continuable child between activations is held still and served nothing: the result it
answered is checked against a tree that cannot change it, and the model turns it asks for
while idle are refused (in neither activation's usage, never on the user's key)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.parent import ChildConfig, Continuation, Supervisor
from tether.protocol import ErrorCode
from tether.protocol.messages import ChatMessage, ModelCompleteResult, Usage

CHILD = Path(__file__).resolve().parents[1] / "children" / "idle_asker.py"

pytestmark = pytest.mark.anyio


class CountingModel:
    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, params: Any) -> ModelCompleteResult:
        self.calls += 1
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="sure"),
            usage=Usage(input_tokens=100, output_tokens=100),
            stop_reason="end_turn",
        )


@pytest.mark.parametrize(
    ("isolation", "containment"),
    [("sandbox", "auto"), ("process", "auto"), ("process", "process-group")],
    ids=["sandbox", "process", "no-freezer"],
)
async def test_an_idle_continuable_child_gets_no_model_turn_and_cannot_swap_its_artifact(
    tmp_path: Path, isolation: str, containment: str
) -> None:
    """Frozen in its cgroup, or SIGSTOPped on a tier without one (`no-freezer`)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    model = CountingModel()
    config = ChildConfig(isolation=isolation, containment=containment)  # type: ignore[arg-type]
    async with Supervisor(config) as sup:
        handle = await sup.start(
            "go",
            workspace=ws,
            model=model,
            command=[sys.executable, "-I", str(CHILD)],
            continuation=Continuation(keep_alive=30),
        )
        first = await handle.result()
        assert [(a.fs_type, a.size) for a in first.artifacts] == [("file", 11)]
        # The left-behind process swaps as soon as it sees `go` (on a timer of its own it
        # could swap before the hold on a loaded host, and the result's check caught it):
        # held still, it never looks. A process let run would swap in milliseconds.
        (ws / "go").touch()
        await anyio.sleep(1.5)
        assert not (ws / "report.md").is_symlink()
        assert not (ws / "swapped").exists()
        assert model.calls == 0
        with anyio.fail_after(30):
            second = await handle.message("and?")
        handle.close()
        await handle.wait()
    assert second is not None
    assert second.summary.startswith(f"0 answered, 6 refused [{int(ErrorCode.RUN_IDLE)}]")
    assert model.calls == 0
    assert first.usage.input_tokens == 0 and second.usage.input_tokens == 0
