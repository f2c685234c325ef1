"""Kernel tests run Triton kernels on the CPU through the Triton interpreter.

``TRITON_INTERPRET=1`` must be in the environment before any ``@triton.jit`` function is
defined, so it is set here, first thing. If ``kernels`` was already imported by an earlier
conftest/test module in compiled mode, its modules are reloaded in interpreter mode.
Set ``TRITON_INTERPRET=0`` explicitly to run the same tests on a CUDA GPU instead.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

_KERNEL_MODULES = (
    "kernels.dispatch",
    "kernels.norm",
    "kernels.activation",
    "kernels.rotary",
    "kernels.kv_cache",
    "kernels.attention",
    "kernels.sampling",
    "kernels",
)


def _ensure_interpreted_kernels() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1" or "kernels.norm" not in sys.modules:
        return
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return
    if isinstance(sys.modules["kernels.norm"]._rms_norm_kernel, InterpretedFunction):
        return
    for name in _KERNEL_MODULES:
        if name in sys.modules:
            importlib.reload(sys.modules[name])


_ensure_interpreted_kernels()
