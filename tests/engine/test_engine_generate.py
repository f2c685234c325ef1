"""Generation through the simulator's own scheduling policies."""

from __future__ import annotations

import numpy as np
import pytest
from engine_ref import dense_greedy, plan_for, table_for

from engine.executor import EngineExecutor, SamplingParams
from engine.generate import generate


def _prompts(vocab: int, lens=(5, 23, 9, 40, 2, 17)) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, vocab, n).tolist() for n in lens]


MAX_TOKENS = [7, 3, 12, 5, 9, 1]


def _run(model, policy: str, num_blocks: int = 128, **kw) -> list:
    ex = EngineExecutor(model, num_blocks=num_blocks, block_size=4)
    gens = generate(_prompts(model.spec.vocab_size), MAX_TOKENS, executor=ex, policy=policy, **kw)
    assert ex.blocks.num_free == num_blocks  # everything given back
    return gens


def test_greedy_is_identical_under_every_policy(tiny):
    ref = _run(tiny, "continuous")
    assert [len(g.token_ids) for g in ref] == MAX_TOKENS
    assert all(g.finish_reason == "length" for g in ref)
    assert ref[1].token_ids == dense_greedy(tiny, ref[1].prompt_ids, MAX_TOKENS[1])
    runs = {
        "static": _run(tiny, "static", batch_size=4),
        "chunked": _run(tiny, "chunked-prefill", chunk_size=8, max_num_seqs=4),
        "continuous-small-steps": _run(tiny, "continuous", max_batched_tokens=48,
                                       max_num_seqs=3),
    }
    for name, gens in runs.items():
        assert [g.token_ids for g in gens] == [g.token_ids for g in ref], name


def test_preemption_under_memory_pressure_keeps_greedy_output(tiny):
    ref = _run(tiny, "continuous")
    tight = _run(tiny, "continuous", num_blocks=18, watermark=0.0)
    assert sum(g.preemptions for g in tight) > 0, "the test wants the policy to preempt"
    assert [g.token_ids for g in tight] == [g.token_ids for g in ref]
    chunked = _run(tiny, "chunked-prefill", num_blocks=18, chunk_size=8, max_num_seqs=4,
                   watermark=0.0)
    assert [g.token_ids for g in chunked] == [g.token_ids for g in ref]


def test_eos_stops_only_when_asked(tiny):
    prompt = _prompts(tiny.spec.vocab_size)[2]
    free = generate([prompt], 12, executor=EngineExecutor(tiny, num_blocks=16))[0].token_ids
    eos = free[3]
    cut = free.index(eos) + 1
    ex = EngineExecutor(tiny, num_blocks=16, ignore_eos=False, eos_token_ids=[eos])
    g = generate([prompt], 12, executor=ex)[0]
    assert g.finish_reason == "stop" and g.token_ids == free[:cut]
    ex = EngineExecutor(tiny, num_blocks=16, ignore_eos=True, eos_token_ids=[eos])
    assert generate([prompt], 12, executor=ex)[0].token_ids == free


def test_seeded_sampling_does_not_depend_on_the_batch(tiny):
    prompts = _prompts(tiny.spec.vocab_size)
    hot = SamplingParams(temperature=1.0, top_k=50, top_p=0.9, seed=123)
    alone = generate([prompts[0]], 10, executor=EngineExecutor(tiny, num_blocks=64),
                     sampling=[hot])[0].token_ids
    mixed = generate(prompts[:3], 10, executor=EngineExecutor(tiny, num_blocks=64),
                     sampling=[hot, SamplingParams(temperature=0.7), SamplingParams()])
    assert mixed[0].token_ids == alone
    greedy = generate([prompts[0]], 10, executor=EngineExecutor(tiny, num_blocks=64))[0]
    assert greedy.token_ids != alone  # temperature 1 over near-flat logits wanders


def test_random_prompts_when_only_lengths_are_known(tiny):
    """Timing workloads give lengths only: the engine invents prompt ids, seeded by
    (executor seed, request id)."""

    def prompt_of(seed: int) -> list[int]:
        ex = EngineExecutor(tiny, num_blocks=16, seed=seed)
        table = table_for([[0] * 9, [0] * 4], output_len=2)
        plan = plan_for(table, 16, [(1, 4), (0, 9)])
        ex.run(plan, table)
        assert len(ex.token_ids(0)) == 10 and len(ex.generated_tokens(1)) == 1
        return ex.token_ids(0)[:9]

    assert prompt_of(1) == prompt_of(1) != prompt_of(2)


def test_rejected_requests_are_reported(tiny):
    ex = EngineExecutor(tiny, num_blocks=4, block_size=4)  # 16 tokens of KV in all
    gens = generate([[1] * 5, [2] * 30], 4, executor=ex)
    assert gens[0].finish_reason == "length" and len(gens[0].token_ids) == 4
    assert gens[1].finish_reason.startswith("rejected") and gens[1].token_ids == []


def test_text_prompts_need_a_tokenizer(tiny):
    with pytest.raises(ValueError, match="tokenizer"):
        generate(["hello"], 2, executor=EngineExecutor(tiny, num_blocks=8))


def test_load_and_warmup_leave_no_state():
    ex = EngineExecutor.load("tiny-llama", seed=2, num_blocks=8, block_size=4)
    ex.add_request(0, [5, 6])
    ex.warmup(prompt_len=100)  # clamped to what 8 blocks hold
    assert ex.blocks.num_free == 8 and not ex.requests
    table = table_for([[0, 0]])
    ex.run(plan_for(table, 4, [(0, 2)]), table)
    assert ex.token_ids(0)[:2] == [5, 6]  # the registered prompt survived the warm-up


def test_keep_tokens_off_forgets_freed_requests(tiny):
    ex = EngineExecutor(tiny, num_blocks=16, block_size=4, keep_tokens=False)
    table = table_for([[1, 2, 3], [4, 5]], output_len=1)
    ex.run(plan_for(table, 4, [(0, 3)]), table)
    ex.run(plan_for(table, 4, [(1, 2)], freed=[0]), table)
    assert 0 not in ex.requests and ex.generated_tokens(1) and ex.blocks.blocks_of(0) == []


def test_generate_wants_a_clean_executor(tiny):
    ex = EngineExecutor(tiny, num_blocks=16, block_size=4)
    table = table_for([[1, 2, 3]])
    ex.run(plan_for(table, 4, [(0, 3)]), table)
    with pytest.raises(RuntimeError, match="reset"):
        generate([[1, 2]], 2, executor=ex)
    ex.reset()
    assert ex.blocks.num_free == 16 and len(generate([[1, 2]], 2, executor=ex)[0].token_ids) == 2
