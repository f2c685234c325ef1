"""The block manager: counts -> physical ids, frees, reuse, and recompute after preemption."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_ref import commit, make_executor, plan_for, table_for

from engine.kv_cache import BlockManager, KVCache, num_blocks_for_budget
from sim.core.plan import BatchPlan
from sim.scenario.specs import get_model


def _plan(ids, blocks, freed=(), preempted=()) -> BatchPlan:
    n = len(ids)
    return BatchPlan(
        req_ids=np.array(ids, dtype=np.int64), num_new_tokens=np.ones(n, dtype=np.int64),
        num_computed=np.zeros(n, dtype=np.int64), samples=np.zeros(n, dtype=bool),
        num_blocks=np.array(blocks, dtype=np.int64),
        freed=np.array(freed, dtype=np.int64), preempted=np.array(preempted, dtype=np.int64),
    )  # fmt: skip


def _check(bm: BlockManager) -> None:
    held = [b for ids in bm.tables.values() for b in ids]
    everything = held + list(bm.free_ids)
    assert sorted(everything) == list(range(bm.num_blocks)), "an id is lost or handed out twice"


def test_counts_map_to_distinct_ids_and_grow_in_place():
    bm = BlockManager(10, 4)
    bm.apply(_plan([3, 7], [2, 3]))
    a, b = list(bm.blocks_of(3)), list(bm.blocks_of(7))
    assert len(a) == 2 and len(b) == 3 and not set(a) & set(b)
    bm.apply(_plan([3, 7], [4, 3]))
    assert bm.blocks_of(3)[:2] == a and len(bm.blocks_of(3)) == 4  # grows, keeps its first ids
    assert bm.blocks_of(7) == b and bm.num_free == 3
    _check(bm)


def test_freed_and_preempted_release_everything():
    bm = BlockManager(8, 4)
    bm.apply(_plan([0, 1, 2], [2, 3, 3]))
    bm.apply(_plan([2], [3], freed=[0], preempted=[1]))
    assert bm.blocks_of(0) == [] and bm.blocks_of(1) == [] and bm.num_free == 5
    bm.apply(_plan([1], [5]))  # the preempted request comes back and reuses freed ids
    assert bm.num_free == 0
    _check(bm)
    with pytest.raises(RuntimeError, match="KV blocks"):
        bm.apply(_plan([9], [1]))


def test_random_plans_never_hand_out_an_id_twice():
    rng = np.random.default_rng(0)
    bm = BlockManager(64, 16)
    live: dict[int, int] = {}
    next_id = 0
    for _ in range(500):
        freed, preempted = [], []
        for rid in list(live):
            u = rng.random()
            if u < 0.1:
                freed.append(rid)
                del live[rid]
            elif u < 0.15:
                preempted.append(rid)
                del live[rid]
        free = 64 - sum(live.values())
        for rid in live:
            if free and rng.random() < 0.5:
                live[rid] += 1
                free -= 1
        if free >= 2 and rng.random() < 0.5:
            live[next_id] = int(rng.integers(1, min(free, 8) + 1))
            next_id += 1
        ids = list(live)
        bm.apply(_plan(ids, [live[r] for r in ids], freed, preempted))
        _check(bm)
        assert all(len(bm.blocks_of(r)) == n for r, n in live.items())


def test_block_table_and_slot_mapping():
    bm = BlockManager(16, 4)
    bm.free_ids.rotate(5)  # non-trivial ids
    plan = _plan([0, 1], [3, 1])
    bm.apply(plan)
    seq_lens = np.array([10, 2])
    table = bm.block_table(plan.req_ids, seq_lens)
    assert table.shape == (2, 3) and table.dtype == np.int32
    assert table[0].tolist() == bm.blocks_of(0) and table[1, 0] == bm.blocks_of(1)[0]
    slots = bm.slot_mapping(table, np.array([7, 0]), np.array([3, 2]))
    ids0, ids1 = bm.blocks_of(0), bm.blocks_of(1)
    want = [ids0[p // 4] * 4 + p % 4 for p in (7, 8, 9)] + [ids1[0] * 4 + p for p in (0, 1)]
    assert slots.tolist() == want


def test_kv_cache_shapes_and_budget():
    spec = get_model("tiny-llama")
    n = num_blocks_for_budget(spec, 1 << 20, 16, torch.float32)
    per_block = 2 * spec.num_layers * spec.kv_size * 16 * 4
    assert n == (1 << 20) // per_block
    kv = KVCache(spec, n, 16, torch.float32, "cpu")
    assert len(kv.layers) == spec.num_layers
    assert kv.layers[0][0].shape == (n, 16, spec.num_kv_heads, spec.head_dim)
    assert kv.nbytes == n * per_block


def test_recompute_after_preemption_gives_the_same_greedy_tokens(tiny):
    """Request 0 is preempted mid-decode (blocks freed, num_computed back to 0) and request 1
    overwrites some of its blocks; 0 is re-prefilled from prompt + output so far and goes on
    exactly as if nothing had happened. All 6 blocks are in use at the end."""
    v = tiny.spec.vocab_size
    prompts = [np.random.default_rng(i).integers(0, v, n).tolist() for i, n in ((0, 11), (1, 14))]

    def run(preempt: bool) -> list[int]:
        table = table_for(prompts, output_len=12)
        ex = make_executor(tiny, prompts, num_blocks=6, block_size=4, shuffle=3)
        steps = [[(0, 11)]] + [[(0, 1)]] * 4
        for rows in steps:
            plan = plan_for(table, 4, rows)
            ex.run(plan, table)
            commit(table, plan)
        if preempt:  # free request 0, let request 1 use (some of) its blocks, then recompute
            table.num_computed[0] = 0
            held = set(ex.blocks.blocks_of(0))
            plan = plan_for(table, 4, [(1, 14)], preempted=[0])
            ex.run(plan, table)
            assert held & set(ex.blocks.blocks_of(1)), "request 1 should reuse 0's blocks"
            commit(table, plan)
            plan = plan_for(table, 4, [(0, int(table.num_tokens[0]))], freed=[1])
            ex.run(plan, table)
            commit(table, plan)
        for _ in range(5 if preempt else 6):  # the re-prefill sampled one token
            plan = plan_for(table, 4, [(0, 1)])
            ex.run(plan, table)
            commit(table, plan)
        return ex.generated_tokens(0)

    want = run(False)
    assert len(want) == 11 and run(True) == want
