"""TensorRT-LLM's scheduling defaults: GUARANTEED_NO_EVICT (``scheduler.reserve_output``: a request
starts only when the blocks for its prompt and its whole output are free, so nothing is ever
preempted for memory) and chunked context off (``scheduler.split_prompts: false``: a prompt joins
a step beside the decodes only whole)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.loops.run import simulate
from tests.sim.helpers import scenario


def two_users(policy: str, reserve: bool, loop: str = "auto"):
    # 64 blocks of 16 tokens; each request is 300 prompt tokens (19 blocks) and 500 out: 50 blocks
    # at its end, so two fit together at the start but not at the end
    return scenario(hardware={"kv_blocks": 64}, simulation={"loop": loop},
                    scheduler={"policy": policy, "chunk_size": 512, "max_num_seqs": 16, "block_size": 16,
                               "watermark": 0.0, "reserve_output": reserve},
                    workload={"num_requests": 2, "arrival": {"process": "closed", "concurrency": 2},
                              "prompt_len": {"dist": "fixed", "value": 300},
                              "output_len": {"dist": "fixed", "value": 500}})


@pytest.mark.parametrize("loop", ["compiled", "simpy"])
@pytest.mark.parametrize("policy", ["continuous", "chunked-prefill"])
def test_a_request_starts_only_when_its_whole_output_fits(policy, loop):
    r = simulate(two_users(policy, True, loop))
    df = r.requests.sort_values("first_scheduled")
    assert r.summary["preemptions"] == 0
    assert df.iloc[1]["first_scheduled"] >= df.iloc[0]["completion"]  # 50 + 50 blocks > 64
    # the first holds all 50 of its blocks from its first step on
    assert r.steps["kv_blocks_used"].iloc[1] == 50


@pytest.mark.parametrize("policy", ["continuous", "chunked-prefill"])
def test_without_the_reservation_both_start_and_one_is_preempted(policy):
    r = simulate(two_users(policy, False))
    df = r.requests
    assert r.summary["preemptions"] >= 1
    assert df["first_scheduled"].max() < df["completion"].min()
    assert (df["status"] == "finished").all()


def prompts(split: bool, chunk: int = 512, value: int = 300, n: int = 6):
    return scenario(hardware={"kv_blocks": 4000},
                    scheduler={"policy": "chunked-prefill", "chunk_size": chunk, "max_batched_tokens": chunk,
                               "max_num_seqs": 16, "block_size": 16, "split_prompts": split},
                    workload={"num_requests": n, "arrival": {"process": "closed", "concurrency": n},
                              "prompt_len": {"dist": "fixed", "value": value},
                              "output_len": {"dist": "fixed", "value": 20}})


def test_whole_prompts_join_a_step_only_whole():
    whole = simulate(prompts(False)).steps["prefill_tokens"].to_numpy()
    assert set(np.unique(whole)) <= {0, 300}  # one 300-token prompt a step: a second does not fit 512
    split = simulate(prompts(True)).steps["prefill_tokens"].to_numpy()
    assert 512 in split  # the second prompt's first 212 tokens filled the first step


def test_a_whole_prompt_waits_for_the_budget_the_decodes_leave():
    """Five decodes take 5 of a 304-token budget: a 300-token prompt still fits beside them, but a
    sixth request's prompt waits until a step has room for all of it (it never runs in pieces)."""
    r = simulate(prompts(False, chunk=304, value=300, n=8))
    pre = r.steps["prefill_tokens"].to_numpy()
    assert set(np.unique(pre)) <= {0, 300}
    assert (r.requests["status"] == "finished").all()


def test_a_prompt_longer_than_any_step_is_refused_not_split():
    r = simulate(prompts(False, chunk=256, value=300, n=2))
    assert (r.requests["status"] == "rejected").all()
    assert r.requests["reject_reason"].str.contains("chunking is off").all()


def test_the_tensorrt_llm_presets_schedule_as_its_defaults():
    trt = scenario(engine="tensorrt-llm")
    assert trt.scheduler.reserve_output and not trt.scheduler.split_prompts
    old = scenario(engine="tensorrt-llm-0.x")
    assert old.scheduler.reserve_output and old.scheduler.split_prompts  # chunked context, as built
    assert not scenario(engine="vllm").scheduler.reserve_output


def test_split_prompts_is_refused_with_slots():
    from sim.errors import ScenarioError

    with pytest.raises(ScenarioError, match="split_prompts"):
        scenario(engine="llama.cpp", scheduler={"split_prompts": False})


def handed_over(reserve: bool, loop: str = "auto"):
    # a prefill replica and a decode replica of 64 blocks each: a request's whole 800 tokens take 50
    return scenario(hardware={"kv_blocks": 64}, simulation={"loop": loop},
                    scheduler={"policy": "chunked-prefill", "chunk_size": 512, "max_num_seqs": 16, "block_size": 16,
                               "watermark": 0.0, "reserve_output": reserve},
                    disaggregation={"prefill": {"count": 1}, "decode": {"count": 1}},
                    workload={"num_requests": 2, "arrival": {"process": "closed", "concurrency": 2},
                              "prompt_len": {"dist": "fixed", "value": 300},
                              "output_len": {"dist": "fixed", "value": 500}})


@pytest.mark.parametrize("loop", ["compiled", "simpy"])
def test_a_decode_replica_reserves_the_output_and_the_prefill_replica_only_the_prompt(loop):
    r = simulate(handed_over(True, loop))
    steps = r.steps
    decode, prefill = steps[steps["replica"] == 1], steps[steps["replica"] == 0]
    assert r.summary["preemptions"] == 0
    assert decode["num_seqs"].max() == 1  # the second waits until the first's 50 blocks come back
    assert decode["kv_blocks_used"].max() == 50
    assert prefill["kv_blocks_used"].max() <= 2 * 19  # prompts only: 19 blocks each
    assert (r.requests["status"] == "finished").all()


def test_without_the_reservation_both_decode_together_and_one_is_preempted():
    r = simulate(handed_over(False))
    decode = r.steps[r.steps["replica"] == 1]
    assert decode["num_seqs"].max() == 2
    assert r.summary["preemptions"] >= 1
