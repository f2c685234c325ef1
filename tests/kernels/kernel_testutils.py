"""Shared helpers for the kernel tests: device choice and the per-dtype tolerances."""

import os

import pytest
import torch

from kernels.dispatch import HAS_TRITON

# Tolerances, in one place: (atol, rtol) per dtype of the tensors being compared.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}

INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"


def _triton_loaded_in_interpreter_mode() -> bool:
    """Triton's own jit library (``tl.sum``...) must also be interpreted, i.e. Triton was
    first imported with ``TRITON_INTERPRET=1`` in force."""
    import triton.language.standard as std
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(std.sum, InterpretedFunction)


# True when the interpreter is requested but Triton was imported earlier in compiled mode
# (e.g. by another folder's conftest): in-process Triton tests cannot run then.
STALE_TRITON = HAS_TRITON and INTERPRETER and not _triton_loaded_in_interpreter_mode()

# Triton kernels run under the CPU interpreter, or on a GPU when the interpreter is off.
_GPU = "cuda" if torch.cuda.is_available() else None
TRITON_DEVICE = (None if STALE_TRITON else "cpu") if INTERPRETER else _GPU

requires_triton = pytest.mark.skipif(
    not HAS_TRITON or TRITON_DEVICE is None,
    reason="needs triton plus TRITON_INTERPRET=1 set before triton was first imported "
    "(see test_kernel_interpreter_fallback.py), or a CUDA device",
)

# The interpreter's tl.dot on bf16 is wrong (numpy has no bf16), so kernels using tl.dot
# are tested in fp32/fp16 there; elementwise kernels also get bf16.
DOT_DTYPES = [torch.float32, torch.float16]
ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None):
    """``torch.testing.assert_close`` with the tolerance of ``dtype`` (default: ``expected``'s)."""
    atol, rtol = TOLERANCES[dtype or expected.dtype]
    torch.testing.assert_close(actual.cpu(), expected.cpu(), atol=atol, rtol=rtol)
