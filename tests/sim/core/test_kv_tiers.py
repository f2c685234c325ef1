"""KV cache tiers below the GPU (sim/core/tierstore.py, kvtiers.py): what the prefix cache gives
up goes down the tiers and comes back at its load cost, never faster than its bytes over the
tier's bandwidth; a hit too short to load is recomputed; a shared store serves every replica.
Both loops agree on all of it: tests/sim/loops/test_loops_agree.py (kv-tiers-*)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.errors import ScenarioError
from sim.loops.run import simulate
from tests.sim.helpers import scenario

# Conversations whose earlier turns' prompts no longer fit the GPU's 600 blocks of 16 tokens by
# the time their next turn comes.
CHAT = {"scheduler__prefix_caching": True, "scheduler__policy": "chunked-prefill", "hardware__kv_blocks": 600,
        "workload__arrival": {"process": "poisson", "rate": 0.5},
        "workload__shared_prefix": {"num_prompts": 2, "length": 300},
        "workload__prompt_len": {"dist": "lognormal", "mean": 300, "sigma": 0.8, "max": 1500},
        "workload__output_len": {"dist": "uniform", "min": 10, "max": 200},
        "workload__conversations": {"turns": {"dist": "uniform", "min": 2, "max": 6},
                                    "think_time_s": {"dist": "exponential", "mean": 5}, "max_context": 6000}}
CPU = {"medium": "cpu", "capacity_gb": 2}
REPO = Path(__file__).resolve().parents[3]


def run(tiers: dict | None = None, **fields):
    return simulate(scenario(**{**CHAT, **fields}, **({"kv_tiers": tiers} if tiers else {})))


@pytest.fixture(scope="module")
def without():
    return run()


def test_blocks_come_back_from_cpu_memory_instead_of_being_recomputed(without):
    r = run({"tiers": [CPU]})
    t = r.summary["kv_tiers"]
    cpu = t["tiers"]["cpu"]
    assert cpu["loads"] > 0 and cpu["hit_tokens"] > 0 and cpu["stored_bytes"] > cpu["loaded_bytes"] > 0
    # every token the tier gave is a prompt token served from the cache; the GPU's share is the rest
    assert r.requests["tier_tokens"].sum() == cpu["hit_tokens"]
    assert r.summary["prefix_hit_rate"] == pytest.approx(t["gpu_hit_rate"] + cpu["hit_rate"])
    assert r.summary["prefix_hit_rate"] > without.summary["prefix_hit_rate"] + 0.05
    # written back, a tier holds what the GPU gave up and the second what the first gave up;
    # written through, every tier stores every computed block
    two = {"tiers": [{"medium": "cpu", "capacity_gb": 0.3}, {"medium": "nvme", "capacity_gb": 2}]}
    back = run({**two, "write": "back"}).summary["kv_tiers"]["tiers"]
    through = run({**two, "write": "through"}).summary["kv_tiers"]["tiers"]
    assert back["nvme"]["hit_tokens"] > 0 and through["nvme"]["hit_tokens"] > 0
    assert back["nvme"]["stored_bytes"] < back["cpu"]["stored_bytes"]
    assert through["nvme"]["stored_bytes"] > back["nvme"]["stored_bytes"]
    assert through["cpu"]["stored_bytes"] >= through["nvme"]["stored_bytes"]  # the small tier stores some twice


@pytest.mark.parametrize("load", ["async", "layerwise"])
def test_a_load_never_beats_its_bytes_over_the_bandwidth(load):
    gb_s, latency = 0.5, 0.002
    r = run({"tiers": [{"medium": "cpu", "capacity_gb": 2, "bandwidth_gb_s": gb_s, "latency_s": latency}],
             "load": load})
    per_token = r.scenario.memory.kv_bytes_per_token  # one GPU: tp 1
    loaded = r.requests[r.requests["tier_tokens"] > 0]
    assert len(loaded) > 5
    floor = loaded["tier_tokens"] * per_token / (gb_s * 1e9) + latency
    assert (loaded["ttft"] >= floor * (1 - 1e-9)).all()
    # and a slow tier costs its loads' time: TTFT of the loaded requests well above a fast tier's
    fast = run({"tiers": [{"medium": "cpu", "capacity_gb": 2, "bandwidth_gb_s": 500}], "load": load})
    assert loaded["ttft"].median() > 1.5 * fast.requests.loc[fast.requests["tier_tokens"] > 0, "ttft"].median()


def test_hits_too_short_to_load_are_recomputed_and_change_nothing(without):
    r = run({"tiers": [CPU], "min_load_tokens": 100_000})
    cpu = r.summary["kv_tiers"]["tiers"]["cpu"]
    assert cpu["hit_tokens"] == 0 and cpu["loads"] == 0 and cpu["recomputed_tokens"] > 0
    pd.testing.assert_frame_equal(r.requests.drop(columns="tier_tokens"), without.requests, check_exact=True)
    pd.testing.assert_frame_equal(r.steps, without.steps, check_exact=True)


def test_layer_by_layer_loading_overlaps_the_prefill_that_needs_it():
    slow = {"medium": "cpu", "capacity_gb": 2, "bandwidth_gb_s": 0.5}
    sparse = {"workload__arrival": {"process": "poisson", "rate": 0.1},  # turns rarely meet: no queue
              "workload__conversations": {"turns": {"dist": "uniform", "min": 2, "max": 6},
                                          "think_time_s": {"dist": "exponential", "mean": 60}, "max_context": 4000}}
    wait = run({"tiers": [slow], "load": "async"}, **sparse)
    overlap = run({"tiers": [slow], "load": "layerwise"}, **sparse)
    loaded = (wait.requests["tier_tokens"] > 0) & (overlap.requests["tier_tokens"] > 0)
    assert loaded.sum() > 10
    # overlapped, a request's own prefill hides part of its load; waiting, it pays both
    assert (overlap.requests.loc[loaded, "ttft"] <= wait.requests.loc[loaded, "ttft"] * (1 + 1e-9)).mean() > 0.9
    assert overlap.requests.loc[loaded, "ttft"].sum() < wait.requests.loc[loaded, "ttft"].sum()
    # but a step that waits for a load holds up everybody in it: at load, async serves the others
    # better (tests/sim/loops: both loops agree either way)
    # the engine's defaults: vLLM waits for any hit, SGLang overlaps and skips hits under 10 tokens
    sglang = simulate(scenario(**{**CHAT, "engine": "sglang", "scheduler__max_num_seqs": 256},
                               kv_tiers={"tiers": [CPU]}))
    assert sglang.summary["kv_tiers"]["load"] == "layerwise" and sglang.summary["kv_tiers"]["min_load_tokens"] == 10
    assert wait.summary["kv_tiers"]["load"] == "async" and wait.summary["kv_tiers"]["min_load_tokens"] == 0


def test_a_shared_store_serves_a_conversation_wherever_its_turn_is_routed():
    own = run({"tiers": [CPU]}, replicas=2)  # round-robin: a conversation's turns change replica
    shared = run({"tiers": [CPU, {"medium": "shared", "capacity_gb": 4}]}, replicas=2)
    assert shared.summary["kv_tiers"]["tiers"]["shared"]["hit_tokens"] > 0
    assert shared.summary["prefix_hit_rate"] > own.summary["prefix_hit_rate"]


TIER_ORDER = """
import numpy as np
from sim.core import tierstore
from sim.core.blocktable import KEY, REFS
from sim.core.jit import HAVE_NUMBA
from sim.core.requests import RequestTable
from sim.core.state import THROUGH, EngineSpec, Setting, TierSpec, TierStat, core_of
from tests.sim.helpers import scenario

