"""The layered-workspaces group of `scripts/bench`: what a layer costs a run, and what the
parent's change set costs to compute.

Per round, interleaved: a shared run and a layered run of the same one-turn script, each timed
from `Supervisor.start` to the child's first `model/complete` (the child spawned, contained —
the layered one with its overlay or copy made and mounted — initialized and asking: spawn →
ready), in one supervisor, this host's default isolation and layer (`tether doctor`); then
making an overlay's layer over a 10,000-file workspace (its frozen base of hard links), and the
change set of a layer holding 1, 100 and 10,000 changed files (`changes.compute`: the parent's
confined walk of the layer, a SHA-256 of each changed file and its base, a unified diff of
each), against a base of 10,000 small text files (`--quick`: 1,000).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict

import anyio

from benchmarks.report import Figure, Results
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import layers
from tether.parent.run import changes
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import ModelCompleteParams, ModelCompleteResult

ONE_TURN = '[{"text": "done", "toolCalls": [{"name": "complete", "arguments": {"summary": "ok"}}]}]'
BASE_FILES = 10_000
"""Files in the base the layer and change-set figures use (`--quick`: fewer)."""


class _FirstTurn:
    """A scripted model that notes when the child first asks it."""

    def __init__(self) -> None:
        self.model = ScriptedModel.from_json(ONE_TURN)
        self.asked: int | None = None

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        if self.asked is None:
            self.asked = time.perf_counter_ns()
        return await self.model.complete(params)


async def _ready(sup: Supervisor, workspace: str, mode: str) -> float:
    model = _FirstTurn()
    t0 = time.perf_counter_ns()
    handle = await sup.start("bench", workspace=workspace, model=model, workspace_mode=mode)
    got = await handle.result()
    assert got.success, got.message
    assert model.asked is not None
    return (model.asked - t0) / 1e6


def _base(root: str, files: int) -> None:
    for i in range(files):
        d = os.path.join(root, f"d{i // 100}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "w") as fh:
            fh.write(f"line one of {i}\nline two\n")


def _changed_layer(tmp: str, base: str, n: int) -> layers.Layer:
    """A layer over `base` whose upper directory holds `n` of its files, each changed (as an
    overlay's copy-up leaves them)."""
    plan = layers.LayerPlan("overlay", base, os.path.join(tmp, f"layer-{n}"))
    layer = layers.make(plan)
    for i in range(n):
        d = os.path.join(plan.upper, f"d{i // 100}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "w") as fh:
            fh.write(f"line one of {i}\nline two, changed\n")
    return layer


async def layered_group(
    res: Results, rounds: int, workspace: str, base_files: int = BASE_FILES
) -> None:
    s: defaultdict[str, list[float]] = defaultdict(list)
    changed = (1, 100, base_files)
    method = layers.support().overlay or layers.support().copy
    async with Supervisor() as sup:
        for rnd in range(rounds + 1):  # round 0 warms caches (and the layer probe): dropped
            for mode in ("shared", "layered"):
                s[f"layered.ready_{mode}"].append(await _ready(sup, workspace, mode))
            if rnd == 0:
                for samples in s.values():
                    samples.clear()
    with tempfile.TemporaryDirectory(prefix="tether-bench-layers-") as tmp:
        base = os.path.join(tmp, "base")
        os.mkdir(base)
        await anyio.to_thread.run_sync(_base, base, base_files)
        for rnd in range(rounds + 1):
            t0 = time.perf_counter_ns()
            plan = layers.LayerPlan("overlay", base, os.path.join(tmp, f"made-{rnd}"))
            fresh = await anyio.to_thread.run_sync(layers.make, plan)
            took = (time.perf_counter_ns() - t0) / 1e6
            assert fresh.frozen
            fresh.discard()
            if rnd:
                s["layered.make"].append(took)
        made = {n: await anyio.to_thread.run_sync(_changed_layer, tmp, base, n) for n in changed}
        for rnd in range(rounds + 1):
            for n in changed:
                t0 = time.perf_counter_ns()
                cs = await anyio.to_thread.run_sync(changes.compute, made[n])
                took = (time.perf_counter_ns() - t0) / 1e6
                assert cs.files == n, (n, cs.files)
                if rnd:
                    s[f"layered.changes_{n}"].append(took)
        for layer in made.values():
            layer.discard()
    common = "one supervisor, the host's default isolation; `Supervisor.start` to the child's "
    res.add(
        Figure(
            "layered.ready_shared",
            "shared run: spawn → ready (first model turn asked)",
            "ms",
            s["layered.ready_shared"],
            f"{common}first `model/complete`, interleaved with the layered run",
        )
    )
    res.add(
        Figure(
            "layered.ready_layered",
            f"layered run ({method}): spawn → ready (first model turn asked)",
            "ms",
            s["layered.ready_layered"],
            f"{common}first `model/complete`: the layer made (its base's manifest, the copy for "
            "a copy) and mounted before the child's first instruction",
            floor="layered.ready_shared",
        )
    )
    res.add(
        Figure(
            "layered.make",
            f"making an overlay's layer over {base_files:,} files",
            "ms",
            s["layered.make"],
            "`layers.make`: the layer directory and its frozen base (a hard link per file, "
            "directories made anew) with the base's manifest; what a layered run pays before its "
            "spawn in such a workspace",
        )
    )
    for n in changed:
        res.add(
            Figure(
                f"layered.changes_{n}",
                f"change set of {n:,} changed file(s)",
                "ms",
                s[f"layered.changes_{n}"],
                f"`changes.compute` of an overlay layer whose upper holds {n:,} changed files "
                f"over a base of {base_files:,}: walk, lstat, SHA-256 of both sides, unified "
                "diff of each",
                floor="layered.changes_1" if n != 1 else None,
            )
        )


def main() -> None:
    from benchmarks.report import Results as R

    res = R(quick=True)
    with tempfile.TemporaryDirectory() as ws:
        anyio.run(layered_group, res, 3, ws)
    print(json.dumps({k: f.median for k, f in res.figures.items()}, indent=1))


if __name__ == "__main__":
    main()
