"""Prefix caching: shared KV blocks are computed once, reused, and evicted LRU."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.requests import RequestTable
from sim.core.standalone import Standalone
from sim.loops.run import simulate
from sim.scenario.schema import Scheduler
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


def run_alone(engine: Standalone, rid: int) -> None:
    """Serve ``rid`` alone from arrival to its last token."""
    engine.add(rid)
    while engine.schedule() is not None:
        engine.commit()


def test_lru_eviction_keeps_the_recently_used_prefix():
    # Six blocks of 16 tokens. A and B cache two prompt blocks each; A's come back into use,
    # so a request needing four blocks evicts B's (the least recently used) and keeps A's.
    prompts = {"A": ([1, 2], 33), "B": ([3, 4], 33), "A again": ([1, 2], 33), "C": ([], 64),
               "B again": ([3, 4], 33), "A third": ([1, 2], 33)}
    ids = [x for blocks, _ in prompts.values() for x in blocks]
    offsets = np.cumsum([0] + [len(blocks) for blocks, _ in prompts.values()])
    t = RequestTable(np.zeros(len(prompts)), np.array([n for _, n in prompts.values()]), np.ones(len(prompts)))
    t.set_prefix_ids(offsets, ids)
    engine = Standalone(Scheduler(prefix_caching=True, watermark=0.0), t, num_blocks=6, block_size=16,
                        max_model_len=4096)
    for rid in range(len(prompts)):
        run_alone(engine, rid)
    assert (t.status == 3).all()  # all finished
    assert dict(zip(prompts, t.cached_tokens.tolist(), strict=True)) == {
        "A": 0, "B": 0, "A again": 32, "C": 0, "B again": 0, "A third": 32}


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
    t = RequestTable(np.zeros(2), np.array([64, 64]), np.array([4, 4]))
    t.set_prefix_ids([0, 4, 8], [7, 8, 9, 10, 7, 8, 9, 10])  # both prompts: 4 identical blocks
    engine = Standalone(Scheduler(prefix_caching=True), t, num_blocks=100, block_size=16, max_model_len=4096)
    engine.add(0)
    engine.schedule()
    engine.commit()
    engine.add(1)
    plan = engine.schedule()
    assert plan.req_ids.tolist() == [0, 1] or plan.req_ids.tolist() == [1]
    row = plan.req_ids.tolist().index(1)
    assert plan.num_computed[row] == 48 and plan.num_new_tokens[row] == 16
    assert t.cached_tokens[1] == 48  # 3 of 4 blocks: the last token must be computed for logits


def conversation_trace(path, sessions: int = 40, turns: int = 6) -> str:
    """A Mooncake-format trace of conversations that all share a 3-block system prompt: turn t
    of a session carries the session's earlier blocks plus one new block (512 tokens each)."""
    import json

    rows = []
    for s in range(sessions):
        own = [1000 + 100 * s + t for t in range(turns)]
        for t in range(turns):
            ids = [0, 1, 2, *own[: t + 1]]
            rows.append({"timestamp": 250 * s + 3000 * t, "input_length": 512 * len(ids) - 100,
                         "output_length": 120, "hash_ids": ids})
    rows.sort(key=lambda r: r["timestamp"])
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


def test_prefix_affinity_spreads_a_shared_system_prompt_and_keeps_conversations_home(tmp_path):
    from sim.traffic import build_workload

    trace = conversation_trace(tmp_path / "conv.jsonl")
    fields = {"replicas": 4, "scheduler__policy": "chunked-prefill", "scheduler__chunk_size": 2048,
              "scheduler__prefix_caching": True,
              "workload": {"trace": {"path": trace, "format": "mooncake", "hash_block_size": 512}}}
    s = scenario(router={"policy": "prefix-affinity", "balance_abs": 4}, **fields)
    r = simulate(s)
    share = r.requests["replica"].value_counts(normalize=True)
    assert len(share) == 4 and share.min() > 0.05 and share.max() < 0.5, share  # not all on one replica
    w = build_workload(s)
    session = np.array([w.prefix_hashes[w.prefix_offsets[i] + 3 * 32] for i in range(len(w))])  # its own block
    home = r.requests.groupby(session)["replica"].agg(lambda x: x.value_counts().iloc[0] / len(x))
    assert home.mean() > 0.8  # a conversation's turns mostly go where its history is cached
    rr = simulate(scenario(router={"policy": "round-robin"}, **fields))
    assert r.summary["prefix_hit_rate"] > rr.summary["prefix_hit_rate"] + 0.1
