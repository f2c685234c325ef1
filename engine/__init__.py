"""servesim's real engine: a Llama-style decoder over a paged KV cache that executes the
scheduler's BatchPlans (the ``Executor`` protocol) and measures how long each step takes.

Names load lazily, so that ``servesim`` can register the engine's commands on an install
without PyTorch (the simulator alone); using them needs ``pip install -e '.[engine]'``.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "EngineExecutor": "executor", "SamplingParams": "executor",
    "Generation": "generate", "generate": "generate",
    "BlockManager": "kv_cache", "KVCache": "kv_cache", "num_blocks_for_budget": "kv_cache",
    "Bucket": "buckets", "GraphLadder": "buckets", "GraphRunner": "cuda_graphs",
    "HostStep": "padding", "pad_step": "padding", "WarmupReport": "warmup",
    "OPS": "model", "LlamaModel": "model", "StepInputs": "model",
    "CudaEventTimer": "timing", "SyncTimer": "timing",
    "Tokenizer": "tokenizer",
    "init_random": "weights", "load_gguf": "weights", "load_model": "weights",
    "load_safetensors": "weights", "random_model": "weights", "save_safetensors": "weights",
    "smollm2_gguf_path": "weights",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"engine.{_WHERE[name]}"), name)
