"""Where a run goes: per-node capacity, node selection, and what happens when nodes are full or
gone. Pure bookkeeping (`Slots`) plus the one waiting room that uses it (`Placer`).

The policy, decided once for every placement:

- **Capacity.** Each node takes at most `per_node` runs at a time (its host actor serves that
  many; Ray's own resources are logical and enforce nothing, so the count is kept here).
- **Selection.** A run goes to the node with the fewest runs in flight; ties go to the node
  that has waited longest since it was last given one (round robin among equals).
- **Full.** When every node is at capacity a run waits, first come first served
  (`when_full="queue"`, the default), or ends at once with `spawn_failed` (`"fail"`).
- **A node dies.** Its runs end `placement_lost` and are **not moved**: a child may have
  written to its workspace or spent model tokens, and running it again is the caller's call,
  not the engine's. The node leaves the rotation for good; waiting runs go to the nodes
  left. When no node is left, every waiting and every later run ends `placement_lost` at once.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

WhenFull = Literal["queue", "fail"]


class NoNodeLeft(Exception):
    """Every node of the placement is lost: nothing can run any more."""


class NodesFull(Exception):
    """Every node is at capacity and the placement fails fast (`when_full="fail"`)."""


@dataclass
class Slots:
    """Runs in flight per node, with the rotation order among equally loaded nodes."""

    per_node: int
    nodes: list[str]
    load: dict[str, int] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    _last_given: dict[str, int] = field(default_factory=dict)
    _clock: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        if self.per_node < 1:
            raise ValueError("per_node must be at least 1")
        if not self.nodes:
            raise ValueError("a placement needs at least one node")
        for i, node in enumerate(self.nodes):
            self.load.setdefault(node, 0)
            self._last_given.setdefault(node, -len(self.nodes) + i)

    @property
    def alive(self) -> list[str]:
        return [n for n in self.nodes if n not in self.lost]

    def take(self) -> str | None:
        """A node with room for one more run (now counted there), or `None` if all are full."""
        free = [n for n in self.alive if self.load[n] < self.per_node]
        if not free:
            return None
        node = min(free, key=lambda n: (self.load[n], self._last_given[n]))
        self.load[node] += 1
        self._last_given[node] = next(self._clock)
        return node

    def give_back(self, node: str) -> None:
        if self.load.get(node, 0) > 0:
            self.load[node] -= 1

    def lose(self, node: str) -> None:
        self.lost.add(node)


class Placer:
    """Hands out slots to runs in arrival order; see the module docstring for the policy."""

    def __init__(self, nodes: Iterable[str], per_node: int, when_full: WhenFull) -> None:
        if when_full not in ("queue", "fail"):
            raise ValueError(f"when_full must be 'queue' or 'fail', not {when_full!r}")
        self.slots = Slots(per_node, list(nodes))
        self.when_full = when_full
        self._waiting: deque[anyio.Event] = deque()

    async def acquire(self) -> str:
        """A node for one run; waits for room (queue), or raises `NodesFull` / `NoNodeLeft`."""
        if not self.slots.alive:
            raise NoNodeLeft
        if not self._waiting:
            node = self.slots.take()
            if node is not None:
                return node
        if self.when_full == "fail":
            raise NodesFull
        turn = anyio.Event()
        self._waiting.append(turn)
        try:
            while True:
                await turn.wait()
                if not self.slots.alive:
                    raise NoNodeLeft
                node = self.slots.take()
                if node is not None:
                    self._waiting.remove(turn)
                    self._wake_next()
                    return node
                turn = self._requeue(turn)
        except BaseException:
            if turn in self._waiting:
                self._waiting.remove(turn)
                self._wake_next()  # pass the wake-up on: it may have been meant for us
            raise

    def _requeue(self, old: anyio.Event) -> anyio.Event:
        """Woken but no room after all: wait again, keeping our place at the head."""
        new = anyio.Event()
        i = self._waiting.index(old)
        self._waiting[i] = new
        return new

    def release(self, node: str) -> None:
        self.slots.give_back(node)
        self._wake_next()

    def lose(self, node: str) -> None:
        """The node is gone: out of the rotation; if none is left, every waiter fails."""
        self.slots.lose(node)
        if not self.slots.alive:
            for turn in self._waiting:
                turn.set()
        else:
            self._wake_next()

    def _wake_next(self) -> None:
        if self._waiting:
            self._waiting[0].set()

    @property
    def waiting(self) -> int:
        return len(self._waiting)


NodeSelection = str | Sequence[str] | Mapping[str, str]
"""`"all"`, node ids, or labels every selected node must carry (`{"pool": "sandbox"}`)."""


def select_nodes(selection: NodeSelection, nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids of the alive nodes `selection` names, in the engine's order. `nodes` are the
    engine's node records (`NodeID`, `Alive`, `Labels`). Raises `ValueError` when a named
    node is not alive, or when nothing matches."""
    alive = [n for n in nodes if n.get("Alive")]
    ids = [str(n["NodeID"]) for n in alive]
    if isinstance(selection, str):
        if selection != "all":
            raise ValueError(f"nodes={selection!r}: expected 'all', node ids or a label mapping")
        chosen = ids
    elif isinstance(selection, Mapping):
        chosen = [
            str(n["NodeID"])
            for n in alive
            if all(dict(n.get("Labels") or {}).get(k) == v for k, v in selection.items())
        ]
        if not chosen:
            raise ValueError(f"no alive node carries the labels {dict(selection)!r}")
    else:
        missing = [n for n in selection if n not in ids]
        if missing:
            raise ValueError(f"nodes not alive in the cluster: {', '.join(missing)}")
        chosen = [n for n in ids if n in set(selection)]
    if not chosen:
        raise ValueError("the cluster has no alive node")
    return chosen
