"""Scatter this step's K/V into the paged cache.

Cache layout: ``[num_blocks, block_size, Hk, D]``; token ``t`` goes to
``slot = slot_mapping[t] = block_id * block_size + offset``; slot ``-1`` skips the token.
"""

import torch

from kernels.dispatch import tl, triton, use_triton
from kernels.variants import launch


def write_kv_cache_torch(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Reference: index-put the valid tokens into the caches (in place)."""
    block_size = k_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    blocks, offsets = slots // block_size, slots % block_size
    k_cache[blocks, offsets] = k[keep].to(k_cache.dtype)
    v_cache[blocks, offsets] = v[keep].to(v_cache.dtype)


@triton.jit
def _write_kv_kernel(
    k_ptr,
    v_ptr,
    kc_ptr,
    vc_ptr,
    slot_ptr,
    HD,
    D,
    block_size,
    s_kt,
    s_kh,
    s_vt,
    s_vh,
    s_kcb,
    s_kco,
    s_kch,
    s_vcb,
    s_vco,
    s_vch,
    BLOCK: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < HD) & (slot >= 0)
    safe = tl.maximum(slot, 0)
    blk = safe // block_size
    off = safe % block_size
    h = offs // D
    d = offs % D
    kv = tl.load(k_ptr + t * s_kt + h * s_kh + d, mask=mask)
    tl.store(
        kc_ptr + blk * s_kcb + off * s_kco + h * s_kch + d,
        kv.to(kc_ptr.dtype.element_ty),
        mask=mask,
    )
    vv = tl.load(v_ptr + t * s_vt + h * s_vh + d, mask=mask)
    tl.store(
        vc_ptr + blk * s_vcb + off * s_vco + h * s_vch + d,
        vv.to(vc_ptr.dtype.element_ty),
        mask=mask,
    )


def write_kv_cache_triton(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    block: int = 1024,
) -> None:
    """Triton scatter; grid = (T, cdiv(Hk * D, block))."""
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("caches must have a contiguous last dim")
    t, hk, d = k.shape
    if t == 0:
        return
    hd = hk * d
    grid = (t, triton.cdiv(hd, block))
    launch(
        _write_kv_kernel, grid,
        k, v, k_cache, v_cache, slot_mapping.contiguous(), hd, d, k_cache.shape[1],
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        BLOCK=block,
    )  # fmt: skip


def write_kv_cache(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    impl: str = "auto",
) -> None:
    """Write ``k, v [T, Hk, D]`` into ``k/v_cache [num_blocks, block_size, Hk, D]`` in place."""
    if k.shape != v.shape or k.dim() != 3:
        raise ValueError(f"bad k/v shapes {tuple(k.shape)}, {tuple(v.shape)}")
    if k_cache.shape[2:] != k.shape[1:] or v_cache.shape != k_cache.shape:
        raise ValueError(f"cache shape {tuple(k_cache.shape)} does not fit k {tuple(k.shape)}")
    if use_triton(impl, k, v, k_cache, v_cache, slot_mapping):
        write_kv_cache_triton(k, v, k_cache, v_cache, slot_mapping)
    else:
        write_kv_cache_torch(k, v, k_cache, v_cache, slot_mapping)
