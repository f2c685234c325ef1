"""Sliding-window layers keep at most their window (+ a block) of a request's tokens, as the
engines free what leaves the window: the core counts a long request's blocks that way
(sim/core/kvblocks.py), so admission, preemption and the KV figures see the memory the
engines really use. With prefix caching too: a cached block's windowed share is free once every
request using it has left it behind, and a re-hit re-takes only the share within its window."""

from __future__ import annotations

import math

import numpy as np

from sim.core.requests import RequestTable
from sim.core.standalone import Standalone
from sim.core.state import Counter, Setting
from sim.loops.run import simulate
from sim.scenario.load import load_scenario
from sim.scenario.schema import Scheduler
from tests.sim.helpers import scenario

SHARE = round(52 / 62 * 1_000_000)  # Gemma-3-27B: 52 of 62 layers are sliding, the same KV per layer


def capped(tokens: int, w: int = 65, share: int = SHARE) -> int:
    """Blocks of a request of ``tokens`` tokens (16 a block): every block's full-attention share,
    its window's windowed share."""
    n = -(-tokens // 16)
    return n if n <= w else -(-((1_000_000 - share) * n + share * w) // 1_000_000)

GEMMA = {"model": "gemma-3-27b", "hardware": {"gpu": "H100-SXM"}}


def _lone(prompt: int, output: int, **fields):
    return scenario(**GEMMA, workload__num_requests=1, workload__prompt_len={"dist": "fixed", "value": prompt},
                    workload__output_len={"dist": "fixed", "value": output}, **fields)


def test_the_cap_is_the_windowed_layers_share_and_window():
    mem = load_scenario(None, ["model=gemma-3-27b", "hardware.gpu=H100-SXM"]).replica_specs[0].memory
    assert mem.window_ppm == round(52 / 62 * 1_000_000)  # 52 of 62 layers, the same KV per layer
    assert mem.window_blocks == 1024 // 16 + 1
    cached = load_scenario(None, ["model=gemma-3-27b", "hardware.gpu=H100-SXM", "scheduler.prefix_caching=true"])
    assert cached.replica_specs[0].memory.window_ppm == mem.window_ppm  # prefix caching caps them too
    assert cached.replica_specs[0].memory.window_blocks == mem.window_blocks
    plain = load_scenario(None, ["model=llama-3-8b"]).replica_specs[0].memory
    assert plain.window_ppm == 0 and plain.window_blocks == 0


def test_a_long_request_holds_its_window_in_windowed_layers():
    """4,000 + 100 tokens: 257 blocks of tokens; the 10 global layers hold all of them, the 52
    windowed ones 65, so the request holds ceil(10/62 × 257 + 52/62 × 65) blocks — once its
    prompt is computed: while it is (one step of 4,000 tokens in flight) the windowed layers hold
    all 250 of its blocks (cdiv(1023 + 4000, 16) + 1 = 316 > 250, sim/core/kvblocks.py: window_cap)."""
    steps = simulate(_lone(4000, 100)).steps
    n, w, share = math.ceil(4100 / 16), 65, round(52 / 62 * 1e6)
    assert steps["kv_blocks_used"].iloc[0] == 250
    assert steps["kv_blocks_used"].iloc[1:].max() == -(-((1_000_000 - share) * n + share * w) // 1_000_000)
    short = simulate(_lone(500, 100)).steps  # within the window: every block, as before
    assert short["kv_blocks_used"].max() == math.ceil(600 / 16)
    assert steps["kv_blocks_used"].iloc[1:].max() == capped(4100)


def test_prefix_caching_counts_a_long_request_exactly_as_the_cap():
    """Its prompt's 250 blocks go into the cache after the prefill; those its window has left
    are loose (their windowed share free), so it holds what it would without caching, step by
    step."""
    plain = simulate(_lone(4000, 100)).steps
    cached = simulate(_lone(4000, 100, scheduler__prefix_caching=True)).steps
    assert cached["kv_blocks_used"].tolist() == plain["kv_blocks_used"].tolist()
    assert cached["kv_blocks_used"].tolist() == [250] + [capped(4000 + i) for i in range(1, 100)]


def test_a_cached_long_prompt_re_hit_takes_its_window_back():
    """The second request finds all 250 blocks of the 4,000-token system prompt; the 185 behind
    its window only lend it their full-attention share, so it holds what an uncached request of
    4,016 tokens would."""
    s = scenario(**GEMMA, scheduler__prefix_caching=True, workload__num_requests=2,
                 workload__arrival={"process": "constant", "rate": 0.05},
                 workload__shared_prefix={"num_prompts": 1, "length": 4000},
                 workload__prompt_len={"dist": "fixed", "value": 16},
                 workload__output_len={"dist": "fixed", "value": 100})
    r = simulate(s)
    assert r.requests["cached_tokens"].tolist() == [0, 4000]
    second = r.steps[r.steps["start"] >= r.requests["arrival"].iloc[1]]
    assert second["kv_blocks_used"].tolist() == [capped(4016 + i) for i in range(100)]


def test_under_memory_pressure_prefix_caching_holds_what_the_cap_holds():
    """40 long requests in 1,200 blocks: without a shared prefix, prefix caching changes nothing of
    what they hold (it used to count every token in the windowed layers: half the batch); with
    one, the shared blocks are held once and more requests run at once."""
    load = {"hardware__kv_blocks": 1200, "workload__num_requests": 40,
            "workload__arrival": {"process": "constant", "rate": 1000},
            "workload__prompt_len": {"dist": "fixed", "value": 6000},
            "workload__output_len": {"dist": "fixed", "value": 200}}
    plain = simulate(scenario(**GEMMA, **load))
    cached = simulate(scenario(**GEMMA, scheduler__prefix_caching=True, **load))
    assert cached.summary["mean_batch_size"] == plain.summary["mean_batch_size"]
    assert cached.steps["kv_blocks_used"].tolist() == plain.steps["kv_blocks_used"].tolist()
    shared = simulate(scenario(**GEMMA, scheduler__prefix_caching=True, **{
        **load, "workload__prompt_len": {"dist": "fixed", "value": 3000},
        "workload__shared_prefix": {"num_prompts": 2, "length": 3000}}))
    assert (shared.requests["status"] == "finished").all()
    assert shared.summary["mean_batch_size"] > 1.2 * plain.summary["mean_batch_size"]
    assert shared.steps["kv_blocks_used"].max() <= 1200


def _windowed_engine(t: RequestTable, blocks: int) -> Standalone:
    """An engine of ``blocks`` blocks of 16 tokens whose windowed layers take half of a block's
    bytes and keep 3 blocks (a 32-token window), with prefix caching."""
    engine = Standalone(Scheduler(prefix_caching=True, watermark=0.0), t, num_blocks=blocks, block_size=16,
                        max_model_len=4096)
    engine.core.settings[0, Setting.WINDOW_PPM] = 500_000
    engine.core.settings[0, Setting.WINDOW_BLOCKS] = 3
    engine.core.settings[0, Setting.WINDOW] = 32  # cdiv(32, 16) + 1 = 3
    return engine


def test_two_requests_sharing_a_prompt_hold_its_windowed_share_while_either_window_covers_it():
    """A plain model of the memory, step by step: each request's own blocks (the full share of
    each, the windowed share of those within its window), plus each shared block whole while
    some request has it within its window, else half (its windowed share freed)."""
    t = RequestTable(np.zeros(2), np.array([161, 161]), np.array([60, 30]))
    t.set_prefix_ids([0, 10, 20], list(range(10)) * 2)  # the same 10 prompt blocks (+ a token each)
    engine = _windowed_engine(t, 200)
    engine.add(0)
    checked = 0
    while True:
        if checked == 3:
            engine.add(1)  # once the first is decoding
        plan = engine.schedule()
        if plan is None:
            break
        tokens = {rid: int(t.num_computed[rid]) for rid in range(2) if t.status[rid] == 2}  # running, idle
        tokens |= dict(zip(plan.req_ids.tolist(), (plan.num_computed + plan.num_new_tokens).tolist(), strict=True))
        flight = dict(zip(plan.req_ids.tolist(), plan.num_new_tokens.tolist(), strict=True))
        expected, covered = 0, set()
        shared = 0
        for rid, n_tok in tokens.items():
            n = -(-n_tok // 16)
            k = int(t.cache_blocks[rid])
            m = n - k
            f = flight.get(rid, 1)  # a prefill's tokens in flight: the window's last 31 and those, + a block
            w = 3 if f <= 1 else -(-(31 + f) // 16) + 1
            expected += -(-(m + min(m, w)) // 2)  # (full share of m + windowed share of min(m, w)) / 2, up
            covered |= set(range(max(n - 3, 0), k))
            shared = max(shared, k)
        loose = shared - len(covered)
        expected += shared - loose // 2
        engine.commit()
        assert engine.core.counters[0, Counter.USED_AT] == expected, (checked, tokens)
        checked += 1
    assert t.cached_tokens.tolist() == [0, 160]
    assert (t.status == 3).all() and checked > 60
    cache = engine.core.cache
    assert engine.core.counters[0, Counter.FREE] + cache.owner[0, 3] == 200  # every block free or cached
    assert cache.owner[0, 5] == 0 and (cache.node[:, 6] == 0).all()  # nothing loose, no window held


def test_under_pressure_preempted_requests_let_go_of_their_windows():
    """Four requests sharing a 10-block prompt in 26 blocks: the newest are preempted (and
    recomputed) as the others grow; every step stays within memory, everyone finishes, and then
    every block is free or cached, none loose, no window held."""
    t = RequestTable(np.zeros(4), np.full(4, 161), np.full(4, 150))
    t.set_prefix_ids([0, 10, 20, 30, 40], list(range(10)) * 4)
    engine = _windowed_engine(t, 26)
    engine.add(0)
    steps = 0
    while engine.schedule() is not None:
        engine.commit()
        steps += 1
        if steps == 2:  # the prompt is cached: the others find it
            for rid in (1, 2, 3):
                engine.add(rid)
        assert engine.core.counters[0, Counter.USED_AT] <= 26
    assert (t.status == 3).all() and t.preemptions.sum() > 0
    assert (t.cached_tokens[1:] == 160).all()
    cache = engine.core.cache
    assert engine.core.counters[0, Counter.FREE] + cache.owner[0, 3] == 26
    assert cache.owner[0, 5] == 0 and (cache.node[:, 6] == 0).all()
