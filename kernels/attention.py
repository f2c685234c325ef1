"""Paged attention for one flat, mixed prefill + decode batch.

Sequence ``b`` owns query rows ``query_start_loc[b]:query_start_loc[b+1]`` (``q_len_b`` rows,
1 for a decode). ``seq_lens[b]`` counts every token in the cache for ``b`` *including* this
step's (already written), so query row ``i`` of ``b`` sits at position
``seq_lens[b] - q_len_b + i`` and attends causally to positions ``0..that position``.
K/V of position ``p`` live at ``cache[block_tables[b, p // block_size], p % block_size]``.
GQA: query head ``h`` reads kv head ``h // (Hq // Hk)``. Rows of ``q`` owned by no sequence
get zeros.
"""

import math

import torch

from kernels.dispatch import next_pow2, tl, triton, use_triton
from kernels.variants import launch

# ----------------------------------------------------------------------------- reference


def paged_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Reference: per sequence, gather its blocks into dense K/V, masked softmax attention."""
    _, hq, d = q.shape
    block_size, hk = k_cache.shape[1], k_cache.shape[2]
    group = hq // hk
    out = torch.zeros_like(q)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    for b, seq_len in enumerate(lens):
        q0, q1 = starts[b], starts[b + 1]
        q_len = q1 - q0
        if q_len == 0:
            continue
        if q_len > seq_len:
            raise ValueError(f"sequence {b}: {q_len} query rows but seq_len {seq_len}")
        n_blocks = -(-seq_len // block_size)
        blocks = block_tables[b, :n_blocks].long()
        k = k_cache[blocks].reshape(-1, hk, d)[:seq_len].float()  # [L, Hk, D]
        v = v_cache[blocks].reshape(-1, hk, d)[:seq_len].float()
        k = k.repeat_interleave(group, dim=1)  # [L, Hq, D]
        v = v.repeat_interleave(group, dim=1)
        qb = q[q0:q1].float()  # [q_len, Hq, D]
        scores = torch.einsum("qhd,khd->hqk", qb, k) * scale
        q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
        k_pos = torch.arange(seq_len, device=q.device)
        future = k_pos[None, :] > q_pos[:, None]  # [q_len, L]
        scores = scores.masked_fill(future[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[q0:q1] = torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
    return out


# ----------------------------------------------------------------------------- triton


# Sizes that change from step to step are not specialised on (1, multiple of 16), so a
# dtype and the constexprs alone pick the compiled variant (see kernels.variants).
@triton.jit(do_not_specialize=["num_seqs", "num_tokens", "num_splits", "s_bt"])
def _paged_attention_kernel(
    q_ptr,
    kc_ptr,
    vc_ptr,
    out_ptr,
    bt_ptr,
    qsl_ptr,
    sl_ptr,
    ws_m_ptr,
    ws_l_ptr,
    ws_acc_ptr,
    scale_log2,
    num_seqs,
    num_tokens,
    num_q_heads,
    num_splits,
    block_size,
    s_qt,
    s_qh,
    s_ot,
    s_oh,
    s_kb,
    s_ko,
    s_kh,
    s_vb,
    s_vo,
    s_vh,
    s_bt,
    D: tl.constexpr,
    G: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_PREC: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """One program = one (query tile of ``BLOCK_Q`` tokens x ``G`` heads, kv head, kv split).

    Tiles are numbered without a host sync: sequence ``b``'s tiles start at
    ``query_start_loc[b] // BLOCK_Q + b``; the grid has ``T // BLOCK_Q + B`` tiles and each
    program binary-searches its sequence (surplus tiles exit at once). With ``SPLIT`` the
    key range is cut into ``num_splits`` contiguous parts (flash-decoding) and each program
    writes its unnormalised partial result (running max in log2 units, sum, accumulator) to
    the workspace, laid out ``[token, head, split]``, for ``_combine_splits_kernel``. Each
    sequence shares its own key tiles among the splits, so a split count chosen for long
    contexts stays correct for short ones (the surplus splits see no key).
    """
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)

    lo = 0
    hi = num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tl.load(qsl_ptr + mid) // BLOCK_Q + mid <= pid:
            lo = mid
        else:
            hi = mid - 1
    b = lo
    q_start = tl.load(qsl_ptr + b)
    q_len = tl.load(qsl_ptr + b + 1) - q_start
    tile = pid - (q_start // BLOCK_Q + b)
    if tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(sl_ptr + b)
    ctx = seq_len - q_len  # position of this sequence's first query row

    # Rows of the tile: (query token, head within the kv group), token-major.
    offs_m = tl.arange(0, BLOCK_M)
    qi = tile * BLOCK_Q + offs_m // G
    head = kvh * G + offs_m % G
    row_ok = (offs_m < BLOCK_Q * G) & (qi < q_len)
    q_pos = ctx + qi
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    tok = (q_start + qi).to(tl.int64)
    q_off = tok[:, None] * s_qt + head[:, None] * s_qh + offs_d[None, :]
    q = tl.load(q_ptr + q_off, mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    kv_end = ctx + tl.minimum(q_len, (tile + 1) * BLOCK_Q)  # last key any row needs, + 1
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    n_tiles = tl.cdiv(kv_end, BLOCK_N)
    per_split = tl.cdiv(n_tiles, num_splits)
    first = split * per_split
    last = tl.minimum(first + per_split, n_tiles)
    for start_n in range(first * BLOCK_N, last * BLOCK_N, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < kv_end
        blk = tl.load(bt_row + offs_n // block_size, mask=n_ok, other=0).to(tl.int64)
        off = (offs_n % block_size).to(tl.int64)
        k_off = blk[None, :] * s_kb + off[None, :] * s_ko + kvh * s_kh + offs_d[:, None]
        k = tl.load(kc_ptr + k_off, mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        s = tl.dot(q, k.to(q.dtype), input_precision=DOT_PREC) * scale_log2  # [M, N] fp32
        ok = (offs_n[None, :] <= q_pos[:, None]) & n_ok[None, :]
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # fully masked (padding) rows
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v_off = blk[:, None] * s_vb + off[:, None] * s_vo + kvh * s_vh + offs_d[None, :]
        v = tl.load(vc_ptr + v_off, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype), input_precision=DOT_PREC)
        m_i = m_new

    if SPLIT:
        ws_row = (tok * num_q_heads + head) * num_splits + split  # [M] int64
        tl.store(ws_m_ptr + ws_row, m_i, mask=row_ok)
        tl.store(ws_l_ptr + ws_row, l_i, mask=row_ok)
        ws_off = ws_row[:, None] * BLOCK_D + offs_d[None, :]
        tl.store(ws_acc_ptr + ws_off, acc, mask=row_ok[:, None])
    else:
        acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        o_off = tok[:, None] * s_ot + head[:, None] * s_oh + offs_d[None, :]
        o_mask = row_ok[:, None] & d_ok[None, :]
        tl.store(out_ptr + o_off, acc.to(out_ptr.dtype.element_ty), mask=o_mask)


@triton.jit(do_not_specialize=["num_splits"])
def _combine_splits_kernel(
    ws_m_ptr,
    ws_l_ptr,
    ws_acc_ptr,
    out_ptr,
    num_q_heads,
    num_splits,
    s_ot,
    s_oh,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """Merge the ``num_splits`` partials of one (token, query head) in one pass, all splits as
    one vector; rows nobody wrote (tokens owned by no sequence) stay 0."""
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    row = (tok * num_q_heads + head) * num_splits + offs_s  # [S]
    m = tl.load(ws_m_ptr + row, mask=offs_s < num_splits, other=float("-inf"))
    m_max = tl.max(m, 0)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.where(m == float("-inf"), 0.0, tl.exp2(m - m_safe))  # splits that saw no key: 0
    total = tl.sum(w * tl.load(ws_l_ptr + row, mask=w > 0.0, other=0.0), 0)
    part = tl.load(ws_acc_ptr + row[:, None] * BLOCK_D + offs_d[None, :],
                   mask=(w > 0.0)[:, None] & (offs_d < D)[None, :], other=0.0)  # never read unwritten
    acc = tl.sum(w[:, None] * part, 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(
        out_ptr + tok * s_ot + head * s_oh + offs_d,
        acc.to(out_ptr.dtype.element_ty),
        mask=offs_d < D,
    )


# Split-KV (flash-decoding) rule. A program is one (query tile, kv head); a small batch gives
# too few of them to keep every SM reading KV, so the key range is cut into splits, each a
# program of its own, merged by a second pass. Splits are powers of two (so the merge's
# vector width is one of a few compiled variants) and never shorter than MIN_KEYS_PER_SPLIT.
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64)
PROGRAMS_PER_SM = 4
MIN_KEYS_PER_SPLIT = 128

_SM_COUNT: dict[int, int] = {}


def sm_count(device: torch.device) -> int | None:
    """Streaming multiprocessors of a CUDA device; None elsewhere (no split-KV there)."""
    if device.type != "cuda":
        return None
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def query_block(num_tokens: int, num_seqs: int, group: int) -> int:
    """Rows (query tokens x heads of a kv group) per program: 64 when the batch is mostly
    prefill, 16 for decodes (one token each)."""
    return max(64 if num_tokens >= 8 * num_seqs else 16, next_pow2(group))


def num_programs(num_tokens: int, num_seqs: int, num_kv_heads: int, block_m: int, group: int) -> int:
    """Programs of the attention grid before splitting (surplus tiles included)."""
    return (num_tokens // (block_m // group) + num_seqs) * num_kv_heads


def choose_num_splits(programs: int, max_context: int | None, sms: int | None) -> int:
    """Split-KV count from batch x heads (``programs``) and context: enough splits for
    ``PROGRAMS_PER_SM`` programs per SM, none shorter than ``MIN_KEYS_PER_SPLIT`` keys, at most
    64, rounded down to a power of two. 1 without SMs (CPU) or once the batch fills the GPU.
    ``max_context`` None: unknown, limited by the batch alone."""
    target = PROGRAMS_PER_SM * (sms or 0)
    if programs >= target:
        return 1
    want = min(-(-target // programs), SPLIT_CHOICES[-1])
    if max_context is not None:
        want = min(want, max(1, max_context // MIN_KEYS_PER_SPLIT))
    return 1 << (want.bit_length() - 1)


def paged_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    block_m: int | None = None,
    block_n: int = 64,
    num_splits: int | None = None,
    max_context: int | None = None,
) -> torch.Tensor:
    """Triton flash-style paged attention over the whole mixed batch (no host sync).

    ``num_splits`` > 1 splits every key range into that many parts plus a merge pass
    (flash-decoding); default: :func:`choose_num_splits` on the grid size and ``max_context``
    (the longest ``seq_lens``, known to the caller; 1 on a CPU).
    """
    t, hq, d = q.shape
    hk = k_cache.shape[2]
    group = hq // hk
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("caches must have a contiguous last dim")
    block_tables = block_tables if block_tables.stride(-1) == 1 else block_tables.contiguous()
    out = torch.zeros_like(q)
    num_seqs = seq_lens.shape[0]
    if t == 0 or num_seqs == 0:
        return out
    block_m = block_m or query_block(t, num_seqs, group)
    block_q = block_m // group
    block_d = max(16, next_pow2(d))
    tiles = t // block_q + num_seqs
    splits = num_splits or choose_num_splits(tiles * hk, max_context, sm_count(q.device))
    if splits > 1:
        ws_m = torch.full((t, hq, splits), float("-inf"), dtype=torch.float32, device=q.device)
        ws_l = torch.empty((t, hq, splits), dtype=torch.float32, device=q.device)
        ws_acc = torch.empty((t, hq, splits, block_d), dtype=torch.float32, device=q.device)
    else:
        ws_m = ws_l = ws_acc = out  # unused
    launch(
        _paged_attention_kernel, (tiles, hk, splits),
        q, k_cache, v_cache, out, block_tables,
        query_start_loc.contiguous(), seq_lens.contiguous(), ws_m, ws_l, ws_acc,
        float(scale) * math.log2(math.e), num_seqs, t, hq, splits, k_cache.shape[1],
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0),
        D=d, G=group, BLOCK_Q=block_q, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=block_d, DOT_PREC="ieee" if q.dtype == torch.float32 else "tf32",
        SPLIT=splits > 1,
    )  # fmt: skip
    if splits > 1:
        launch(
            _combine_splits_kernel, (t, hq),
            ws_m, ws_l, ws_acc, out, hq, splits, out.stride(0), out.stride(1),
            D=d, BLOCK_D=block_d, BLOCK_S=next_pow2(splits),
        )  # fmt: skip
    return out


# ----------------------------------------------------------------------------- public


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    impl: str = "auto",
    max_context: int | None = None,
    num_splits: int | None = None,
    block_m: int | None = None,
) -> torch.Tensor:
    """Causal attention of ``q[T, Hq, D]`` over the paged cache; returns ``[T, Hq, D]``.

    ``max_context`` (the longest ``seq_lens``, if the caller knows it without a device sync)
    feeds the split-KV rule; ``num_splits`` and ``block_m`` (rows per program, see
    :func:`query_block`) force the Triton path's choices.
    """
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"bad shapes q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}")
    hq, hk = q.shape[1], k_cache.shape[2]
    if hq % hk or k_cache.shape[3] != q.shape[2]:
        raise ValueError(f"q heads/dim {tuple(q.shape[1:])} do not fit cache {tuple(k_cache.shape)}")
    if query_start_loc.shape[0] != seq_lens.shape[0] + 1:
        raise ValueError("query_start_loc must have len(seq_lens) + 1 entries")
    tensors = (q, k_cache, v_cache, block_tables, query_start_loc, seq_lens)
    if use_triton(impl, *tensors):
        return paged_attention_triton(*tensors, scale, block_m=block_m, num_splits=num_splits,
                                      max_context=max_context)
    return paged_attention_torch(*tensors, scale)
