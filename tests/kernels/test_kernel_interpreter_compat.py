"""The interpreter shim: kernels with runtime loop bounds run even where Triton's interpreter
converts its one-element scalar arrays with ``int(array)``, which NumPy >= 2.5 refuses (the
H100 run: Triton 3.6, NumPy 2.5). NumPy 2.4 only warns, so warnings are errors here."""

import math
import warnings

import pytest
import torch
from kernel_testutils import INTERPRETER, requires_triton

import kernels

pytestmark = [requires_triton, pytest.mark.skipif(not INTERPRETER, reason="interpreter only")]


def _legacy_interpreter(monkeypatch):
    """Make the interpreter convert scalars as Triton 3.6 does."""
    from triton.runtime import interpreter

    current = interpreter._patch_lang_tensor

    def legacy(tensor, scope):
        current(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", legacy)


def _attention():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 16, generator=g)
    k_cache, v_cache = torch.randn(2, 2, 4, 1, 16, generator=g).unbind(0)
    bt = torch.tensor([[0, 1], [1, 0]], dtype=torch.int32)
    qsl = torch.tensor([0, 1, 2], dtype=torch.int32)
    lens = torch.tensor([5, 8], dtype=torch.int32)
    args = (q, k_cache, v_cache, bt, qsl, lens, 1 / math.sqrt(16))
    return kernels.paged_attention(*args, impl="triton"), kernels.paged_attention(*args, impl="torch")


def test_runtime_loop_bounds_under_a_strict_numpy(monkeypatch):
    from kernels.interpreter_compat import patch_scalar_index

    _legacy_interpreter(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(Exception, match=r"0-dimensional|ndim > 0"):
            _attention()  # what the H100 run saw
        assert patch_scalar_index()
        out, ref = _attention()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert patch_scalar_index()  # idempotent
