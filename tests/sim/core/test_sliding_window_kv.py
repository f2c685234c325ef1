"""Sliding-window layers keep at most their window (+ a block) of a request's tokens, as the
engines free what leaves the window: the core counts a long request's blocks that way
(sim/core/kvblocks.blocks_for), so admission, preemption and the KV figures see the memory the
engines really use. With prefix caching every token is still counted (and the run says so)."""

from __future__ import annotations

import math

from sim.loops.run import simulate
from sim.scenario.load import load_scenario
from tests.sim.helpers import scenario

GEMMA = {"model": "gemma-3-27b", "hardware": {"gpu": "H100-SXM"}}


def _lone(prompt: int, output: int, **fields):
    return scenario(**GEMMA, workload__num_requests=1, workload__prompt_len={"dist": "fixed", "value": prompt},
                    workload__output_len={"dist": "fixed", "value": output}, **fields)


def test_the_cap_is_the_windowed_layers_share_and_window():
    mem = load_scenario(None, ["model=gemma-3-27b", "hardware.gpu=H100-SXM"]).replica_specs[0].memory
    assert mem.window_ppm == round(52 / 62 * 1_000_000)  # 52 of 62 layers, the same KV per layer
    assert mem.window_blocks == 1024 // 16 + 1
    cached = load_scenario(None, ["model=gemma-3-27b", "hardware.gpu=H100-SXM", "scheduler.prefix_caching=true"])
    assert cached.replica_specs[0].memory.window_ppm == 0
    plain = load_scenario(None, ["model=llama-3-8b"]).replica_specs[0].memory
    assert plain.window_ppm == 0 and plain.window_blocks == 0


def test_a_long_request_holds_its_window_in_windowed_layers():
    """4,000 + 100 tokens: 257 blocks of tokens; the 10 global layers hold all of them, the 52
    windowed ones 65, so the request holds ceil(10/62 × 257 + 52/62 × 65) blocks."""
    steps = simulate(_lone(4000, 100)).steps
    n, w, share = math.ceil(4100 / 16), 65, round(52 / 62 * 1e6)
    assert steps["kv_blocks_used"].max() == -(-((1_000_000 - share) * n + share * w) // 1_000_000)
    short = simulate(_lone(500, 100)).steps  # within the window: every block, as before
    assert short["kv_blocks_used"].max() == math.ceil(600 / 16)
    cached = simulate(_lone(4000, 100, scheduler__prefix_caching=True)).steps
    assert cached["kv_blocks_used"].max() == n


def test_the_same_memory_runs_more_long_requests_at_once():
    load = {"hardware__kv_blocks": 1200, "workload__num_requests": 40,
            "workload__arrival": {"process": "constant", "rate": 1000},
            "workload__prompt_len": {"dist": "fixed", "value": 6000},
            "workload__output_len": {"dist": "fixed", "value": 200}}
    capped = simulate(scenario(**GEMMA, **load)).summary
    counted = simulate(scenario(**GEMMA, scheduler__prefix_caching=True, **load)).summary
    assert capped["mean_batch_size"] > 2 * counted["mean_batch_size"]
    assert capped["e2e_p50"] < counted["e2e_p50"]
