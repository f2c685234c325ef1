"""The BatchPlan: the contract between scheduler, cost model and engine.

A plan says which requests run in one step of one replica, how many new tokens each
processes (a prefill chunk, or 1 for a decode), how much context each already has in the KV
cache, whether it samples a token at the end of the step, and the memory actions taken
before the step (blocks held, requests freed or preempted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class BatchPlan:
    req_ids: np.ndarray  # int64 [n]
    num_new_tokens: np.ndarray  # int64 [n] query length of each row
    num_computed: np.ndarray  # int64 [n] tokens already in the KV cache before this step
    samples: np.ndarray  # bool [n] the row's last new token produces an output token
    num_blocks: np.ndarray  # int64 [n] KV blocks the row holds during this step
    freed: np.ndarray = field(default_factory=lambda: _EMPTY)  # ids whose blocks were released
    preempted: np.ndarray = field(default_factory=lambda: _EMPTY)  # ids sent back to waiting
    spec_tokens: int = 0  # speculative decoding: draft tokens each decode row verifies
    swap_in_blocks: int = 0  # KV blocks copied back from host memory before this step
    swap_out_blocks: int = 0  # KV blocks copied out to host memory before this step
    block_size: int = 16

    @property
    def num_seqs(self) -> int:
        return len(self.req_ids)

    @cached_property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens.tolist())  # (faster than a numpy reduction on a batch)

    @cached_property
    def is_decode(self) -> np.ndarray:
        """Rows that are plain decodes: one new token on top of a cached context."""
        return (self.num_new_tokens == 1) & (self.num_computed > 0)

    @cached_property
    def context_lens(self) -> np.ndarray:
        """Total tokens in the cache for each row once this step has written its new ones."""
        return self.num_computed + self.num_new_tokens

    @cached_property
    def num_decodes(self) -> int:
        return int(np.count_nonzero(self.is_decode))

    @cached_property
    def is_pure_decode(self) -> bool:
        """Every row decodes one token on a cached context and samples."""
        n = self.num_seqs
        return n > 0 and self.num_decodes == n and int(np.count_nonzero(self.samples)) == n

    def shape(self) -> StepShape:
        shape = self.__dict__.get("_shape")
        if shape is None:
            shape = self.__dict__["_shape"] = StepShape.of(self)
        return shape


@dataclass(frozen=True)
class StepShape:
    """What a cost model needs to know of a step. Fields may be arrays (many steps at once)."""

    num_tokens: np.ndarray | float  # all new tokens
    num_seqs: np.ndarray | float
    prefill_tokens: np.ndarray | float  # new tokens of prefill rows
    prefill_attn: np.ndarray | float  # Σ over prefill rows of q_len · context_len (attention work)
    decode_seqs: np.ndarray | float
    decode_context: np.ndarray | float  # Σ context of decode rows (KV bytes read)
    num_sampled: np.ndarray | float
    verify_tokens: np.ndarray | float = 0.0  # speculative decoding: draft tokens verified
    swap_tokens: np.ndarray | float = 0.0  # KV (in tokens) moved to or from host memory

    @classmethod
    def of(cls, plan: BatchPlan) -> StepShape:
        # Integer sums (exact), with decode rows' single token taken out of the totals.
        q = plan.num_new_tokens
        ctx = plan.context_lens
        dec = plan.is_decode
        tokens = plan.num_tokens
        decodes = plan.num_decodes
        decode_context = sum(ctx[dec].tolist())
        verify = float(plan.spec_tokens * decodes)
        return cls(
            num_tokens=float(tokens) + verify,
            num_seqs=float(len(q)),
            prefill_tokens=float(tokens - decodes),
            prefill_attn=float(int(q @ ctx) - decode_context) if decodes < len(q) else 0.0,
            decode_seqs=float(decodes),
            decode_context=float(decode_context),
            num_sampled=float(np.count_nonzero(plan.samples)),
            verify_tokens=verify,
            swap_tokens=float((plan.swap_in_blocks + plan.swap_out_blocks) * plan.block_size),
        )
