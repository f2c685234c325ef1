"""Minimal stand-in for ``triton`` when it is not installed.

It only lets the kernel modules *define* their ``@triton.jit`` functions (with
``tl.constexpr`` annotations); the dispatcher never calls them without real Triton.
"""

from types import SimpleNamespace
from typing import Any


def jit(fn: Any = None, **_: Any) -> Any:
    """Identity decorator (supports both ``@jit`` and ``@jit(...)``)."""
    if fn is None:
        return lambda f: f
    return fn


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as ``triton.cdiv``."""
    return -(-a // b)


language = SimpleNamespace(constexpr=Any)
