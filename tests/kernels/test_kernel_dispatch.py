"""Dispatcher: which implementation runs for which tensors and ``impl``."""

import pytest
import torch

import kernels
from kernels import activation, attention, dispatch, kv_cache, norm, rotary, sampling
from kernels.dispatch import select_impl


def test_auto_and_torch_pick_reference_on_cpu():
    x = torch.zeros(2, 4)
    assert select_impl("auto", x) == "torch"
    assert select_impl("torch", x) == "torch"


@pytest.mark.skipif(not kernels.HAS_TRITON, reason="needs triton")
def test_triton_on_cpu_needs_interpreter(monkeypatch):
    """CPU tensors run Triton only when the interpreter was on when Triton was imported (as
    in the CPU test runs); asking for it later, or not at all, is refused with the reason."""
    x = torch.zeros(2, 4)
    monkeypatch.setattr(dispatch, "_INTERPRETED_AT_IMPORT", True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert select_impl("triton", x) == "triton"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        select_impl("triton", x)
    monkeypatch.setattr(dispatch, "_INTERPRETED_AT_IMPORT", False)  # a GPU run: compiled mode
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="imported in compiled mode"):
        select_impl("triton", x)


def test_bad_impl_rejected():
    with pytest.raises(ValueError):
        select_impl("cuda", torch.zeros(1))


def _boom(*args, **kwargs):
    raise AssertionError("the Triton path must not run for CPU tensors with impl='auto'")


def test_public_functions_use_reference_on_cpu(monkeypatch):
    """With impl='auto' on CPU every public function returns without touching Triton."""
    for mod, name in [
        (norm, "rms_norm_triton"),
        (norm, "fused_add_rms_norm_triton"),
        (activation, "silu_and_mul_triton"),
        (rotary, "rotary_embedding_triton"),
        (kv_cache, "write_kv_cache_triton"),
        (attention, "paged_attention_triton"),
        (sampling, "sample_triton"),
    ]:
        monkeypatch.setattr(mod, name, _boom)
    x, w = torch.randn(3, 8), torch.ones(8)
    kernels.rms_norm(x, w, 1e-6)
    kernels.fused_add_rms_norm(x, x, w, 1e-6)
    kernels.silu_and_mul(x)
    cache = kernels.build_cos_sin_cache(16, 8, 10000.0)
    q, k = torch.randn(3, 2, 8), torch.randn(3, 1, 8)
    kernels.rotary_embedding(torch.arange(3), q, k, cache, interleaved=False)
    kc, vc = torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8)
    kernels.write_kv_cache(k, k, kc, vc, torch.tensor([0, 1, 2]))
    bt = torch.tensor([[0, 1]], dtype=torch.int32)
    qsl = torch.tensor([0, 3], dtype=torch.int32)
    kernels.paged_attention(q, kc, vc, bt, qsl, torch.tensor([3], dtype=torch.int32), 0.3)
    kernels.sample(torch.randn(2, 10), torch.ones(2), torch.zeros(2, dtype=torch.long), torch.ones(2))
