"""RMSNorm, fused add + RMSNorm, SiLU-and-mul, RoPE: Triton vs reference, reference vs formulas."""

import pytest
import torch
import torch.nn.functional as F
from kernel_testutils import ALL_DTYPES, TRITON_DEVICE, assert_close, requires_triton

import kernels

DEV = TRITON_DEVICE or "cpu"


# ----------------------------------------------------------------------------- RMSNorm


@requires_triton
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(1, 64), (7, 96)])
def test_rms_norm_matches_reference(dtype, shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(DEV, dtype)
    w = torch.randn(shape[-1], generator=g).to(DEV, dtype)
    ref = kernels.rms_norm(x, w, 1e-6, impl="torch")
    out = kernels.rms_norm(x, w, 1e-6, impl="triton")
    assert out.dtype == dtype and out.shape == x.shape
    assert_close(out, ref)


def test_rms_norm_reference_formula():
    x, w = torch.randn(5, 32, dtype=torch.float64), torch.randn(32, dtype=torch.float64)
    expect = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w
    assert_close(kernels.rms_norm(x.float(), w.float(), 1e-5, impl="torch"), expect.float())


@requires_triton
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_fused_add_rms_norm(dtype):
    g = torch.Generator().manual_seed(1)
    big = torch.randn(5, 160, generator=g).to(DEV, dtype)
    x = big[:, :80]  # non-contiguous rows
    r = torch.randn(5, 80, generator=g).to(DEV, dtype)
    w = torch.randn(80, generator=g).to(DEV, dtype)
    x0, r0 = x.clone(), r.clone()
    ref_out, ref_res = kernels.fused_add_rms_norm(x, r, w, 1e-6, impl="torch")
    out, res = kernels.fused_add_rms_norm(x, r, w, 1e-6, impl="triton")
    assert torch.equal(x, x0) and torch.equal(r, r0), "must be out-of-place"
    if dtype != torch.bfloat16:  # the interpreter's fp32->bf16 cast truncates
        assert torch.equal(res, ref_res)
    assert_close(res, (x.float() + r.float()).to(dtype))
    assert_close(out, ref_out)
    assert_close(out, kernels.rms_norm(ref_res, w, 1e-6, impl="torch"))


# ----------------------------------------------------------------------------- SiLU and mul


@requires_triton
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(1, 2 * 8), (3, 2 * 1100)])  # 1100 > one 1024 block
def test_silu_and_mul(dtype, shape):
    g = torch.Generator().manual_seed(2)
    x = (3 * torch.randn(shape, generator=g)).to(DEV, dtype)
    f = shape[1] // 2
    ref = kernels.silu_and_mul(x, impl="torch")
    out = kernels.silu_and_mul(x, impl="triton")
    assert out.shape == (shape[0], f) and out.dtype == dtype
    assert_close(out, ref)
    expect = (F.silu(x[:, :f].double()) * x[:, f:].double()).to(dtype)
    assert_close(ref, expect)


# ----------------------------------------------------------------------------- RoPE


def test_cos_sin_cache_values():
    cache = kernels.build_cos_sin_cache(10, 8, 100.0)
    assert cache.shape == (10, 8) and cache.dtype == torch.float32
    assert torch.equal(cache[0], torch.tensor([1.0] * 4 + [0.0] * 4))
    p, i = 7, 3
    angle = torch.tensor(p * 100.0 ** (-2 * i / 8), dtype=torch.float64)
    assert abs(cache[p, i].item() - torch.cos(angle).item()) < 1e-6
    assert abs(cache[p, 4 + i].item() - torch.sin(angle).item()) < 1e-6


def _rope_oracle(pos, x, theta, interleaved):
    """Independent float64 RoPE: rotate_half form (neox) or complex product (interleaved)."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.double()[:, None, None] * inv  # [T, 1, D/2]
    xd = x.double()
    if interleaved:
        z = torch.view_as_complex(xd.reshape(*x.shape[:-1], d // 2, 2).contiguous())
        return torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang)).flatten(-2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    rot = torch.cat([-xd[..., d // 2 :], xd[..., : d // 2]], -1)
    return xd * cos + rot * sin


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_reference_against_formula(interleaved):
    g = torch.Generator().manual_seed(3)
    pos = torch.tensor([0, 1, 5, 37])
    q, k = torch.randn(4, 4, 16, generator=g), torch.randn(4, 2, 16, generator=g)
    cache = kernels.build_cos_sin_cache(64, 16, 10000.0)
    rq, rk = kernels.rotary_embedding(pos, q, k, cache, interleaved, impl="torch")
    torch.testing.assert_close(rq.double(), _rope_oracle(pos, q, 10000.0, interleaved), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rk.double(), _rope_oracle(pos, k, 10000.0, interleaved), atol=1e-5, rtol=1e-5)


@requires_triton
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_rope_matches_reference(interleaved, dtype):
    g = torch.Generator().manual_seed(4)
    t, hq, hk, d = 5, 6, 2, 32
    qkv = torch.randn(t, (hq + 2 * hk) * d, generator=g).to(DEV, dtype)
    q = qkv[:, : hq * d].view(t, hq, d)  # strided views, as after a fused QKV matmul
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    pos = torch.tensor([0, 3, 4, 100, 2047], device=DEV)
    cache = kernels.build_cos_sin_cache(2048, d, 500000.0, device=DEV)
    q0, k0 = q.clone(), k.clone()
    rq, rk = kernels.rotary_embedding(pos, q, k, cache, interleaved, impl="torch")
    tq, tk = kernels.rotary_embedding(pos, q, k, cache, interleaved, impl="triton")
    assert torch.equal(q, q0) and torch.equal(k, k0), "must be out-of-place"
    assert tq.shape == q.shape and tk.shape == k.shape and tq.dtype == dtype
    assert_close(tq, rq)
    assert_close(tk, rk)
