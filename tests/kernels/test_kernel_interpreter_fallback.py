"""Rerun this folder in a fresh process when Triton was imported too early to interpret.

In a combined run (``pytest tests``) another conftest may import Triton before
``tests/kernels/conftest.py`` sets ``TRITON_INTERPRET=1``; the in-process Triton tests
then skip, and this test runs them in a subprocess where the variable is set first.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kernel_testutils import STALE_TRITON

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(not STALE_TRITON, reason="the Triton tests already ran in this process")
def test_kernel_suite_in_fresh_interpreter_process():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE)]
    cmd += ["-k", "not fallback and not compile"]
    proc = subprocess.run(cmd, cwd=HERE.parents[1], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1]
