"""Variant keys: what Triton would compile for a launch, computed without compiling."""

import pytest
import torch
from kernel_testutils import INTERPRETER, TRITON_DEVICE, requires_triton
from test_kernel_attention import make_batch

import kernels
from kernels import compiled, variants

pytestmark = requires_triton


def _attention_keys(specs, dtype=torch.float32, **kw):
    args, _, _ = make_batch(specs, 4, 2, 16, 4, dtype, seed=0)
    with variants.recording() as rec:
        kernels.paged_attention(*args, 0.25, impl="triton", **kw)
    return rec


def test_step_sizes_do_not_make_new_variants():
    """Batch size, token count and block-table width are not specialised on, so decode steps
    of 1, 16 and 17 rows (1 is special to Triton, 16 divides) need one variant; a split, a
    prefill-sized query tile or another dtype need their own. Splits are fixed at one: on a GPU
    the automatic split count follows the batch (``choose_num_splits``), each its own variant."""
    decode = [_attention_keys([(c, 1) for c in range(3, 3 + n)], num_splits=1) for n in (1, 16, 17)]
    wide = _attention_keys([(90, 1)], num_splits=1)  # a wider block table
    assert decode[0] == decode[1] == decode[2] == wide and len(decode[0]) == 1
    split = _attention_keys([(30, 1)], num_splits=4)
    assert len(split) == 2 and not split & decode[0]  # split kernel + merge
    assert _attention_keys([(30, 1)], num_splits=3) == split  # splits round up to a power of two
    prefill = _attention_keys([(0, 40)], num_splits=1)
    assert prefill != decode[0]
    assert _attention_keys([(30, 1)], dtype=torch.float16, num_splits=1) != decode[0]


def test_key_follows_tritons_rule_for_specialised_ints():
    """An int argument Triton specialises (here the SwiGLU width) changes the key between
    1, a multiple of 16 and anything else, as Triton's own binder does."""
    keys = []
    for f in (1, 16, 17, 33):
        with variants.recording() as rec:
            kernels.silu_and_mul(torch.randn(2, 2 * f, device=TRITON_DEVICE), impl="triton")
        keys.append(next(iter(rec)))
    assert len({keys[0], keys[1], keys[2]}) == 3 and keys[2] == keys[3]


@pytest.mark.skipif(not INTERPRETER, reason="interpreter only")
def test_nothing_is_compiled_under_the_interpreter():
    assert compiled.compiled_variants() is None


def test_python_rule_matches_tritons_native_one():
    """The fallback for a Triton without ``native_specialize_impl`` gives the same keys."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    values = [1, 2, 16, 17, 48, -16, 2**31, 2**40, 0.5, True, None, torch.zeros(4),
              torch.zeros(8, dtype=torch.bfloat16)[1:], torch.zeros(3, dtype=torch.int32),
              torch.zeros(2, dtype=torch.int64), torch.zeros(5, dtype=torch.float16)]
    for v in values:
        for specialise in (True, False):
            want = tuple(native_specialize_impl(BaseBackend, v, False, specialise, True))
            assert variants.specialize_in_python(v, specialise) == want, (v, specialise)
