"""paged_attention: reference vs dense causal attention, Triton vs reference.

Cache slots that no sequence owns (and the tail of each last block) hold NaN, so any
out-of-range read by either implementation poisons the output.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from kernel_testutils import DOT_DTYPES, TRITON_DEVICE, assert_close, requires_triton

import kernels
from kernels.attention import paged_attention_triton

DEV = TRITON_DEVICE or "cpu"

# (cached context, new query rows) per sequence: first-token decode, decode right after a
# block edge, fresh prefill across blocks and query tiles, chunk with cached context that
# crosses a block edge, an empty slot (q_len 0), long decode over several KV tiles.
MIXED = [(0, 1), (4, 1), (0, 19), (5, 6), (3, 0), (70, 1)]


def make_batch(specs, hq, hk, d, block_size, dtype, seed=0, pad_rows=0):
    """Scatter random per-sequence K/V into a shuffled paged cache; returns inputs + dense K/V."""
    g = torch.Generator().manual_seed(seed)
    seq_lens = [c + n for c, n in specs]
    n_blocks = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(n_blocks) + 2
    max_blocks = max(n_blocks) + 1
    k_cache = torch.full((num_blocks, block_size, hk, d), float("nan"))
    v_cache = torch.full_like(k_cache, float("nan"))
    perm = torch.randperm(num_blocks, generator=g).tolist()
    block_tables = torch.zeros(len(specs), max_blocks, dtype=torch.int32)
    dense_k, dense_v = [], []
    for b, seq_len in enumerate(seq_lens):
        ids = [perm.pop() for _ in range(n_blocks[b])]
        block_tables[b, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        k = torch.randn(seq_len, hk, d, generator=g)
        v = torch.randn(seq_len, hk, d, generator=g)
        for p in range(seq_len):
            k_cache[ids[p // block_size], p % block_size] = k[p]
            v_cache[ids[p // block_size], p % block_size] = v[p]
        dense_k.append(k.to(dtype))
        dense_v.append(v.to(dtype))
    q_lens = [n for _, n in specs]
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(qsl[-1]) + pad_rows, hq, d, generator=g)
    args = (
        q.to(DEV, dtype),
        k_cache.to(DEV, dtype),
        v_cache.to(DEV, dtype),
        block_tables.to(DEV),
        qsl.to(DEV),
        torch.tensor(seq_lens, dtype=torch.int32, device=DEV),
    )
    return args, dense_k, dense_v


def dense_causal_attention(q, qsl, dense_k, dense_v, scale):
    """Oracle from unpaged K/V via SDPA with a bottom-right aligned causal mask (float64)."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    for b, (k, v) in enumerate(zip(dense_k, dense_v, strict=True)):
        q0, q1 = int(qsl[b]), int(qsl[b + 1])
        if q1 == q0:
            continue
        seq_len, n = k.shape[0], q1 - q0
        q_pos = torch.arange(seq_len - n, seq_len)
        mask = torch.arange(seq_len)[None, :] <= q_pos[:, None]
        o = F.scaled_dot_product_attention(
            q[q0:q1].cpu().double().transpose(0, 1),
            k.double().transpose(0, 1),
            v.double().transpose(0, 1),
            attn_mask=mask,
            scale=scale,
            enable_gqa=True,
        )
        out[q0:q1] = o.transpose(0, 1)
    return out


@pytest.mark.parametrize("hq,hk", [(8, 8), (8, 2), (8, 1)])
def test_reference_matches_dense_attention(hq, hk):
    d = 16
    scale = 1 / math.sqrt(d)
    args, dk, dv = make_batch(MIXED, hq, hk, d, 4, torch.float32, seed=hq + hk, pad_rows=2)
    ref = kernels.paged_attention(*args, scale, impl="torch")
    assert not ref.isnan().any()
    assert_close(ref, dense_causal_attention(args[0], args[4], dk, dv, scale).float())
    assert torch.equal(ref[-2:], torch.zeros_like(ref[-2:])), "unowned rows must be zero"


@requires_triton
@pytest.mark.parametrize("dtype", DOT_DTYPES)
@pytest.mark.parametrize("hq,hk", [(8, 8), (8, 2), (8, 1)])
def test_triton_matches_reference_mixed_batch(hq, hk, dtype):
    d = 32
    args, _, _ = make_batch(MIXED, hq, hk, d, 4, dtype, seed=7, pad_rows=1)
    scale = 1 / math.sqrt(d)
    ref = kernels.paged_attention(*args, scale, impl="torch")
    out = kernels.paged_attention(*args, scale, impl="triton")
    assert out.dtype == dtype and out.shape == args[0].shape
    assert not out.isnan().any()
    assert_close(out, ref)


