"""RMSNorm and fused residual-add + RMSNorm.

Math (both implementations): everything in fp32, one cast at the end,
``y = x * rsqrt(mean(x^2) + eps) * weight``. For the fused variant the residual sum is
rounded to the input dtype first and the norm is computed from that rounded sum, so
``fused_add_rms_norm(x, r, w)[0] == rms_norm(x + r, w)``.
"""

import torch

from kernels.dispatch import next_pow2, tl, triton, use_triton
from kernels.variants import launch

# ----------------------------------------------------------------------------- reference


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Reference RMSNorm over the last dimension."""
    xf = x.float()
    inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * inv * weight.float()).to(x.dtype)


def fused_add_rms_norm_torch(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: ``r = x + residual``; returns ``(rms_norm(r), r)``."""
    new_residual = (x.float() + residual.float()).to(x.dtype)
    return rms_norm_torch(new_residual, weight, eps), new_residual


# ----------------------------------------------------------------------------- triton


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    res_out_ptr,
    H,
    stride_x,
    stride_r,
    stride_o,
    stride_ro,
    eps,
    HAS_RES: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < H
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        r = tl.load(res_ptr + row * stride_r + offs, mask=mask, other=0.0).to(tl.float32)
        s = (x + r).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_ro + offs, s, mask=mask)
        x = s.to(tl.float32)
    var = tl.sum(x * x, axis=0) / H
    inv = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + offs, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """View as [rows, H] with a contiguous last dim."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _launch(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    h = x.shape[-1]
    x2 = _rows(x)
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    if residual is not None:
        r2 = _rows(residual)
        res_out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    else:
        r2, res_out = x2, out  # unused when HAS_RES is False
    n = x2.shape[0]
    if n > 0:
        launch(
            _rms_norm_kernel, (n,),
            x2, r2, weight.contiguous(), out, res_out, h,
            x2.stride(0), r2.stride(0), out.stride(0), res_out.stride(0), float(eps),
            HAS_RES=residual is not None, BLOCK=next_pow2(h),
        )  # fmt: skip
    return out.view(x.shape), (res_out.view(x.shape) if residual is not None else None)


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Triton RMSNorm over the last dimension (one program per row)."""
    return _launch(x, None, weight, eps)[0]


def fused_add_rms_norm_triton(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton fused residual add + RMSNorm (out-of-place)."""
    out, res = _launch(x, residual, weight, eps)
    assert res is not None
    return out, res


# ----------------------------------------------------------------------------- public


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, impl: str = "auto") -> torch.Tensor:
    """RMSNorm of ``x[T, H]`` with ``weight[H]``; returns ``[T, H]`` in ``x.dtype``."""
    if use_triton(impl, x, weight):
        return rms_norm_triton(x, weight, eps)
    return rms_norm_torch(x, weight, eps)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, impl: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(rms_norm(x + residual), x + residual)``; inputs are not modified."""
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} differ")
    if use_triton(impl, x, residual, weight):
        return fused_add_rms_norm_triton(x, residual, weight, eps)
    return fused_add_rms_norm_torch(x, residual, weight, eps)