assert not HAVE_NUMBA  # the core's functions, called one by one as plain Python


def held(owner):
    lo, hi = core.tiers.off[owner, 0], core.tiers.off[owner + 1, 0]
    nodes = core.tiers.node[lo:hi]
    return set(nodes[nodes[:, REFS] >= 0, KEY].tolist())


sch = scenario(scheduler__prefix_caching=True).scheduler
tiers = (TierSpec(4, 0.0, 1e-3), TierSpec(8, 0.0, 1e-3, shared=True))
core = core_of([EngineSpec(sch, 100, 16, 4096, replica=r, tiers=tiers, tier_write="back") for r in range(2)],
               RequestTable(np.zeros(1), np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64)))
cpu0, cpu1, store = core.tier_of[0, 0], core.tier_of[1, 0], core.tier_of[0, 1]
assert core.tier_of[1, 1] == store and len({cpu0, cpu1, store}) == 3
for key in range(1, 7):  # the GPU of engine 0 gives up blocks 1..6, oldest first
    tierstore.demote(core, 0, key)
assert held(cpu0) == {3, 4, 5, 6} and held(store) == {1, 2}, (held(cpu0), held(store))
tierstore.demote(core, 1, 1)  # engine 1 gives up a block the store has: the store keeps one copy
assert held(cpu1) == {1} and held(store) == {1, 2}
assert core.tier_n[0, 0, TierStat.STORED] == 6 and core.tier_n[0, 1, TierStat.STORED] == 2
ids = np.array([3, 4, 1, 9])
assert tierstore.lower_run(core, 0, ids, 0, 4) == 3 and list(core.tier_hit) == [2, 1]
core.settings[:, Setting.WRITE] = THROUGH
tierstore.store(core, 1, np.array([7, 8]), 0, 2)  # written through: every tier stores what is computed
assert held(cpu1) == {1, 7, 8} and held(store) == {1, 2, 7, 8}
tierstore.forget(core, 0)  # engine 0's replica stops: its memory is gone, the store stays
assert held(cpu0) == set() and held(cpu1) == {1, 7, 8} and held(store) == {1, 2, 7, 8}
print("ok")
"""


def test_blocks_go_down_the_tiers_oldest_first_and_a_stopped_replica_loses_only_its_own():
    env = {**os.environ, "SERVESIM_JIT": "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", TIER_ORDER], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("fields,field,fragment", [
    ({"kv_tiers": {"tiers": [CPU]}}, "kv_tiers", "prefix_caching"),
    ({"scheduler__prefix_caching": True, "model": "gemma-3-27b", "kv_tiers": {"tiers": [CPU]}}, "kv_tiers",
     "sliding-window"),
    ({"scheduler__prefix_caching": True, "hardware": {"pp": 2},
      "kv_tiers": {"tiers": [CPU]}}, "kv_tiers", "pipeline"),
    ({"scheduler__prefix_caching": True,
      "kv_tiers": {"tiers": [{"medium": "shared", "capacity_gb": 9}, CPU]}}, "kv_tiers", "last"),
    ({"scheduler__prefix_caching": True, "kv_tiers": {"tiers": [{"medium": "cpu", "capacity_gb": 0.0001}]}},
     "kv_tiers.tiers[0].capacity_gb", "holds no KV block"),
    ({"scheduler__prefix_caching": True, "kv_tiers": {"tiers": [CPU], "load": "sometimes"}}, "kv_tiers.load", ""),
])
def test_what_the_tiers_cannot_represent_is_refused_by_name(fields, field, fragment):
    with pytest.raises(ScenarioError) as e:
        scenario(**fields)
    assert e.value.field == field and fragment in e.value.message


def test_the_summary_says_where_prompt_tokens_came_from():
    from sim.results.summary_view import tiers_text

    r = run({"tiers": [CPU, {"medium": "nvme", "capacity_gb": 8}], "min_load_tokens": 64})
    text = tiers_text(r.summary["kv_tiers"])
    assert text.startswith("prompt tokens from GPU ") and "cpu " in text and "nvme " in text
    assert "at least 64 tokens" in text
    assert np.isfinite(r.summary["kv_tiers"]["gpu_hit_rate"])


def test_the_prefix_affinity_router_pictures_a_replica_with_its_own_tiers():
    """A replica's GPU and its own tiers give blocks up in one LRU order, so the router remembers
    as many blocks as they hold together; a shared store is every replica's, and adds nothing."""
    from sim.core.requests import RequestTable
    from sim.core.state import build_core
    from sim.pricing.links import tier_specs

    def capacities(tiers):
        s = scenario(**{**CHAT, "replicas": 2, "router": {"policy": "prefix-affinity"}}, kv_tiers={"tiers": tiers})
        core = build_core(s, RequestTable(np.zeros(1), np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64)),
                          tiers=tier_specs(s))
        return np.diff(core.rtable.off[:, 0]).tolist(), tier_specs(s)[0]

    shared = {"medium": "shared", "capacity_gb": 4}
    seen, specs = capacities([CPU, shared])
    assert seen == [600 + specs[0].capacity_blocks] * 2 and specs[0].capacity_blocks > 0
    assert capacities([shared])[0] == [600, 600]