@requires_triton
def test_triton_odd_shapes_and_tiles():
    """GQA group 3, head_dim 40 (padded), block_size 16, 16-key tiles, 32-row query tiles,
    and the split-KV (flash-decoding) path with more splits than some sequences have tiles."""
    specs = [(0, 1), (15, 1), (16, 1), (30, 12), (0, 17), (40, 1)]
    args, _, _ = make_batch(specs, 6, 2, 40, 16, torch.float32, seed=3)
    ref = kernels.paged_attention(*args, 0.1, impl="torch")
    for block_m, block_n, splits in [(32, 16, 1), (16, 64, 1), (16, 16, 3)]:
        out = paged_attention_triton(*args, 0.1, block_m=block_m, block_n=block_n, num_splits=splits)
        assert_close(out, ref)


@requires_triton
def test_triton_decode_only_batch():
    """Pure decode step (q_len 1 everywhere) with ragged lengths around block edges."""
    specs = [(c, 1) for c in (0, 3, 4, 7, 8, 31)]
    args, _, _ = make_batch(specs, 4, 2, 16, 4, torch.float16, seed=11, pad_rows=1)
    ref = kernels.paged_attention(*args, 0.25, impl="torch")
    assert_close(kernels.paged_attention(*args, 0.25, impl="triton"), ref)
    assert_close(paged_attention_triton(*args, 0.25, block_n=16, num_splits=2), ref)


@requires_triton
def test_triton_prefill_heavy_batch():
    """Mostly-prefill batch: the default picks 64-row query tiles (group 2 -> 32 tokens)."""
    specs = [(0, 45), (9, 1), (20, 30)]
    args, _, _ = make_batch(specs, 4, 2, 32, 8, torch.float16, seed=5)
    ref = kernels.paged_attention(*args, 0.2, impl="torch")
    assert_close(kernels.paged_attention(*args, 0.2, impl="triton"), ref)


# ----------------------------------------------------------------------------- split-KV


def test_split_rule_on_batch_heads_and_context():
    """Llama-3-8B on an H100 (8 kv heads, 132 SMs): one decode row at 8k context gets 64
    splits, at 1k 8 (no split shorter than 128 keys); 128 rows fill the GPU unsplit."""
    from kernels.attention import SPLIT_CHOICES, choose_num_splits, num_programs, query_block

    def splits(batch, context, sms=132):
        bm = query_block(batch, batch, 4)
        return choose_num_splits(num_programs(batch, batch, 8, bm, 4), context, sms)

    assert splits(1, 8192) == 64 and splits(1, 1024) == 8 and splits(1, 100) == 1
    assert splits(128, 8192) == 1 and splits(8, 8192) == 4
    assert splits(1, 8192, sms=None) == 1  # a CPU
    assert choose_num_splits(8, None, 132) == 64  # context unknown: by the batch alone
    for sms in (16, 132):
        prev = 64
        for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            s = splits(batch, 8192, sms)
            assert s in SPLIT_CHOICES and s <= prev  # more rows, fewer splits
            prev = s


@requires_triton
@pytest.mark.parametrize("splits", [2, 8, 64])
def test_split_kv_long_context_matches_reference(splits):
    """Split-KV on a few decode rows over long contexts (and a short one: most splits see no
    key), a prefill chunk beside them, and a padding token owned by no sequence."""
    specs = [(1500, 1), (40, 1), (700, 9), (1023, 1)]
    args, _, _ = make_batch(specs, 4, 2, 16, 16, torch.float32, seed=splits, pad_rows=1)
    ref = kernels.paged_attention(*args, 0.25, impl="torch")
    out = kernels.paged_attention(*args, 0.25, impl="triton", num_splits=splits)
    assert_close(out, ref)
    assert torch.equal(out[-1], torch.zeros_like(out[-1]))


@requires_triton
def test_split_rule_drives_the_kernel(monkeypatch):
    """With the GPU's SM count the rule splits one long decode row; the result is unchanged."""
    from kernels import attention

    seen = []
    real = attention.launch

    def spy(fn, grid, *a, **kw):
        seen.append((fn.__name__, grid))
        real(fn, grid, *a, **kw)

    monkeypatch.setattr(attention, "sm_count", lambda device: 132)
    monkeypatch.setattr(attention, "launch", spy)
    args, _, _ = make_batch([(2047, 1)], 4, 2, 16, 16, torch.float32, seed=1)
    ref = kernels.paged_attention(*args, 0.25, impl="torch")
    assert_close(kernels.paged_attention(*args, 0.25, impl="triton", max_context=2048), ref)
    assert seen[0] == ("_paged_attention_kernel", (1, 2, 16))  # 2048 keys / 128 per split
    assert seen[1][0] == "_combine_splits_kernel"
