"""The paged, chunked, batched forward equals a plain dense forward (fp32).

Tolerance: logits are O(1..10); the engine and the dense reference differ only in summation
order (chunked attention over paged K/V, batched matmuls), so we ask for ``atol=rtol=1e-4``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from engine_ref import commit, dense_greedy, dense_logits, make_executor, plan_for, table_for

from engine.model import OPS
from engine.timing import SyncTimer
from engine.weights import random_model
from sim.scenario.specs import get_model

TOL = {"atol": 1e-4, "rtol": 1e-4}


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    err = (a - b).abs().max().item()
    assert torch.allclose(a, b, **TOL), f"{what}: max |diff| {err:.2e}"


def _prompt(n: int, vocab: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


SPECS = {
    "gqa-neox-untied": get_model("tiny-llama"),
    "gqa-interleaved-tied": replace(get_model("tiny-llama"), rope_interleaved=True,
                                    tie_embeddings=True),
    "mha-headdim32": replace(get_model("tiny-llama"), num_heads=2, num_kv_heads=2,
                             rope_theta=500000.0),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_chunked_prefill_and_decodes_match_dense(name):
    model = random_model(SPECS[name], seed=1)
    prompt = _prompt(45, model.spec.vocab_size, 1)
    ref = dense_logits(model, prompt)
    table = table_for([prompt])
    ex = make_executor(model, [prompt], block_size=4)
    got = []
    for n in [8, 8, 8, 8, 5] + [1] * 8:  # prefill chunks across block edges, then decodes
        plan = plan_for(table, 4, [(0, n)])
        got.append(ex.forward(plan, table, all_tokens=True))
        commit(table, plan)
    _close(torch.cat(got), ref, name)


def test_sampled_rows_only(tiny):
    prompt = _prompt(10, tiny.spec.vocab_size, 2)
    table = table_for([prompt])
    ex = make_executor(tiny, [prompt])
    logits = ex.forward(plan_for(table, 4, [(0, 10)]), table)
    assert logits.shape == (1, tiny.spec.vocab_size)
    _close(logits[0], dense_logits(tiny, prompt)[-1], "last row")


def test_greedy_run_matches_dense_greedy(tiny):
    prompt = _prompt(13, tiny.spec.vocab_size, 3)
    table = table_for([prompt], output_len=10)
    ex = make_executor(tiny, [prompt])
    for n in [6, 7] + [1] * 9:
        plan = plan_for(table, 4, [(0, n)])
        res = ex.run(plan, table)
        assert res.duration > 0 and not res.stopped.any()
        commit(table, plan)
    assert ex.generated_tokens(0) == dense_greedy(tiny, prompt, 10)
    assert ex.token_ids(0)[:13] == prompt


def test_mixed_batch_matches_separate(tiny):
    """One sequence prefills in chunks while two others decode, in the same steps."""
    v = tiny.spec.vocab_size
    # per step: (rid, new tokens). r1, r2 prefill first; then r0 chunks while they decode.
    steps = [[(1, 5), (2, 14)], [(1, 4)], [(0, 8), (1, 1), (2, 1)], [(0, 8), (1, 1), (2, 1)],
             [(2, 1), (0, 5), (1, 1)], [(0, 1), (1, 1), (2, 1)]]
    seqs = [_prompt(n, v, 10 + n) for n in (22, 13, 18)]  # the tokens the steps walk through

    def run(rids: list[int]) -> dict[tuple[int, int], torch.Tensor]:
        """Logits per (rid, step) when only ``rids`` run (in the same per-step chunks)."""
        table = table_for(seqs)
        ex = make_executor(tiny, seqs, num_blocks=32, shuffle=7)
        out = {}
        for k, step in enumerate(steps):
            rows = [(r, n) for r, n in step if r in rids]
            if not rows:
                continue
            plan = plan_for(table, 4, rows)
            logits = ex.forward(plan, table, all_tokens=True)
            for (r, _), chunk in zip(rows, logits.split(plan.num_new_tokens.tolist()), strict=True):
                out[r, k] = chunk
            commit(table, plan)
        return out

    together = run([0, 1, 2])
    for r in range(3):
        alone = run([r])
        for key, logits in alone.items():
            _close(together[key], logits, f"request {key[0]} step {key[1]}")
        ref = dense_logits(tiny, seqs[r])
        mine = torch.cat([together[key] for key in sorted(alone, key=lambda k: k[1])])
        _close(mine, ref[: len(mine)], f"request {r} vs dense")


def test_op_timer_sees_every_op(tiny):
    timer = SyncTimer()
    prompt = _prompt(8, tiny.spec.vocab_size, 4)
    table = table_for([prompt])
    ex = make_executor(tiny, [prompt], timer=timer)
    ex.run(plan_for(table, 4, [(0, 8)]), table)
    assert set(timer.calls) == {*OPS, "prepare_inputs", "sample"}
    assert timer.calls["attention"] == tiny.spec.num_layers
    assert all(s >= 0 for s in timer.seconds.values())
    ex.timer = None  # back to the no-op default
    assert tiny.timer("x").__enter__() is None


def test_bf16_random_model_runs():
    model = random_model("tiny-llama", dtype="bf16", seed=5)
    assert model.embed_tokens.dtype == torch.bfloat16
    prompt = _prompt(12, model.spec.vocab_size, 5)
    table = table_for([prompt])
    ex = make_executor(model, [prompt])
    logits = ex.forward(plan_for(table, 4, [(0, 12)]), table)
    assert torch.isfinite(logits).all()
    ref = dense_logits(random_model("tiny-llama", seed=5), prompt)[-1]
    assert torch.allclose(logits[0], ref, atol=0.1, rtol=0.05)  # bf16 vs fp32 weights


def test_random_weights_are_the_same_in_every_dtype():
    """bf16/fp16 random weights are the fp32 ones rounded, for sizes that are not multiples of
    16 too (PyTorch's own ``normal_`` differs by dtype there, and by CPU build elsewhere)."""
    spec = replace(get_model("tiny-llama"), hidden_size=72, num_heads=4, num_kv_heads=2,
                   intermediate_size=99, vocab_size=251)
    ref = dict(random_model(spec, seed=2).named_parameters())
    for dtype in (torch.bfloat16, torch.float16):
        for name, p in random_model(spec, seed=2, dtype=dtype).named_parameters():
            assert torch.equal(p, ref[name].to(dtype)), (dtype, name)


def test_random_init_is_seeded():
    a, b = random_model("tiny-llama", seed=3), random_model("tiny-llama", seed=3)
    c = random_model("tiny-llama", seed=4)
    assert torch.equal(a.layers[0].qkv_proj, b.layers[0].qkv_proj)
    assert not torch.equal(a.layers[0].qkv_proj, c.layers[0].qkv_proj)
    logits = dense_logits(a, list(range(20)))
    assert torch.isfinite(logits).all() and 0.1 < logits.std().item() < 100
