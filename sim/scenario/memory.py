"""GPU memory: how many KV blocks a replica gets, and a counting block allocator.

The allocator counts blocks instead of naming them: each request's block count lives in the
RequestTable, so the simulator never creates an object per block. The real engine maps the
counts it is given onto physical block ids.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from sim.scenario.specs import GpuSpec, ModelSpec
from sim.scenario.specs.models import DTYPE_BYTES

GiB = 1024**3


@dataclass(frozen=True)
class MemoryBudget:
    gpu_bytes: float
    usable_bytes: float  # gpu memory × utilisation
    weight_bytes: float  # per GPU
    activation_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float  # per GPU
    block_size: int
    fixed_blocks: int | None = None  # set by hand (hardware.kv_blocks), e.g. to match an engine

    @property
    def num_blocks(self) -> int:
        if self.fixed_blocks is not None:
            return self.fixed_blocks
        per_block = self.kv_bytes_per_token * self.block_size
        return max(0, int(self.kv_bytes // per_block))

    @property
    def token_capacity(self) -> int:
        return self.num_blocks * self.block_size


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
                  fixed_blocks: int | None = None) -> MemoryBudget:
    """KV memory per GPU = memory × utilisation − weights − activation reserve.

    Weights and KV are sharded over tensor-parallel ranks (by heads) and pipeline stages
    (by layers), so one GPU holds 1/(tp·pp) of each. KV heads are replicated when TP exceeds
    their number. With expert parallelism the experts, not their columns, are split over TP.
    (Either way an MoE layer's weights divide evenly, so the per-GPU share is the same.)
    """
    usable = gpu.memory_bytes * utilization
    weights = model.weight_bytes(weight_dtype) / (tp * pp)
    act = (activation_reserve_bytes(model, max_batched_tokens, max_num_seqs, tp)
           if activation_bytes is None else activation_bytes)
    kv_shards = min(tp, model.num_kv_heads)  # beyond that, KV heads are replicated
    kv_per_token = model.kv_bytes_per_token(kv_dtype) / (kv_shards * pp)
    return MemoryBudget(
        gpu_bytes=gpu.memory_bytes,
        usable_bytes=usable,
        weight_bytes=weights,
        activation_bytes=act,
        kv_bytes=usable - weights - act,
        kv_bytes_per_token=kv_per_token,
        block_size=block_size,
        fixed_blocks=fixed_blocks,
    )


class BlockAllocator:
    """A pool of equally sized KV blocks, counted.

    With prefix caching, blocks whose content id (a hash of the tokens up to and including
    the block) is known are kept after their requests finish, shared by later requests with
    the same prefix, and evicted least-recently-used when free blocks run out. Such blocks
    stay "used"; ``available`` counts them as reclaimable once nobody references them.
    """

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free = num_blocks
        self.prefix_caching = prefix_caching
        self.refs: dict[int, int] = {}  # content id -> requests using the cached block
        self.lru: OrderedDict[int, None] = OrderedDict()  # unreferenced cached blocks, oldest first

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    @property
    def evictable(self) -> int:
        return len(self.lru)

    @property
    def available(self) -> int:
        return self.free + len(self.lru)

    def blocks_for(self, tokens: np.ndarray | int) -> np.ndarray | int:
        return -(-tokens // self.block_size)

    def allocate(self, n: int) -> None:
        if n > self.free:
            self._evict(n - self.free)
        if n > self.free:
            raise RuntimeError(f"allocating {n} KV blocks with only {self.free} free")
        self.free -= n

    def release(self, n: int) -> None:
        self.free += n
        if self.free > self.num_blocks:
            raise RuntimeError("released more KV blocks than were allocated")

    # -- prefix cache ------------------------------------------------------------------------
    def cached_prefix(self, ids: np.ndarray) -> int:
        """How many leading blocks of ``ids`` are in the cache."""
        refs = self.refs
        for n, h in enumerate(ids.tolist()):
            if h not in refs:
                return n
        return len(ids)

    def pin_cost(self, ids) -> int:
        """Blocks that acquiring ``ids`` would take out of the evictable pool."""
        return sum(1 for h in ids if self.refs[h] == 0)

    def acquire(self, ids) -> None:
        for h in ids:
            if self.refs[h] == 0:
                del self.lru[h]
            self.refs[h] += 1

    def drop(self, ids) -> None:
        for h in ids:
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.lru[h] = None

    def insert(self, ids) -> int:
        """Register blocks a request has just computed (it keeps using them). Stops at the first
        id already cached by someone else: that copy stays private. Returns how many."""
        n = 0
        for h in ids:
            if h in self.refs:
                break
            self.refs[h] = 1
            n += 1
        return n

    def _evict(self, n: int) -> None:
        for _ in range(min(n, len(self.lru))):
            h, _ = self.lru.popitem(last=False)
            del self.refs[h]
            self.free += 1
