"""servesim's real engine: a Llama-style decoder over a paged KV cache that executes the
scheduler's BatchPlans (the ``Executor`` protocol) and measures how long each step takes."""

from engine.executor import EngineExecutor, SamplingParams
from engine.generate import Generation, generate
from engine.kv_cache import BlockManager, KVCache, num_blocks_for_budget
from engine.model import OPS, LlamaModel, StepInputs
from engine.timing import CudaEventTimer, SyncTimer
from engine.tokenizer import Tokenizer
from engine.weights import (
    init_random,
    load_gguf,
    load_model,
    load_safetensors,
    random_model,
    save_safetensors,
    smollm2_gguf_path,
)

__all__ = [
    "OPS",
    "BlockManager",
    "CudaEventTimer",
    "EngineExecutor",
    "Generation",
    "KVCache",
    "LlamaModel",
    "SamplingParams",
    "StepInputs",
    "SyncTimer",
    "Tokenizer",
    "generate",
    "init_random",
    "load_gguf",
    "load_model",
    "load_safetensors",
    "num_blocks_for_budget",
    "random_model",
    "save_safetensors",
    "smollm2_gguf_path",
]
