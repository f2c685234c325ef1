"""The warm-up visits every graph bucket and every kernel variant a run meets, touches nothing,
and says how long it took. The variant check runs the Triton kernels under the CPU
interpreter (in a subprocess: ``TRITON_INTERPRET=1`` must be set before Triton is imported)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.executor import EngineExecutor, SamplingParams
from engine.generate import generate
from engine.warmup import prefill_lengths


def test_prefill_lengths():
    assert prefill_lengths(100) == (16, 32, 64, 100)
    assert prefill_lengths(64) == (16, 32, 64)
    assert prefill_lengths(8) == (8,)


def test_warmup_visits_every_bucket_and_touches_nothing(tiny):
    ex = EngineExecutor(tiny, num_blocks=32, block_size=4, graphs="pad", graph_max_seqs=4,
                        graph_max_tokens=24)
    ex.kv.data.copy_(torch.randn(ex.kv.data.shape, generator=torch.Generator().manual_seed(0)))
    before = ex.kv.data.clone()
    gen_state = ex.generator.get_state()
    ex.add_request(0, [5, 6, 7])
    report = ex.warmup(max_num_seqs=6, max_num_tokens=40)
    runner = ex.graph_runner
    assert runner.visited == set(runner.keys) and report.buckets == len(runner.keys)
    assert {b for b, _ in runner.keys} == set(runner.ladder.buckets)
    assert len(runner.keys) == 2 * len(runner.ladder.buckets) - 3  # two tiles from 8 tokens up
    assert not report.captured and report.compiled is None  # a CPU: nothing compiled
    assert report.prefill_lengths == (16, 32, 40)
    assert report.steps == 3 + 1  # three prefills, one decode of 6 rows (past the ladder's 4)
    assert report.seconds > 0 and report.describe().startswith("engine warm-up: ")
    assert ex.last_warmup is report
    assert torch.equal(ex.kv.data, before), "the warm-up wrote KV"
    assert torch.equal(ex.generator.get_state(), gen_state), "the warm-up drew from the engine's stream"
    assert not ex.requests and ex.blocks.num_free == 32 and 0 in ex._pending


def test_sampling_after_warmup_is_as_without(tiny):
    prompts = [np.random.default_rng(i).integers(0, 256, 6).tolist() for i in range(3)]

    def tokens(warm: bool) -> list[list[int]]:
        ex = EngineExecutor(tiny, num_blocks=32, block_size=4, seed=3)
        if warm:
            ex.warmup(max_num_seqs=4, max_num_tokens=16)
        gens = generate(prompts, 5, executor=ex, sampling=SamplingParams(temperature=1.0))
        return [g.token_ids for g in gens]

    assert tokens(True) == tokens(False)


def test_warmup_needs_an_idle_engine(tiny):
    ex = EngineExecutor(tiny, num_blocks=8, block_size=4)
    ex.blocks.resize(1, 2)
    with pytest.raises(RuntimeError, match="before the first request"):
        ex.warmup()


SCRIPT = r"""
import sys
import numpy as np
from engine.executor import EngineExecutor
from engine.generate import generate
from engine.weights import random_model
from kernels import variants

def engine(graphs="pad"):
    model = random_model("tiny-llama", seed=1, impl="triton")
    return EngineExecutor(model, num_blocks=96, block_size=4, graphs=graphs, graph_max_seqs=4,
                          graph_max_tokens=12)

def run(ex, chunked=True):
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 256, n).tolist() for n in (40, 3, 17, 9, 25, 6)]
    with variants.recording() as used:
        generate(prompts, 3, executor=ex, policy="continuous", max_num_seqs=6,
                 max_batched_tokens=48)
        if chunked:
            ex.reset()
            generate(prompts, 3, executor=ex, policy="chunked-prefill", chunk_size=12, max_num_seqs=6)
    return used

ex = engine()
with variants.recording() as warm:
    report = ex.warmup(max_num_seqs=6, max_num_tokens=48)
assert ex.graph_runner.visited == set(ex.graph_runner.keys)
used = run(ex)
missing = used - warm
assert not missing, f"variants the warm-up missed: {missing}"
assert ex.step_counts["graph"] and ex.step_counts["eager"], ex.step_counts

# The check has teeth: without graphs, a warm-up that stops at 4-token prefills misses the
# prefill-sized query tile.
ex = engine(graphs="off")
with variants.recording() as short:
    ex.warmup(max_num_seqs=6, max_num_tokens=4)
assert run(ex, chunked=False) - short, "a short warm-up should miss a variant"
print("ok", len(warm), len(used), round(report.seconds, 1))
"""


def test_no_kernel_variant_after_warmup():
    """After the warm-up, continuous and chunked-prefill runs (graph buckets and eager steps,
    prefills and decodes) launch no kernel specialisation the warm-up did not."""
    pytest.importorskip("triton")
    here = Path(__file__).parent
    root = here.parent.parent
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(root), str(here), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok"), out.stdout


@pytest.mark.parametrize("sms", [None, 16, 132])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_warmup_launches_every_attention_variant_the_rule_can_pick(sms, group):
    """On any batch, prefill or decode, at any context, the (query tile, split count) the
    split-KV rule picks is one the warm-up launches (the dtypes are the engine's, and sizes
    are not specialised on: tests/kernels/test_kernel_variants.py)."""
    from engine.warmup import attention_variants
    from kernels.attention import choose_num_splits, num_programs, query_block

    warm = {(query_block(t, b, group), s) for t, b, s in attention_variants(group, sms)}
    for seqs in (1, 2, 3, 8, 31, 64, 200, 512):
        for tokens in {seqs, seqs + 7, 8 * seqs, 4096}:
            bm = query_block(tokens, seqs, group)
            for context in (tokens, 1000, 8192, 131072):
                s = choose_num_splits(num_programs(tokens, seqs, 8, bm, group), context, sms)
                assert (bm, s) in warm, (seqs, tokens, context)


def test_warmup_launches_attention_variants_on_a_gpu(tiny, monkeypatch):
    """With SMs (a GPU), the warm-up launches attention once per (query tile, split count) on
    the layer-0 cache, with q shaped as the model's; on a CPU it launches none."""
    from engine import warmup
    from kernels.attention import SPLIT_CHOICES

    ex = EngineExecutor(tiny, num_blocks=8, block_size=4)
    assert warmup._attention_variants(ex) == 0  # a CPU: no splits, the ghost steps suffice
    seen = []

    def fake(q, k_cache, v_cache, bt, qsl, lens, scale, num_splits):
        assert k_cache.data_ptr() == ex.kv.layers[0][0].data_ptr() and q.dtype == tiny.dtype
        assert q.shape[1:] == (4, 16) and bt.dtype == qsl.dtype == lens.dtype == torch.int32
        assert int(qsl[-1]) == q.shape[0] and (lens >= 1).all()
        seen.append((q.shape[0], lens.shape[0], num_splits))

    monkeypatch.setattr(warmup, "sm_count", lambda device: 132)
    monkeypatch.setattr(warmup, "use_triton", lambda impl, *t: True)
    monkeypatch.setattr(warmup, "paged_attention_triton", fake)
    assert warmup._attention_variants(ex) == len(seen) == 2 * len(SPLIT_CHOICES)
    assert {s for _, _, s in seen} == set(SPLIT_CHOICES) and {(t, b) for t, b, _ in seen} == {(4, 4), (64, 1)}
