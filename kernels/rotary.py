"""Rotary position embedding (RoPE), out-of-place, for q and k.

``cos_sin_cache[pos]`` holds ``[cos(pos * f_0..f_{D/2-1}), sin(pos * f_0..f_{D/2-1})]``.
Rotated pairs:

* neox / half-split (``interleaved=False``, HF Llama layout): ``(i, i + D/2)``
* interleaved (``interleaved=True``, GPT-J / GGUF llama layout): ``(2i, 2i + 1)``

For each pair ``(a, b)`` with frequency ``i``: ``a' = a cos - b sin``, ``b' = b cos + a sin``.
"""

import torch

from kernels.dispatch import next_pow2, tl, triton, use_triton
from kernels.variants import launch


def build_cos_sin_cache(
    max_pos: int,
    head_dim: int,
    theta: float,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """``[max_pos, head_dim]`` table: first ``head_dim/2`` columns cos, last ``head_dim/2`` sin.

    Frequencies ``f_i = theta ** (-2i / head_dim)``, computed in fp32 as HF transformers does.
    """
    if head_dim % 2:
        raise ValueError(f"head_dim must be even, got {head_dim}")
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    t = torch.arange(max_pos, dtype=torch.int64).float()
    freqs = torch.outer(t, inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype=dtype, device=device)


# ----------------------------------------------------------------------------- reference


def _rotate_torch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    if interleaved:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
    else:
        x1, x2 = xf[..., :half], xf[..., half:]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    out = torch.stack([o1, o2], dim=-1).flatten(-2) if interleaved else torch.cat([o1, o2], -1)
    return out.to(x.dtype)


def rotary_embedding_torch(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    interleaved: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference RoPE: gather the cache rows for ``positions`` and rotate q, k."""
    half = q.shape[-1] // 2
    cs = cos_sin_cache[positions.long()].float()  # [T, D]
    cos, sin = cs[:, None, :half], cs[:, None, half:]  # broadcast over heads
    return _rotate_torch(q, cos, sin, interleaved), _rotate_torch(k, cos, sin, interleaved)


# ----------------------------------------------------------------------------- triton


@triton.jit
def _rope_kernel(
    pos_ptr,
    x_ptr,
    out_ptr,
    cache_ptr,
    H,
    stride_xt,
    stride_xh,
    stride_ot,
    stride_oh,
    stride_c,
    HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    offs_i = tl.arange(0, BLOCK_HALF)
    i_mask = offs_i < HALF
    mask = (offs_h[:, None] < H) & i_mask[None, :]
    cos = tl.load(cache_ptr + pos * stride_c + offs_i, mask=i_mask, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * stride_c + HALF + offs_i, mask=i_mask, other=0.0).to(tl.float32)
    if INTERLEAVED:
        i1 = 2 * offs_i
        i2 = 2 * offs_i + 1
    else:
        i1 = offs_i
        i2 = offs_i + HALF
    src = x_ptr + t * stride_xt + offs_h[:, None] * stride_xh
    x1 = tl.load(src + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * cos[None, :] - x2 * sin[None, :]
    o2 = x2 * cos[None, :] + x1 * sin[None, :]
    dst = out_ptr + t * stride_ot + offs_h[:, None] * stride_oh
    tl.store(dst + i1[None, :], o1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + i2[None, :], o2.to(out_ptr.dtype.element_ty), mask=mask)


def _rope_one(positions: torch.Tensor, x: torch.Tensor, cache: torch.Tensor, interleaved: bool) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    t, h, d = x.shape
    out = torch.empty((t, h, d), dtype=x.dtype, device=x.device)
    if t > 0 and h > 0:
        launch(
            _rope_kernel, (t,),
            positions, x, out, cache, h,
            x.stride(0), x.stride(1), out.stride(0), out.stride(1), cache.stride(0),
            HALF=d // 2, BLOCK_H=next_pow2(h), BLOCK_HALF=next_pow2(d // 2),
            INTERLEAVED=interleaved,
        )  # fmt: skip
    return out


def rotary_embedding_triton(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    interleaved: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton RoPE: one program per token, all heads of one tensor at once."""
    positions = positions.contiguous()
    cache = cos_sin_cache if cos_sin_cache.stride(-1) == 1 else cos_sin_cache.contiguous()
    return _rope_one(positions, q, cache, interleaved), _rope_one(positions, k, cache, interleaved)


# ----------------------------------------------------------------------------- public


def rotary_embedding(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    interleaved: bool,
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q[T, Hq, D]`` and ``k[T, Hk, D]`` by ``positions[T]``; returns new tensors."""
    d = q.shape[-1]
    if q.dim() != 3 or k.dim() != 3 or k.shape[-1] != d or d % 2:
        raise ValueError(f"bad q/k shapes {tuple(q.shape)}, {tuple(k.shape)}")
    if cos_sin_cache.shape[-1] != d:
        raise ValueError(f"cos_sin_cache last dim {cos_sin_cache.shape[-1]} != head_dim {d}")
    if use_triton(impl, positions, q, k, cos_sin_cache):
        return rotary_embedding_triton(positions, q, k, cos_sin_cache, interleaved)
    return rotary_embedding_torch(positions, q, k, cos_sin_cache, interleaved)
