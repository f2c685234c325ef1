"""Kernel tests run Triton kernels on the CPU through the Triton interpreter.

``TRITON_INTERPRET=1`` must be in the environment before Triton itself is imported (its
own ``@triton.jit`` library functions, ``tl.sum`` etc., are frozen in the mode in force
then), so it is set here, first thing. When another conftest imported Triton earlier in
compiled mode, the in-process Triton tests skip and
``test_kernel_interpreter_fallback.py`` reruns this folder in a fresh interpreter process.
Set ``TRITON_INTERPRET=0`` explicitly to run the same tests on a CUDA GPU instead.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # import the repo's ``kernels`` even without an install
    sys.path.insert(0, str(_ROOT))
