"""The engine on a GPU: CUDA-graph replays give the eager logits, and nothing compiles after
the warm-up. Skipped without a CUDA device (the CPU tests cover padding, buckets and the
warm-up's variants: test_engine_padding.py, test_engine_warmup.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_ref import commit, make_executor, plan_for, table_for

from engine.executor import EngineExecutor
from engine.generate import generate
from engine.weights import random_model
from kernels import compiled, dispatch

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs, compiled Triton)"),
    pytest.mark.skipif(dispatch._INTERPRETED_AT_IMPORT,
                       reason="Triton was imported for the interpreter: run with TRITON_INTERPRET=0"),
]

LADDER = {"graph_max_seqs": 16, "graph_max_tokens": 64}


@pytest.fixture(scope="module")
def model():
    return random_model("tiny-llama-12m", seed=3, dtype="bf16", device="cuda")


def _prompts(vocab: int, lens=(30, 7, 55, 12, 3, 21)) -> list[list[int]]:
    rng = np.random.default_rng(1)
    return [rng.integers(0, vocab, n).tolist() for n in lens]


def _logits(model, graphs: str) -> tuple[list[torch.Tensor], EngineExecutor]:
    prompts = _prompts(model.spec.vocab_size)
    table = table_for(prompts, output_len=6)
    ex = make_executor(model, prompts, num_blocks=128, block_size=16, shuffle=2, graphs=graphs, **LADDER)
    seen = []
    sample = ex._sample
    ex._sample = lambda logits, reqs: (seen.append(logits.clone()), sample(logits, reqs))[1]
    steps = [[(0, 30), (1, 7), (2, 40)], [(0, 1), (1, 1), (2, 15), (3, 12)],
             [(r, 1) for r in range(4)], [(4, 3), (5, 21), (0, 1)], [(r, 1) for r in range(6)]]
    for rows in steps:
        plan = plan_for(table, 16, rows)
        ex.run(plan, table)
        commit(table, plan)
    return seen, ex


def test_graph_replays_give_the_eager_logits(model):
    graph, ex = _logits(model, "cuda")
    padded, _ = _logits(model, "pad")
    eager, _ = _logits(model, "off")
    assert ex.step_counts == {"graph": 4, "eager": 1}  # the first step's 77 tokens: past 64
    for g, p, e in zip(graph, padded, eager, strict=True):
        assert torch.equal(g, p)  # the same kernels on the same padded buffers
        torch.testing.assert_close(g, e, atol=5e-2, rtol=5e-2)  # bf16, other matmul shapes
        assert torch.equal(g.argmax(-1), e.argmax(-1))


def test_greedy_generation_with_graphs_matches_eager(model):
    prompts = _prompts(model.spec.vocab_size)
    out = {}
    for graphs in ("cuda", "off"):
        ex = EngineExecutor(model, num_blocks=128, block_size=16, graphs=graphs, **LADDER)
        ex.warmup(max_num_seqs=6, max_num_tokens=128)
        gens = generate(prompts, 8, executor=ex, policy="chunked-prefill", chunk_size=64, max_num_seqs=6)
        out[graphs] = [g.token_ids for g in gens]
    assert out["cuda"] == out["off"]


def test_warmup_captures_every_bucket_and_nothing_compiles_after(model):
    ex = EngineExecutor(model, num_blocks=256, block_size=16, **LADDER)
    assert ex.graph_mode == "cuda"
    report = ex.warmup(max_num_seqs=24, max_num_tokens=512)
    assert report.captured and set(ex.graph_runner.graphs) == set(ex.graph_runner.keys)
    assert report.attention_variants > 0 and report.compiled is not None
    before = compiled.compiled_variants()
    prompts = _prompts(model.spec.vocab_size, lens=(500, 3, 120, 64, 9, 33, 250, 17) * 3)
    generate(prompts, 5, executor=ex, policy="continuous", max_num_seqs=24, max_batched_tokens=512)
    ex.reset()
    generate(prompts, 5, executor=ex, policy="chunked-prefill", chunk_size=48, max_num_seqs=24)
    assert compiled.compiled_variants() == before
