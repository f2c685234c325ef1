"""Shared test helpers."""

from __future__ import annotations

import os
from pathlib import Path

# Triton kernels run on the CPU through the interpreter; it must be chosen before triton loads.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
AZURE_TRACE = SHARED / "traces" / "AzureLLMInferenceTrace_conv.csv"


@pytest.fixture
def azure_trace() -> Path:
    if not AZURE_TRACE.is_file():
        pytest.skip(f"the shared Azure trace is not present at {AZURE_TRACE}")
    return AZURE_TRACE
