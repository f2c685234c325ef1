"""The published cases measured with ``trtllm-bench throughput`` run with the batch and token
budget trtllm-bench picks itself (tensorrt_llm/bench/build/tuning.py: calc_engine_setting)."""

from __future__ import annotations

import pytest

from benchmarks import published


def case(case_id: str) -> published.Case:
    return next(c for c in published.load_cases() if c.id == case_id)


def test_llama_8b_fp8_on_one_h100_by_hand():
    """79.65 GiB less 8.03e9 one-byte weights (7.48 GiB), 0.95 of it for a KV of 64 KiB a token
    (32 layers, 8 KV heads of 128, fp8): 516 requests of 128 + 2048 tokens, rounded up to 640;
    the token budget 516 · (1 + 128/2048) = 548, at least 2,048."""
    c = case("trtllm100r-thr-i00128-o02048-h100x1-llama-3.1-8b-fp8-tp1-rinf")
    assert published.trtllm_bench_limits(c, "llama-3.1-8b", 0.95) == (640, 2048)
    sch = published.scenario_dict(c)["scheduler"]
    assert (sch["max_num_seqs"], sch["max_batched_tokens"], sch["chunk_size"]) == (640, 2048, 2048)


def test_long_prompts_get_a_budget_of_the_whole_prompt_and_the_batch():
    """Chunked context is off in trtllm-bench: the budget holds the longest prompt plus a decode per
    sequence, and pipeline stages split the requests the cache holds."""
    c = case("trtllm100r-thr-i20000-o02000-rtxpro6000x8-llama-3.3-70b-fp4-tp1-pp8-rinf")
    bs, tokens = published.trtllm_bench_limits(c, "llama-3.3-70b", 0.95)
    assert bs == 64  # the smallest batch the heuristic sets
    assert tokens == 20000 + bs


@pytest.mark.parametrize("source", sorted(published.TRTLLM_BENCH))
def test_every_trtllm_bench_source_is_a_source_and_runs_the_heuristic(source):
    cases = [c for c in published.load_cases() if c.source == source]
    assert cases, source
    for c in cases:
        sch = published.scenario_dict(c)["scheduler"]
        assert sch["chunk_size"] == sch["max_batched_tokens"] >= int(c.workload["input_len"]) + sch["max_num_seqs"]


def test_an_mxfp4_checkpoint_counts_as_its_packed_elements_at_two_bytes():
    """GPT-OSS-120B on one H200: trtllm-bench counts the checkpoint's safetensors elements (the
    MXFP4 experts two a byte, a scale per 32) at 2 bytes each (MXFP4 is not in its table): 63e9
    elements, 117 GiB, leave 23 GiB; 0.95 of it holds 159 requests of 2,000 tokens at 72 KiB a
    token (36 layers, 8 KV heads of 64, bf16 on Hopper), rounded up to 160."""
    c = case("trtllm12-thrpg-i01000-o01000-h200x1-gpt-oss-120b-checkpoint-tp1-rinf")
    assert published.trtllm_bench_limits(c, "gpt-oss-120b", 0.95) == (160, 2048)


def test_attention_dp_takes_the_limits_per_rank():
    """DEP4 (trtllm-bench --tp 4 --ep 4, attention DP): the heuristic over the 4 GPUs, and each of
    the 4 ranks schedules its own batch within it; a 32,768-token prompt fits a rank's budget."""
    c = case("trtllm12-thrpg-i32768-o01024-b200x4-qwen3-235b-a22b-fp4-dp4ep4-rinf")
    bs, tokens = published.trtllm_bench_limits(c, "qwen3-235b-a22b", 0.95)
    sch = published.scenario_dict(c)["scheduler"]
    assert (sch["max_num_seqs"], sch["max_batched_tokens"]) == (4 * bs, 4 * tokens)
    assert tokens >= 32768 + bs
