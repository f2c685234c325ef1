"""GPU memory: how many KV blocks a replica gets (the scheduling core counts them out)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.scenario.specs import GpuSpec, ModelSpec
from sim.scenario.specs.layers import KV_CACHED, WINDOWED
from sim.scenario.specs.models import DTYPE_BYTES

GiB = 1024**3


@dataclass(frozen=True)
class MemoryBudget:
    gpu_bytes: float
    usable_bytes: float  # what the engine may use: weights, activations and KV
    weight_bytes: float  # per GPU
    activation_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float  # per GPU
    block_size: int
    fixed_blocks: int | None = None  # set by hand (hardware.kv_blocks), e.g. to match an engine
    state_bytes: float = 0.0  # linear-attention / SSM state reserved for max_num_seqs requests, per GPU
    notes: tuple[str, ...] = ()  # where the counting knowingly departs from the engines (sliding windows)
    window_blocks: int = 0  # the most blocks a sliding-window layer keeps per request (0: no cap)
    window_ppm: int = 0  # parts per million of a block's bytes in sliding-window layers
    window: int = 0  # their window, in tokens
    state_ppm: int = 0  # a running request's state taken from the blocks, in millionths of a block (or 0)

    @property
    def num_blocks(self) -> int:
        if self.fixed_blocks is not None:
            return self.fixed_blocks
        per_block = self.kv_bytes_per_token * self.block_size
        return max(0, int(self.kv_bytes // per_block))



def activation_reserve_bytes(model: ModelSpec, max_batched_tokens: int, max_num_seqs: int,
                             tp: int = 1) -> float:
    """Peak activation memory of one step, plus a fixed allowance for the runtime itself.

    The largest live tensors of a forward are the MLP's gate/up output (2·F/tp per token), the
    hidden states and the fp32 logits of the sampled rows.
    """
    dtype = DTYPE_BYTES[model.dtype]
    per_token = (2 * model.intermediate_size / tp + 4 * model.hidden_size) * dtype
    logits = max_num_seqs * model.vocab_size * 4
    return max_batched_tokens * per_token + logits + 0.5 * GiB


def memory_budget(model: ModelSpec, gpu: GpuSpec, *, tp: int = 1, pp: int = 1,
                  utilization: float = 0.9, block_size: int = 16,
                  max_batched_tokens: int = 8192, max_num_seqs: int = 256,
                  activation_bytes: float | None = None, weight_dtype: str | None = None,
                  kv_dtype: str | None = None, expert_parallel: bool = False,
                  fixed_blocks: int | None = None, share_of: str = "total",
                  draft_weight_bytes: float = 0.0, prefix_caching: bool = False,
                  state_memory: str = "pool", dp: int = 1, redundant_experts: int = 0) -> MemoryBudget:
    """KV memory per GPU = memory × utilisation − weights − activation reserve, or, where the
    engine's utilisation is a share of the free memory (``share_of="free"``: TensorRT-LLM's
    kv_cache_free_gpu_mem_fraction, TurboMind's cache_max_entry_count), (memory − weights −
    activation reserve) × utilisation. ``memory`` is what the driver reports (GiB-class).

    Weights and KV are sharded over tensor-parallel ranks (by heads) and pipeline stages
    (by layers), so one GPU holds 1/(tp·pp) of each. KV heads are replicated when TP exceeds
    their number; MLA's latent cache is whole on every rank. Linear-attention / SSM layers hold a
    fixed state per request instead: with ``state_memory="pool"`` (vLLM V1) each running request
    takes it from the KV blocks, padded to the attention layers' page (``state_share``); with
    ``"reserved"`` (SGLang's mamba pool, vLLM V0's mamba cache) it is reserved for ``max_num_seqs``
    requests and taken from the KV memory up front. ``draft_weight_bytes``: an MTP or EAGLE head's
    own weights (it shares the target's embedding and LM head). With expert parallelism the experts, not their
    columns, are split over TP. Sliding-window layers keep at most their window (+ a block) of a
    request's tokens (``window_blocks``, ``window_ppm``; see sim/core/kvblocks.py), with prefix
    caching too: a cached block's windowed share is freed once every request using it has left
    it behind (what remains approximate is said in ``notes``).
    (Either way an MoE layer's weights divide evenly, so the per-GPU share is the same.)
    With ``dp`` data-parallel attention ranks (wide EP) every rank of ``tp / dp`` GPUs holds the
    weights but the experts, and the KV cache of its own requests only: a token's KV lives on one
    rank; EPLB's ``redundant_experts`` add their copies' weights, spread over the ``tp`` GPUs; the
    activation reserve is one rank's step (``max_batched_tokens`` and ``max_num_seqs`` are a rank's).
    """
    weights = (model.weight_bytes(weight_dtype) + draft_weight_bytes) / (tp * pp)
    if dp > 1 or redundant_experts:
        experts = model.group_params()["experts"] * DTYPE_BYTES[model.dtype_of("experts", weight_dtype)]
        rest = model.weight_bytes(weight_dtype) - experts + draft_weight_bytes
        copies = experts / max(model.num_experts, 1) * redundant_experts
        weights = (rest / (tp // dp) + (experts + copies) / tp) / pp
    per_token = (model.kv_bytes_per_token_gpu(kv_dtype, tp // dp, pp) / dp if dp > 1
                 else model.kv_bytes_per_token_gpu(kv_dtype, tp, pp))
    act = (activation_reserve_bytes(model, max_batched_tokens, max_num_seqs, tp // dp)
           if activation_bytes is None else activation_bytes)
    pooled = state_share(model, block_size, kv_dtype, tp, pp) if state_memory == "pool" else {}
    state = 0.0 if pooled else model.state_bytes_per_request() * max_num_seqs / (tp * pp)
    if share_of == "free":
        usable = weights + act + max(gpu.memory_bytes - weights - act - state, 0.0) * utilization + state
    else:
        usable = gpu.memory_bytes * utilization
    return MemoryBudget(
        gpu_bytes=gpu.memory_bytes,
        usable_bytes=usable,
        weight_bytes=weights,
        activation_bytes=act,
        kv_bytes=usable - weights - act - state,
        kv_bytes_per_token=per_token,
        block_size=block_size,
        fixed_blocks=fixed_blocks,
        state_bytes=state,
        notes=window_notes(model) if prefix_caching else (),
        **window_cap(model, block_size, kv_dtype, tp, pp),
        **pooled,
    )


def state_share(model: ModelSpec, block_size: int, kv_dtype: str | None, tp: int, pp: int) -> dict[str, int]:
    """A running request's linear-attention / SSM state as the engine takes it from the KV
    blocks, in millionths of one of servesim's blocks (``block_size`` tokens of every KV-cached
    layer): vLLM V1's hybrid KV cache manager gives each state layer of a request whole pages of
    the attention layers' page size (block_size tokens of one attention layer; MambaSpec's page
    padded to it: vllm/v1/kv_cache_interface.py, vllm/model_executor/models/config.py
    HybridAttentionMambaModelConfig). Empty for a model without state layers, or without
    attention layers to share pages with (the state is then reserved)."""
    if not model.state_bytes_per_request():
        return {}
    b = DTYPE_BYTES[kv_dtype or model.dtype]
    pages = [model.kv_elements_per_layer(g.attention) * b / model.kv_shards(g.attention, tp) * block_size
             for g in model.groups if g.attention in KV_CACHED]
    block = model.kv_bytes_per_token_gpu(kv_dtype, tp, pp) * block_size
    if not pages or not block:
        return {}
    page = max(pages)
    s = DTYPE_BYTES[model.dtype]
    per_layer = {"linear": model.linear_attention, "mamba": model.mamba}
    n = sum(g.count * -(-(per_layer[g.attention].state_elements * s / tp) // page)
            for g in model.groups if g.attention in per_layer)
    return {"state_ppm": round(n * page / pp / block * 1_000_000)}


def window_cap(model: ModelSpec, block_size: int, kv_dtype: str | None, tp: int, pp: int) -> dict[str, int]:
    """How the core caps a request's blocks in sliding-window (and chunked) layers: their share
    of a block's bytes, in parts per million, the most blocks of tokens they keep at rest
    (``ceil(W / block) + 1``) and W itself (a step's tokens in flight add to the cap:
    sim/core/kvblocks.py, ``window_cap``)."""
    if not model.windowed_layers or model.sliding_window >= model.max_model_len:
        return {}
    b = DTYPE_BYTES[kv_dtype or model.dtype]
    windowed = sum(g.count * model.kv_elements_per_layer(g.attention) * b / model.kv_shards(g.attention, tp)
                   for g in model.groups if g.attention in WINDOWED) / pp
    share = windowed / model.kv_bytes_per_token_gpu(kv_dtype, tp, pp)
    return {"window_blocks": -(-model.sliding_window // block_size) + 1, "window": model.sliding_window,
            "window_ppm": min(1_000_000, round(share * 1_000_000))}


def window_notes(model: ModelSpec) -> tuple[str, ...]:
    """What remains approximate of windowed layers with prefix caching, said out loud: a cached
    block every request using it has left behind has its windowed share counted free at once
    (the engines free that layer group's block), yet later prompts still find that share until
    the block itself is evicted, while the engines may hand it out sooner (which ends such a hit
    at the freed block)."""
    if not model.windowed_layers or model.sliding_window >= model.max_model_len:
        return ()
    kind = "chunked" if model.chunked else "sliding-window"
    return (f"{model.name}: with prefix caching, a cached block that every request using it has left behind "
            f"has its {model.windowed_layers} {kind} layers' share counted free at once, as the engines free it, "
            "but later prompts still find that share until the block itself is evicted; the engines may reuse it "
            "sooner, so under memory pressure a prefix hit can be longer here than in the engine",)
