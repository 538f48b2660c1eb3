"""The placement policy without a cluster: capacity, selection, full and lost nodes.

Pure bookkeeping gets hypothesis properties (`Slots`); the waiting room (`Placer`) gets real
anyio tasks.
"""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.placement.policy import NodesFull, NoNodeLeft, Placer, Slots, select_nodes

NODES = ["a", "b", "c"]

# One step of a random workload: take a slot, give one back, or lose a node.
steps = st.lists(
    st.one_of(
        st.just(("take", "")),
        st.tuples(st.just("give"), st.sampled_from(NODES)),
        st.tuples(st.just("lose"), st.sampled_from(NODES)),
    ),
    max_size=60,
)


@given(per_node=st.integers(1, 4), workload=steps)
def test_no_node_ever_holds_more_than_its_capacity_or_gets_a_run_once_lost(
    per_node: int, workload: list[tuple[str, str]]
) -> None:
    slots = Slots(per_node, list(NODES))
    held: dict[str, int] = dict.fromkeys(NODES, 0)
    for op, node in workload:
        if op == "take":
            got = slots.take()
            free = [n for n in NODES if n not in slots.lost and held[n] < per_node]
            assert (got is None) == (not free)
            if got is not None:
                assert got not in slots.lost
                # the least loaded node with room was chosen
                assert held[got] == min(held[n] for n in free)
                held[got] += 1
        elif op == "give" and held[node] > 0:
            slots.give_back(node)
            held[node] -= 1
        elif op == "lose":
            slots.lose(node)
        assert all(0 <= slots.load[n] == held[n] <= per_node for n in NODES)


@given(per_node=st.integers(1, 5), nodes=st.integers(1, 5))
def test_filling_an_empty_placement_spreads_runs_evenly(per_node: int, nodes: int) -> None:
    names = [f"n{i}" for i in range(nodes)]
    slots = Slots(per_node, names)
    for taken in range(1, per_node * nodes + 1):
        assert slots.take() is not None
        loads = [slots.load[n] for n in names]
        assert max(loads) - min(loads) <= 1, loads
        assert sum(loads) == taken
    assert slots.take() is None


def test_equally_loaded_nodes_take_turns() -> None:
    slots = Slots(2, ["a", "b"])
    first = slots.take()
    assert first == "a"
    slots.give_back("a")
    assert slots.take() == "b", "the node that waited longest goes next"


def test_a_placement_needs_nodes_and_room() -> None:
    with pytest.raises(ValueError):
        Slots(0, ["a"])
    with pytest.raises(ValueError):
        Slots(1, [])


@pytest.mark.anyio
async def test_waiting_runs_get_slots_in_arrival_order() -> None:
    placer = Placer(["a"], 1, "queue")
    assert await placer.acquire() == "a"
    order: list[int] = []

    async def waiter(i: int) -> None:
        await placer.acquire()
        order.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(waiter, i)
            await anyio.wait_all_tasks_blocked()
        assert placer.waiting == 3
        for _ in range(3):
            placer.release("a")
            await anyio.wait_all_tasks_blocked()
    assert order == [0, 1, 2]


@pytest.mark.anyio
async def test_fail_fast_refuses_when_full_and_losing_every_node_fails_every_waiter() -> None:
    fast = Placer(["a"], 1, "fail")
    await fast.acquire()
    with pytest.raises(NodesFull):
        await fast.acquire()

    placer = Placer(["a", "b"], 1, "queue")
    await placer.acquire()
    await placer.acquire()
    failures: list[str] = []

    async def waiter() -> None:
        try:
            await placer.acquire()
        except NoNodeLeft:
            failures.append("lost")

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        placer.lose("a")
        await anyio.wait_all_tasks_blocked()
        assert failures == [] and placer.waiting == 2  # b is still there, only full
        placer.lose("b")
    assert failures == ["lost", "lost"]
    with pytest.raises(NoNodeLeft):
        await placer.acquire()


@pytest.mark.anyio
async def test_a_lost_node_s_slot_is_never_handed_out_again() -> None:
    placer = Placer(["a", "b"], 1, "queue")
    assert await placer.acquire() == "a"
    assert await placer.acquire() == "b"
    got: list[str] = []

    async def waiter() -> None:
        got.append(await placer.acquire())

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        placer.lose("a")
        placer.release("a")  # its run ended (lost): the slot does not come back
        await anyio.wait_all_tasks_blocked()
        assert got == []
        placer.release("b")
    assert got == ["b"]


@pytest.mark.anyio
async def test_a_cancelled_waiter_leaves_the_queue_and_the_next_one_gets_the_slot() -> None:
    placer = Placer(["a"], 1, "queue")
    await placer.acquire()
    got: list[str] = []
    head = anyio.CancelScope()

    async def first() -> None:
        with head:
            got.append("first:" + await placer.acquire())

    async def second() -> None:
        got.append("second:" + await placer.acquire())

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(second)
        await anyio.wait_all_tasks_blocked()
        head.cancel()  # the first waiter gives up...
        await anyio.wait_all_tasks_blocked()
        placer.release("a")  # ...so the slot goes to the second
    assert got == ["second:a"]
    assert placer.waiting == 0


NODE_RECORDS = [
    {"NodeID": "n1", "Alive": True, "Labels": {"pool": "gpu"}},
    {"NodeID": "n2", "Alive": True, "Labels": {"pool": "sandbox"}},
    {"NodeID": "n3", "Alive": False, "Labels": {"pool": "sandbox"}},
]


def test_nodes_are_selected_by_all_by_id_or_by_label_and_only_alive() -> None:
    assert select_nodes("all", NODE_RECORDS) == ["n1", "n2"]
    assert select_nodes(["n2"], NODE_RECORDS) == ["n2"]
    assert select_nodes({"pool": "sandbox"}, NODE_RECORDS) == ["n2"]
    with pytest.raises(ValueError, match="not alive"):
        select_nodes(["n3"], NODE_RECORDS)
    with pytest.raises(ValueError, match="labels"):
        select_nodes({"pool": "tpu"}, NODE_RECORDS)
    with pytest.raises(ValueError, match="expected 'all'"):
        select_nodes("some", NODE_RECORDS)
    with pytest.raises(ValueError, match="no alive node"):
        select_nodes("all", NODE_RECORDS[2:])
