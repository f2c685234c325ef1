"""SwiGLU gate: ``silu(x[..., :F]) * x[..., F:]`` computed in fp32, cast once."""

import torch
import torch.nn.functional as F

from kernels.dispatch import tl, triton, use_triton
from kernels.variants import launch


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    """Reference: ``x[..., 2F] -> silu(x[..., :F]) * x[..., F:]``."""
    f = x.shape[-1] // 2
    xf = x.float()
    return (F.silu(xf[..., :f]) * xf[..., f:]).to(x.dtype)


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, F_, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < F_
    a = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + row * stride_x + F_ + offs, mask=mask, other=0.0).to(tl.float32)
    y = a / (1.0 + tl.exp(-a)) * b
    tl.store(out_ptr + row * stride_o + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul_triton(x: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """Triton SwiGLU gate; grid = (rows, cdiv(F, block))."""
    f = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], f), dtype=x.dtype, device=x.device)
    if x2.shape[0] > 0 and f > 0:
        grid = (x2.shape[0], triton.cdiv(f, block))
        launch(_silu_and_mul_kernel, grid, x2, out, f, x2.stride(0), out.stride(0), BLOCK=block)
    return out.view(*x.shape[:-1], f)


def silu_and_mul(x: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """``x[T, 2F] -> silu(x[:, :F]) * x[:, F:]`` of shape ``[T, F]``."""
    if x.shape[-1] % 2:
        raise ValueError(f"last dim must be even, got {x.shape[-1]}")
    if use_triton(impl, x):
        return silu_and_mul_triton(x)
    return silu_and_mul_torch(x)
