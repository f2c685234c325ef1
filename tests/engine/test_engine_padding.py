"""Steps padded to a graph bucket, run through the persistent buffers eagerly (``graphs="pad"``):
the CPU test of everything the CUDA-graph path does except capture and replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_ref import commit, make_executor, plan_for, table_for

from engine.buckets import Bucket
from engine.executor import EngineExecutor
from engine.generate import generate
from engine.padding import empty_step, ghost_step, pad_step

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _prompts(vocab: int, lens=(9, 5, 14, 3, 11)) -> list[list[int]]:
    rng = np.random.default_rng(4)
    return [rng.integers(0, vocab, n).tolist() for n in lens]


def test_pad_step_adds_rows_and_tokens_that_touch_nothing():
    step = ghost_step([(3, 7), (1, 5)], block_size=4)
    padded = pad_step(step, Bucket(tokens=8, seqs=4))
    assert padded.input_ids.tolist() == [0] * 8
    assert padded.slot_mapping.tolist() == [-1] * 8  # ghost tokens and padding write nowhere
    assert padded.positions.tolist() == [4, 5, 6, 4, 0, 0, 0, 0]
    assert padded.query_start_loc.tolist() == [0, 3, 4, 4, 4]  # padding rows own no token
    assert padded.seq_lens.tolist() == [7, 5, 0, 0]  # ... and have no context to read
    assert padded.block_tables.shape == (4, 2) and not padded.block_tables[2:].any()
    assert padded.sample_idx.tolist() == [2, 3, 0, 0] and padded.max_context == 7
    with pytest.raises(ValueError, match="does not fit"):
        pad_step(step, Bucket(tokens=3, seqs=4))
    with pytest.raises(ValueError, match="does not fit"):
        pad_step(step, Bucket(tokens=8, seqs=1))
    empty = pad_step(empty_step(), Bucket(2, 2))
    assert empty.query_start_loc.tolist() == [0, 0, 0] and empty.seq_lens.tolist() == [0, 0]


def _steps():
    """(rid, new tokens) per step: prefills, a chunk beside decodes, pure decode batches."""
    return [[(0, 9), (1, 5)], [(0, 1), (1, 1), (2, 6)], [(2, 8), (0, 1), (1, 1), (3, 3)],
            [(0, 1), (1, 1), (2, 1), (3, 1)], [(4, 11), (0, 1)], [(r, 1) for r in range(5)]]


def _run(model, graphs: str, nan_free_blocks: bool = False):
    prompts = _prompts(model.spec.vocab_size)
    table = table_for(prompts)
    ex = make_executor(model, prompts, num_blocks=40, shuffle=5, graphs=graphs, graph_max_seqs=4,
                       graph_max_tokens=16)
    if nan_free_blocks:
        ex.kv.data.fill_(float("nan"))  # nothing reads a block it does not own (or write one)
    seen = []
    sample = ex._sample
    ex._sample = lambda logits, reqs: (seen.append(logits.clone()), sample(logits, reqs))[1]
    out = []
    for rows in _steps():
        plan = plan_for(table, 4, rows)
        ex.run(plan, table)  # greedy: the same tokens both ways, or the next steps differ
        out.append((seen[-1], plan, ex.kv.data.clone(), {r: list(b) for r, b in ex.blocks.tables.items()}))
        commit(table, plan)
    return ex, out


def test_padded_logits_equal_unpadded_eager_logits(tiny):
    padded_ex, padded = _run(tiny, "pad")
    eager_ex, eager = _run(tiny, "off")
    assert padded_ex.step_counts == {"graph": 5, "eager": 1}  # the 5-row decode is past the ladder
    buckets = {b.tokens for b, _ in padded_ex.graph_runner.visited}
    assert buckets == {16, 8, 4}  # 14 and 16 tokens, 7 tokens, 4 decodes
    for k, ((got, *_), (want, *_)) in enumerate(zip(padded, eager, strict=True)):
        assert got.shape == want.shape, k
        torch.testing.assert_close(got, want, **TOL)
    for rid in range(5):
        assert padded_ex.generated_tokens(rid) == eager_ex.generated_tokens(rid)


def test_padding_reads_and_writes_no_kv_block(tiny):
    """Every unowned block holds NaN: real rows' logits stay finite (nothing reads a padding
    block), and after each step the cache differs from the unpadded run's only in rounding,
    NaN where it was NaN: padding wrote nowhere."""
    _, padded = _run(tiny, "pad", nan_free_blocks=True)
    _, eager = _run(tiny, "off", nan_free_blocks=True)
    for (logits, _, cache, tables), (_, _, cache_ref, tables_ref) in zip(padded, eager, strict=True):
        assert torch.isfinite(logits).all()
        assert tables == tables_ref
        assert torch.equal(cache.isnan(), cache_ref.isnan())
        torch.testing.assert_close(cache, cache_ref, equal_nan=True, **TOL)
        owned = sorted(b for ids in tables.values() for b in ids)
        unowned = sorted(set(range(cache.shape[2])) - set(owned))
        assert cache[:, :, unowned].isnan().all()


def test_greedy_generation_is_the_same_padded(tiny):
    prompts = _prompts(tiny.spec.vocab_size, lens=(9, 5, 14, 3, 11, 7, 2))
    runs = {}
    for graphs in ("pad", "off"):
        ex = EngineExecutor(tiny, num_blocks=64, block_size=4, graphs=graphs, graph_max_seqs=4,
                            graph_max_tokens=16)
        gens = generate(prompts, 6, executor=ex, policy="chunked-prefill", chunk_size=16,
                        max_num_seqs=6)
        runs[graphs] = [g.token_ids for g in gens]
        if graphs == "pad":
            assert ex.step_counts["graph"] > 0 and ex.step_counts["eager"] > 0
    assert runs["pad"] == runs["off"]


def test_graph_modes():
    ex = EngineExecutor.load("tiny-llama", num_blocks=8, block_size=4)
    assert ex.graph_mode == "off" and ex.graph_runner is None  # auto on a CPU
    with pytest.raises(ValueError, match="CUDA graphs need"):
        EngineExecutor.load("tiny-llama", num_blocks=8, block_size=4, graphs="cuda")
    with pytest.raises(ValueError, match="graphs must be"):
        EngineExecutor.load("tiny-llama", num_blocks=8, block_size=4, graphs="yes")
    ex = EngineExecutor.load("tiny-llama", num_blocks=8, block_size=4, graphs="pad",
                             graph_max_seqs=2, graph_max_tokens=8)
    assert ex.graph_runner.ladder.sizes == (1, 2, 4, 8)
    assert ex.graph_runner.buffers.width == 8  # blocks of the longest sequence 8 blocks hold
