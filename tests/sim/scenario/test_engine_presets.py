"""Engine presets by release family (sim/scenario/data/engines.yaml): each family's scheduling
defaults, the ones an engine picks from the GPU, and what a scenario sets itself winning."""

from __future__ import annotations

import pytest

from sim.scenario.engines import ENGINE_NAMES, engine_cost, gpu_defaults, overheads_of, presets
from sim.scenario.load import scenario_from_dict
from sim.scenario.specs.efficiency import calibrated


def load(**data):
    base = {"name": "t", "model": "llama-3-8b"}
    return scenario_from_dict({**base, **data}, "<t>")


@pytest.mark.parametrize("gpu, tokens, seqs", [
    ("H100-SXM", 8192, 1024),  # >= 70 GiB and not an A100
    ("H200", 8192, 1024),
    ("A100-80GB", 2048, 256),  # an A100 keeps the small defaults (vLLM PR #17885)
    ("L40S", 2048, 256),
    ("B200", 16384, 1024),  # >= 160 GiB
    ({"name": "big", "memory_gib": 200, "hbm_tb_s": 5, "peaks": {"bf16": 1000}, "link": "nvlink5"}, 16384, 1024),
])
def test_vllm_v1_sizes_its_budget_by_the_gpu(gpu, tokens, seqs):
    s = load(engine="vllm", hardware={"gpu": gpu, "price_per_gpu_hour": 2.0}).scheduler
    assert (s.policy, s.max_batched_tokens, s.chunk_size, s.max_num_seqs) == ("chunked-prefill", tokens, tokens, seqs)


def test_the_scenarios_own_fields_win_over_the_gpus_defaults():
    s = load(engine="vllm", hardware={"gpu": "B200"}, scheduler={"chunk_size": 4096, "max_num_seqs": 128}).scheduler
    assert (s.chunk_size, s.max_num_seqs, s.max_batched_tokens) == (4096, 128, 16384)


def test_a_replica_group_takes_the_defaults_of_its_own_gpu():
    sc = load(engine="vllm", hardware={"gpu": "H100-SXM"},
              replica_groups=[{"count": 1, "hardware": {"gpu": "A100-80GB"}, "scheduler": {}},
                              {"count": 1, "hardware": {"gpu": "B200"}, "scheduler": {}}])
    budgets = [r.scheduler.chunk_size for r in sc.replica_specs]
    assert budgets == [2048, 16384]
    # a group that leaves its scheduler out: the scenario's own fields over its GPU's defaults
    sc = load(engine="vllm", hardware={"gpu": "H100-SXM"}, scheduler={"max_num_seqs": 64},
              replica_groups=[{"count": 1}, {"count": 1, "hardware": {"gpu": "A100-80GB"}}])
    assert [(r.scheduler.chunk_size, r.scheduler.max_num_seqs) for r in sc.replica_specs] == [(8192, 64), (2048, 64)]


def test_v0_and_v1_differ_as_the_releases_do():
    v0 = load(engine="vllm-v0").scheduler
    assert (v0.policy, v0.max_batched_tokens, v0.max_num_seqs, v0.prefix_caching) == ("continuous", 8192, 256, False)
    t1, t0 = load(engine="tensorrt-llm").scheduler, load(engine="tensorrt-llm-0.x").scheduler
    assert (t1.block_size, t0.block_size) == (32, 64)  # tokens_per_block: 32 in 1.x


def test_every_family_has_a_preset_and_its_own_fitted_overheads_or_says_whose_it_takes():
    assert set(ENGINE_NAMES) == set(presets())
    fitted = calibrated()["engines"]
    for name in ENGINE_NAMES:
        cost = engine_cost(name)
        if not presets()[name].get("fitted", True):
            assert cost.step_overhead_s == 0, name
        elif overheads_of(name) == name:
            assert name in fitted and cost.step_overhead_s == fitted[name]["step_overhead_s"], name
        else:  # an earlier family's, and the file has none of its own
            assert name not in fitted and cost == engine_cost(overheads_of(name)), name
    assert engine_cost("tensorrt-llm") != engine_cost("tensorrt-llm-0.x")  # 1.x fitted on its own pages
    assert overheads_of("vllm") == "vllm-v0"


def test_gpu_defaults_of_an_unknown_gpu_are_the_presets_own():
    assert gpu_defaults("vllm", "no-such-gpu")["max_batched_tokens"] == 2048


def test_request_overhead_is_an_engine_field_and_refused_negative():
    sc = load(engine={"name": "vllm", "request_overhead_s": 0.025})
    assert sc.engine.cost.request_overhead_s == 0.025
    with pytest.raises(Exception, match="request_overhead_s"):
        load(engine={"name": "vllm", "request_overhead_s": -1})


def test_a_budget_the_scenario_sets_bounds_the_presets_sequence_limit():
    """vLLM: a defaulted max_num_seqs is min(its default, max_num_batched_tokens)."""
    s = load(engine="vllm", scheduler={"chunk_size": 512}).scheduler
    assert (s.chunk_size, s.max_num_seqs) == (512, 512)
    s = load(engine="vllm", scheduler={"chunk_size": 512, "max_num_seqs": 64}).scheduler
    assert s.max_num_seqs == 64
