"""Choose between the Triton kernel and the PyTorch reference for one call.

Rules (``impl`` argument of every public kernel function):

* ``"torch"``  -> always the PyTorch reference.
* ``"auto"``   -> Triton when Triton is importable and every tensor is on CUDA,
  the reference otherwise (CPU tensors always get the reference).
* ``"triton"`` -> Triton; allowed on CUDA tensors, and on CPU tensors only when the
  Triton interpreter is on (``TRITON_INTERPRET=1`` set before Triton was imported).
  Anything else raises ``RuntimeError`` rather than silently falling back.
"""

from __future__ import annotations

import os
from typing import Literal

import torch

try:  # Triton is optional: the reference path must work without it (e.g. macOS).
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - depends on the environment
    from kernels import _triton_stub as triton

    tl = triton.language
    HAS_TRITON = False

__all__ = [
    "HAS_TRITON",
    "IMPLS",
    "Impl",
    "interpreter_enabled",
    "next_pow2",
    "select_impl",
    "tl",
    "triton",
    "use_triton",
]

Impl = Literal["auto", "triton", "torch"]
IMPLS: tuple[str, ...] = ("auto", "triton", "torch")


def interpreter_enabled() -> bool:
    """True when the Triton CPU interpreter is requested via ``TRITON_INTERPRET=1``."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# ``@triton.jit`` picks interpreter or compiler when the kernel modules are imported (they
# all import this module first), so remember what was in force then.
_INTERPRETED_AT_IMPORT = interpreter_enabled()

if HAS_TRITON and _INTERPRETED_AT_IMPORT:
    from kernels.interpreter_compat import patch_scalar_index

    patch_scalar_index()


def select_impl(impl: str, *tensors: torch.Tensor) -> Literal["triton", "torch"]:
    """Resolve ``impl`` to ``"triton"`` or ``"torch"`` for a call on ``tensors``."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "torch":
        return "torch"
    on_cuda = len(tensors) > 0 and all(t.is_cuda for t in tensors)
    if impl == "auto":
        return "triton" if (HAS_TRITON and on_cuda) else "torch"
    # impl == "triton"
    if not HAS_TRITON:
        raise RuntimeError("impl='triton' requested but triton is not importable")
    if on_cuda:
        return "triton"
    if any(t.is_cuda for t in tensors):
        raise RuntimeError("impl='triton': tensors are spread over CUDA and CPU")
    if interpreter_enabled() and _INTERPRETED_AT_IMPORT:
        return "triton"
    why = ("Triton was imported in compiled mode, " if interpreter_enabled() else "")
    raise RuntimeError(
        f"impl='triton' on CPU tensors needs the Triton interpreter: {why}set TRITON_INTERPRET=1 "
        "before importing triton/kernels"
    )


def use_triton(impl: str, *tensors: torch.Tensor) -> bool:
    """Shorthand: ``select_impl(...) == "triton"``."""
    return select_impl(impl, *tensors) == "triton"


def next_pow2(n: int) -> int:
    """Smallest power of two >= ``n`` (and >= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
