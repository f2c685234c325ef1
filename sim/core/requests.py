"""Request state as a table of numpy arrays: one row per request, no object per request.

The scheduler, the simulator's replica loop and the real engine all read and write the same
table, so a policy behaves identically whether the clock is simulated or real.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Status(IntEnum):
    PENDING = 0  # not arrived yet
    WAITING = 1  # queued at a replica
    RUNNING = 2  # holds KV blocks, being prefilled or decoded
    FINISHED = 3
    REJECTED = 4
    TRANSFER = 5  # prefilled on a prefill replica, its KV cache on its way to a decode replica


class RejectReason(IntEnum):
    NONE = 0
    EXCEEDS_KV_CAPACITY = 1  # prompt + output can never fit in the replica's KV blocks
    EXCEEDS_MAX_MODEL_LEN = 2
    EXCEEDS_BATCH_TOKENS = 3  # prompt longer than one step may carry (no chunking)

    @property
    def text(self) -> str:
        return _REASON_TEXT[self]


_REASON_TEXT = {
    RejectReason.NONE: "",
    RejectReason.EXCEEDS_KV_CAPACITY: "prompt + output exceed the replica's KV cache capacity",
    RejectReason.EXCEEDS_MAX_MODEL_LEN: "prompt + output exceed the model's max length",
    RejectReason.EXCEEDS_BATCH_TOKENS: "prompt exceeds max_batched_tokens and chunking is off",
}


class RequestTable:
    """Columns of per-request state.

    Token accounting follows vLLM: ``num_tokens`` is prompt plus tokens generated so far;
    ``num_computed`` is how many of them are in the KV cache. A step processes
    ``num_tokens - num_computed`` tokens (the whole or a chunk of a prefill, or 1 for a decode)
    and, when it catches up, samples one new token. Preemption by recompute resets
    ``num_computed`` to 0, so the request later prefills its prompt and output so far.
    """

    def __init__(self, arrival: np.ndarray, prompt_len: np.ndarray, output_len: np.ndarray):
        n = len(arrival)
        if not (len(prompt_len) == len(output_len) == n):
            raise ValueError("arrival, prompt_len and output_len must have the same length")
        self.n = n
        self.arrival = np.asarray(arrival, dtype=np.float64)
        self.prompt_len = np.asarray(prompt_len, dtype=np.int64)
        self.output_len = np.asarray(output_len, dtype=np.int64)  # max new tokens
        self.num_tokens = self.prompt_len.copy()
        self.num_computed = np.zeros(n, dtype=np.int64)
        self.num_generated = np.zeros(n, dtype=np.int64)
        self.num_blocks = np.zeros(n, dtype=np.int64)
        self.status = np.zeros(n, dtype=np.int8)
        self.reject_reason = np.zeros(n, dtype=np.int8)
        self.replica = np.full(n, -1, dtype=np.int32)
        self.preemptions = np.zeros(n, dtype=np.int32)
        self.first_scheduled = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.completion = np.full(n, np.nan)
        self.cached_tokens = np.zeros(n, dtype=np.int64)  # prompt tokens served by prefix cache
        self.cache_blocks = np.zeros(n, dtype=np.int64)  # leading blocks held via the prefix cache
        self.swapped_blocks = np.zeros(n, dtype=np.int64)  # KV blocks parked in host memory
        self.class_id = np.zeros(n, dtype=np.int16)
        self.class_names: tuple[str, ...] = ("default",)
        self.priority = np.zeros(n, dtype=np.int16)
        # Ids of each request's leading full KV blocks that other requests may share (ragged).
        self.prefix_offsets = np.zeros(n + 1, dtype=np.int64)
        self.prefix_hashes = np.zeros(0, dtype=np.int64)

    @classmethod
    def from_workload(cls, w) -> RequestTable:
        t = cls(w.arrival, w.prompt_len, w.output_len)
        if getattr(w, "class_id", None) is not None:
            t.class_id = np.asarray(w.class_id, dtype=np.int16)
            t.class_names = tuple(w.class_names)
        if getattr(w, "priority", None) is not None:
            t.priority = np.asarray(w.priority, dtype=np.int16)
        if getattr(w, "prefix_offsets", None) is not None:
            t.prefix_offsets = np.asarray(w.prefix_offsets, dtype=np.int64)
            t.prefix_hashes = np.asarray(w.prefix_hashes, dtype=np.int64)
        return t

    def prefix_blocks(self, rid: int) -> np.ndarray:
        return self.prefix_hashes[self.prefix_offsets[rid]:self.prefix_offsets[rid + 1]]

    def first_prefix_block(self, rid: int) -> int | None:
        lo, hi = self.prefix_offsets[rid], self.prefix_offsets[rid + 1]
        return int(self.prefix_hashes[lo]) if hi > lo else None

    def __len__(self) -> int:
        return self.n

    def remaining_prefill(self, ids: np.ndarray) -> np.ndarray:
        return self.num_tokens[ids] - self.num_computed[ids]
