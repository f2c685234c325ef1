"""Prefix caching: shared KV blocks are computed once, reused, and evicted LRU."""

from __future__ import annotations

import numpy as np
import pytest

from sim.loops.run import simulate
from sim.scenario.memory import BlockAllocator
from tests.sim.helpers import scenario

SHARED = {"workload__shared_prefix": {"num_prompts": 4, "length": 1600, "popularity": "uniform"},
          "workload__prompt_len": {"dist": "uniform", "min": 10, "max": 300},
          "workload__arrival": {"process": "poisson", "rate": 10}}


def test_hits_skip_the_cached_prefix_tokens():
    r = simulate(scenario(scheduler__prefix_caching=True, **SHARED))
    df = r.requests
    assert (df["status"] == "finished").all()
    hits = df[df["cached_tokens"] > 0]
    # 1600-token system prompts = 100 full blocks of 16: a hit reuses all of them
    assert len(hits) > 0.9 * len(df) - 4
    assert (hits["cached_tokens"] == 1600).all()
    assert r.summary["prefix_hit_rate"] == pytest.approx(df["cached_tokens"].sum() / df["prompt_tokens"].sum())
    # prefill work actually shrinks: the steps carry only the uncached tokens
    assert r.steps["prefill_tokens"].sum() == (df["prompt_tokens"] - df["cached_tokens"]).sum()


def test_prefix_caching_cuts_ttft_on_a_shared_prompt_workload():
    base = simulate(scenario(scheduler__prefix_caching=False, **SHARED)).summary
    cached = simulate(scenario(scheduler__prefix_caching=True, **SHARED)).summary
    assert cached["ttft_p50"] < 0.5 * base["ttft_p50"]
    assert base["prefix_hit_rate"] == 0


def test_lru_eviction_keeps_the_recently_used_prefix():
    a = BlockAllocator(num_blocks=4, block_size=16, prefix_caching=True)
    for ids in ([1, 2], [3, 4]):
        a.allocate(2)
        assert a.insert(ids) == 2
        a.drop(ids)  # the request finished: cached, unreferenced, evictable
    assert a.free == 0 and a.available == 4
    assert a.cached_prefix(np.array([1, 2])) == 2
    a.acquire([1, 2])
    a.drop([1, 2])  # [1, 2] is now the most recently used
    a.allocate(2)  # needs room: evicts the least recently used, [3, 4]
    assert a.cached_prefix(np.array([3, 4])) == 0
    assert a.cached_prefix(np.array([1, 2])) == 2
    with pytest.raises(RuntimeError):
        a.acquire([1, 2])
        a.allocate(1)  # nothing evictable: the cached blocks are pinned


def test_a_finished_requests_prefix_serves_the_next_one():
    s = scenario(scheduler__prefix_caching=True, workload__num_requests=2,
                 workload__arrival={"process": "constant", "rate": 0.5},
                 workload__shared_prefix={"num_prompts": 1, "length": 320},
                 workload__prompt_len={"dist": "fixed", "value": 1})
    df = simulate(s).requests
    assert (df["status"] == "finished").all()
    # 321-token prompts: 20 full blocks shareable; the second request reuses them
    assert df["cached_tokens"].tolist() == [0, 320]


def test_prefix_affinity_routes_a_prefix_to_one_replica():
    r = simulate(scenario(replicas=3, router={"policy": "prefix-affinity"},
                          scheduler__prefix_caching=True, **SHARED))
    from sim.traffic import build_workload

    w = build_workload(scenario(replicas=3, **SHARED))
    first = np.array([w.prefix_hashes[w.prefix_offsets[i]] for i in range(len(w))])
    replicas_per_prefix = r.requests.groupby(first)["replica"].nunique()
    assert (replicas_per_prefix == 1).all()


def test_a_fully_cached_prompt_still_computes_its_last_token():
    from sim.core.policies import make_policy
    from sim.core.requests import RequestTable
    from sim.scenario.schema import Scheduler

    t = RequestTable(np.zeros(2), np.array([64, 64]), np.array([4, 4]))
    t.prefix_offsets = np.array([0, 4, 8])
    t.prefix_hashes = np.array([7, 8, 9, 10, 7, 8, 9, 10])  # both prompts: 4 identical blocks
    blocks = BlockAllocator(100, 16, prefix_caching=True)
    policy = make_policy(Scheduler(prefix_caching=True), t, blocks, 4096)
    policy.add(0)
    plan = policy.schedule(0.0)
    policy.commit(plan)
    policy.add(1)
    plan = policy.schedule(0.0)
    assert plan.req_ids.tolist() == [1]
    assert plan.num_computed.tolist() == [48] and plan.num_new_tokens.tolist() == [16]
    assert t.cached_tokens[1] == 48  # 3 of 4 blocks: the last token must be computed for logits
