"""The Triton kernels also compile for a real GPU target (sm_90), checked without a GPU.

The interpreter runs kernels as Python and misses compiler-only errors, so this lowers
every kernel to a cubin in a subprocess with the interpreter off (``kernels.compile_check``).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("triton.backends.nvidia") is None,
    reason="needs triton with its NVIDIA backend",
)
def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-m", "kernels.compile_check", "--arch", "90"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
