"""The paged KV cache and the physical block manager behind the scheduler's block counts.

The scheduler (shared with the simulator) only counts blocks: ``plan.num_blocks[i]`` is how
many blocks request ``plan.req_ids[i]`` holds during the step. The :class:`BlockManager` keeps
each request's list of physical block ids, grows it to the planned count from a free list,
and returns all of a request's blocks when the plan lists it as freed or preempted.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from sim.core.plan import BatchPlan
from sim.scenario.specs import ModelSpec


def kv_bytes_per_block(spec: ModelSpec, block_size: int, dtype: torch.dtype) -> int:
    elem = torch.empty(0, dtype=dtype).element_size()
    return 2 * spec.num_layers * spec.kv_size * block_size * elem


def num_blocks_for_budget(spec: ModelSpec, budget_bytes: float, block_size: int,
                          dtype: torch.dtype) -> int:
    """How many blocks fit in ``budget_bytes`` of KV memory."""
    return int(budget_bytes // kv_bytes_per_block(spec, block_size, dtype))


class KVCache:
    """Per-layer ``(k, v)`` tensors, each ``[num_blocks, block_size, Hk, D]``, in one allocation."""

    def __init__(self, spec: ModelSpec, num_blocks: int, block_size: int,
                 dtype: torch.dtype, device: str | torch.device):
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (2, spec.num_layers, num_blocks, block_size, spec.num_kv_heads, spec.head_dim)
        self.data = torch.zeros(shape, dtype=dtype, device=device)
        self.layers = [(self.data[0, i], self.data[1, i]) for i in range(spec.num_layers)]

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()


class BlockManager:
    """Maps requests to physical block ids; hands out no id twice."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_ids: deque[int] = deque(range(num_blocks))
        self.tables: dict[int, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def blocks_of(self, rid: int) -> list[int]:
        return self.tables.get(rid, [])

    def free(self, rid: int) -> None:
        """Return all of ``rid``'s blocks to the free list (no-op if it holds none)."""
        ids = self.tables.pop(rid, None)
        if ids:
            self.free_ids.extend(ids)

    def resize(self, rid: int, count: int) -> list[int]:
        """Make ``rid`` hold exactly ``count`` blocks, keeping its first ones."""
        ids = self.tables.setdefault(rid, [])
        if count > len(ids):
            need = count - len(ids)
            if need > len(self.free_ids):
                raise RuntimeError(
                    f"request {rid} needs {need} more KV blocks but only {len(self.free_ids)} "
                    f"of {self.num_blocks} are free: the scheduler's block count must not "
                    "exceed the engine's"
                )
            ids.extend(self.free_ids.popleft() for _ in range(need))
        elif count < len(ids):
            self.free_ids.extend(ids[count:])
            del ids[count:]
        return ids

    def apply(self, plan: BatchPlan) -> None:
        """Free the plan's freed and preempted requests, then size every row's block list."""
        for rid in plan.freed.tolist():
            self.free(rid)
        for rid in plan.preempted.tolist():
            self.free(rid)
        for rid, count in zip(plan.req_ids.tolist(), plan.num_blocks.tolist(), strict=True):
            self.resize(rid, count)

    def block_table(self, req_ids: np.ndarray, seq_lens: np.ndarray) -> np.ndarray:
        """int32 ``[B, max_blocks]``: the blocks covering each row's ``seq_lens`` tokens.

        Padding is 0 (a valid id, never read past ``seq_lens``).
        """
        needed = -(-seq_lens // self.block_size)
        width = max(int(needed.max(initial=0)), 1)
        table = np.zeros((len(req_ids), width), dtype=np.int32)
        for row, (rid, n) in enumerate(zip(req_ids.tolist(), needed.tolist(), strict=True)):
            ids = self.tables.get(rid, [])
            if n > len(ids):
                raise RuntimeError(f"request {rid} holds {len(ids)} KV blocks, needs {n}")
            table[row, :n] = ids[:n]
        return table

    def slot_mapping(self, block_table: np.ndarray, num_computed: np.ndarray,
                     num_new: np.ndarray) -> np.ndarray:
        """int64 ``[T]``: cache slot of every new token, rows in order."""
        rows = np.repeat(np.arange(len(num_new)), num_new)
        starts = np.cumsum(num_new) - num_new
        pos = np.arange(int(num_new.sum())) - np.repeat(starts, num_new) + num_computed[rows]
        block = block_table[rows, pos // self.block_size].astype(np.int64)
        return block * self.block_size + pos % self.block_size
