"""A layer made of reflinks (issue 34, point 6): on a file system that shares blocks between
files (XFS here, made on a loop device for the test), a layer's copy of the workspace costs no
data blocks, its change set and apply work as a plain copy's do, and a workspace on another file
system than the layers directory gets a plain copy, bounded. Needs root, `mkfs.xfs` and a loop
device; skipped without them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.parent import ChildConfig, Supervisor
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import layers
from tether.parent.run import apply, changes

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0
    or shutil.which("mkfs.xfs") is None
    or not os.path.exists("/dev/loop-control"),
    reason="needs root, mkfs.xfs and loop devices to make an XFS file system",
)


@pytest.fixture
def xfs(tmp_path: Path) -> Iterator[Path]:
    image = tmp_path / "xfs.img"
    with open(image, "wb") as f:
        f.truncate(400 * 1024 * 1024)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True, timeout=60)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    got = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount the XFS image: {got.stderr.decode(errors='replace')}")
    try:
        os.chmod(mnt, 0o755)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_a_reflink_layer_shares_its_blocks_and_its_change_set_applies(xfs: Path) -> None:
    ws = xfs / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(os.urandom(64 * 1024 * 1024))
    (ws / "a.txt").write_text("a\n")
    os.sync()
    before = _used(xfs)
    plan = layers.LayerPlan("reflink", str(ws), str(xfs / "layers" / "one"))
    (xfs / "layers").mkdir()
    layer = layers.make(plan)
    os.sync()
    assert _used(xfs) - before < 8 * 1024 * 1024  # 64 MiB copied, next to no block used
    tree = Path(plan.upper)
    assert (tree / "big.bin").read_bytes() == (ws / "big.bin").read_bytes()
    (tree / "a.txt").write_text("A\n")
    cs = changes.compute(layer)
    assert [c.path for c in cs.changes] == ["a.txt"] and cs.method == "reflink"
    assert apply.apply(cs).state == "applied"
    assert (ws / "a.txt").read_text() == "A\n"
    layer.discard()


async def test_a_run_gets_a_reflink_layer_where_its_layers_share_the_workspaces_file_system(
    xfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(layers.FORCE_ENV, "reflink")  # no overlay: the copies are what is tested
    ws = xfs / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    turns = {
        "turns": [
            {"toolCalls": [{"name": "bash", "arguments": {"command": "echo b > b.txt"}}]},
            {"toolCalls": [{"name": "complete", "arguments": {"summary": "done"}}]},
        ]
    }
    model = ScriptedModel.from_json(json.dumps(turns))
    config = ChildConfig(layers_dir=str(xfs / "tether-layers-test"))
    async with Supervisor(config) as sup:
        result = await sup.run(
            "x", agent="tester", workspace=ws, model=model, workspace_mode="layered"
        )
        assert result.changes is not None and result.changes.method == "reflink"
        assert (await sup.apply(result)).state == "applied"
    assert (ws / "b.txt").read_text() == "b\n"
    # A workspace on another file system than the layers directory: a plain copy.
    other = layers.choose(
        "/usr/share", "run-x", overlay_ok=False, directory=str(xfs / "tether-layers-test")
    )
    assert other.method == "copy"


pytestmark = [pytestmark, pytest.mark.anyio]
