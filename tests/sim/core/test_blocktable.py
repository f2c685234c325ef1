"""The block table against a plain model of what it promises: which blocks an owner holds, who
uses them, the LRU order it gives them up in (a prompt's tail before its head), and that the
blocks of a prompt it holds are always a leading run (what lets `leading_hits` bisect)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core import blocktable as bt
from sim.core.jit import HAVE_NUMBA


def _callable(fn):
    """A core function, callable from Python (the compiled ones are called from compiled code)."""
    if not HAVE_NUMBA:
        return fn
    from numba import njit

    @njit
    def call(*args):
        return fn(*args)

    return call


leading_hits, locate, acquire, drop, add_run, remember, evict, find = map(
    _callable, (bt.leading_hits, bt.locate, bt.acquire, bt.drop, bt.add_run, bt.remember, bt.evict, bt.find))


def prompts_of(shapes: list[tuple[int, int, int]]) -> list[np.ndarray]:
    """Chained ids of prompts that each continue another's first blocks: (parent, shared, own).
    A block's id stands for its whole prefix, as the workloads' ids do."""
    names: dict[tuple, int] = {}
    chains: list[list[tuple]] = []
    for parent, shared, own in shapes:
        base = chains[parent % len(chains)][:shared] if chains else []
        chain = list(base)
        for k in range(own):
            chain.append((*(chain[-1] if chain else ()), (len(chains), k)))
        chains.append(chain)
    return [np.array([names.setdefault(key, 1000 + len(names)) for key in chain], dtype=np.int64)
            for chain in chains]


class Model:
    """What the table promises, written plainly: held ids and their users, unused ones in LRU order."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.refs: dict[int, int] = {}
        self.lru: list[int] = []  # unused, oldest first

    def leading(self, ids) -> int:
        n = 0
        while n < len(ids) and int(ids[n]) in self.refs:
            n += 1
        return n

    def acquire(self, ids) -> None:
        for x in map(int, ids):
            if self.refs[x] == 0:
                self.lru.remove(x)
            self.refs[x] += 1

    def drop(self, ids) -> None:
        for x in map(int, reversed(ids)):
            self.refs[x] -= 1
            if self.refs[x] == 0:
                self.lru.append(x)

    def evict(self, k: int) -> int:
        gone = 0
        while gone < k and self.lru:
            del self.refs[self.lru.pop(0)]
            gone += 1
        return gone

    def remember(self, ids) -> None:
        """A router's table: every block marked used, the prompt's head the newest."""
        for x in map(int, reversed(ids[: self.capacity])):
            if x in self.refs:
                self.lru.remove(x)
            elif len(self.refs) == self.capacity:
                self.evict(1)
            self.refs[x] = 0
            self.lru.append(x)


def check(raw: bt.BlockTable, model: Model, prompts: list[np.ndarray], ref) -> None:
    node, owner = raw.node, raw.owner
    order, n = [], owner[0, bt.HEAD]
    while n >= 0:
        order.append(int(node[n, bt.KEY]))
        n = node[n, bt.NEXT]
    assert order == model.lru
    held = {int(node[n, bt.KEY]): int(node[n, bt.REFS]) for n in range(len(node)) if node[n, bt.REFS] >= 0}
    assert held == model.refs
    assert owner[0, bt.SIZE] == len(held) and owner[0, bt.UNUSED] == len(model.lru)
    for ids in prompts:
        k = model.leading(ids)
        assert leading_hits(ref, 0, ids, 0, len(ids)) == k
        assert all(int(x) not in model.refs for x in ids[k:]), "held blocks are a leading run"
        for i in range(k):  # each held block points at its predecessor's node
            up = node[find(ref, 0, ids[i]), bt.UP]
            assert up == (find(ref, 0, ids[i - 1]) if i else -1)


shapes = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 6), st.integers(1, 6)), min_size=2, max_size=8)


@settings(max_examples=60, deadline=None)
@given(shapes=shapes, capacity=st.integers(4, 24),
       steps=st.lists(st.tuples(st.booleans(), st.integers(0, 99)), min_size=1, max_size=40))
def test_a_cache_matches_the_model(shapes, capacity, steps):
    """Requests take a prompt's cached head, add the rest, and let go: as an engine's cache."""
    prompts = prompts_of(shapes)
    raw = bt.block_table([capacity])
    ref = bt.block_table_ref(raw)
    model = Model(capacity)
    running: list[tuple[np.ndarray, np.ndarray, int]] = []  # (ids, nodes, blocks held)
    for start, pick in steps:
        if start or not running:
            ids = prompts[pick % len(prompts)]
            nodes = np.full(len(ids), -1, dtype=np.int32)
            k = leading_hits(ref, 0, ids, 0, len(ids))
            assert k == model.leading(ids)
            free = locate(ref, 0, ids, nodes, 0, k)
            assert free == sum(model.refs[int(x)] == 0 for x in ids[:k])
            acquire(ref, 0, nodes, 0, k)
            model.acquire(ids[:k])
            new = len(ids) - k  # computed privately, then shared if there is room for all of them
            short = len(model.refs) + new - capacity
            if short <= len(model.lru):
                assert evict(ref, 0, max(short, 0)) == model.evict(max(short, 0))
                add_run(ref, 0, ids, nodes, k, len(ids), nodes[k - 1] if k else -1)
                model.refs.update({int(x): 1 for x in ids[k:]})
                k = len(ids)
            running.append((ids, nodes, k))
        else:
            ids, nodes, k = running.pop(pick % len(running))
            drop(ref, 0, nodes, 0, k)
            model.drop(ids[:k])
        check(raw, model, prompts, ref)


@settings(max_examples=60, deadline=None)
@given(shapes=shapes, capacity=st.integers(2, 24), picks=st.lists(st.integers(0, 99), min_size=1, max_size=40))
def test_a_routers_picture_matches_the_model(shapes, capacity, picks):
    """A router remembers each prompt it routes (no references): LRU, the prompt's tail first."""
    prompts = prompts_of(shapes)
    raw = bt.block_table([capacity])
    ref = bt.block_table_ref(raw)
    model = Model(capacity)
    for pick in picks:
        ids = prompts[pick % len(prompts)]
        remember(ref, 0, ids, 0, len(ids), leading_hits(ref, 0, ids, 0, len(ids)))
        model.remember(ids)
        check(raw, model, prompts, ref)


def test_a_prompts_tail_goes_before_its_head():
    """Let go of a cached prompt and make room for one block: its last block goes (as vLLM
    frees a request's blocks), and its first three still serve the next request."""
    raw = bt.block_table([6])
    ref = bt.block_table_ref(raw)
    ids = np.array([11, 12, 13, 14], dtype=np.int64)
    nodes = np.full(4, -1, dtype=np.int32)
    add_run(ref, 0, ids, nodes, 0, 4, -1)
    drop(ref, 0, nodes, 0, 4)
    assert evict(ref, 0, 1) == 1
    assert leading_hits(ref, 0, ids, 0, 4) == 3
