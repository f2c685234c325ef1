"""write_kv_cache: Triton vs reference, -1 slots, block-crossing slots, strided inputs."""

import pytest
import torch
from kernel_testutils import ALL_DTYPES, TRITON_DEVICE, requires_triton

import kernels

DEV = TRITON_DEVICE or "cpu"
NUM_BLOCKS, BLOCK_SIZE, HK, D = 5, 4, 2, 16
SLOTS = [3, -1, 4, 19, -1, 0, 8]  # 3|4 straddle a block edge, 19 is the very last slot


def _inputs(dtype, cache_dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = len(SLOTS)
    kv = torch.randn(t, 2, HK, D, generator=g).to(DEV, dtype)
    k, v = kv[:, 0], kv[:, 1]  # strided views
    k_cache = torch.randn(NUM_BLOCKS, BLOCK_SIZE, HK, D, generator=g).to(DEV, cache_dtype)
    v_cache = torch.randn(NUM_BLOCKS, BLOCK_SIZE, HK, D, generator=g).to(DEV, cache_dtype)
    return k, v, k_cache, v_cache, torch.tensor(SLOTS, dtype=torch.int64, device=DEV)


def test_reference_semantics():
    k, v, kc, vc, slots = _inputs(torch.float32, torch.float32)
    kc0, vc0 = kc.clone(), vc.clone()
    kernels.write_kv_cache(k, v, kc, vc, slots, impl="torch")
    flat_k, flat_v = kc.view(-1, HK, D), vc.view(-1, HK, D)
    written = set()
    for t, s in enumerate(SLOTS):
        if s >= 0:
            assert torch.equal(flat_k[s], k[t]) and torch.equal(flat_v[s], v[t])
            written.add(s)
    untouched = [s for s in range(NUM_BLOCKS * BLOCK_SIZE) if s not in written]
    assert torch.equal(flat_k[untouched], kc0.view(-1, HK, D)[untouched])
    assert torch.equal(flat_v[untouched], vc0.view(-1, HK, D)[untouched])


@requires_triton
@pytest.mark.parametrize("dtype,cache_dtype", [(d, d) for d in ALL_DTYPES] + [(torch.float32, torch.float16)])
def test_triton_matches_reference(dtype, cache_dtype):
    k, v, kc_ref, vc_ref, slots = _inputs(dtype, cache_dtype)
    kc, vc = kc_ref.clone(), vc_ref.clone()
    kernels.write_kv_cache(k, v, kc_ref, vc_ref, slots, impl="torch")
    kernels.write_kv_cache(k, v, kc, vc, slots, impl="triton")
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)


@requires_triton
def test_all_skipped_is_noop():
    k, v, kc, vc, _ = _inputs(torch.float32, torch.float32)
    kc0, vc0 = kc.clone(), vc.clone()
    slots = torch.full((k.shape[0],), -1, dtype=torch.int64, device=DEV)
    kernels.write_kv_cache(k, v, kc, vc, slots, impl="triton")
    assert torch.equal(kc, kc0) and torch.equal(vc, vc0)
