"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Triton kernels run on the CPU through the interpreter; it must be chosen before triton loads.
os.environ.setdefault("TRITON_INTERPRET", "1")
# The compiled core checks every array index in tests (an IndexError, not memory corruption);
# its builds are kept apart from unchecked ones (sim/core/buildcache.py stamps them with the setting).
os.environ.setdefault("NUMBA_BOUNDSCHECK", "1")
# A first small `servesim run` would otherwise run the core as Python while a background process
# builds it (sim/cli/prebuild.py); the suite compiles in the foreground (tests/sim/core/test_build.py
# covers the background path).
os.environ.setdefault("SERVESIM_BACKGROUND_BUILD", "0")

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
AZURE_TRACE = SHARED / "traces" / "AzureLLMInferenceTrace_conv.csv"


@pytest.fixture
def azure_trace() -> Path:
    if not AZURE_TRACE.is_file():
        pytest.skip(f"the shared Azure trace is not present at {AZURE_TRACE}")
    return AZURE_TRACE


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium)")
    return path
