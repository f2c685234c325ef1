"""The BatchPlan: the contract between the scheduler, the cost model and the engine.

A plan says which requests run in one step of one engine, how many new tokens each processes
(a prefill chunk, or 1 for a decode), how much context each already has in the KV cache,
whether it samples a token at the end of the step, and the memory actions taken before the
step (blocks held, requests freed or preempted, blocks swapped). Its *shape* — a few sums over
the rows — is all a cost model needs; ``shape_into`` computes it, for every loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum
from functools import cached_property
from typing import Protocol

import numpy as np

from sim.core.jit import entry, jit, leaf

_EMPTY = np.zeros(0, dtype=np.int64)

@dataclass(frozen=True)
class StepShape:
    """What a cost model needs to know of a step. Fields may be arrays (many steps at once)."""

    num_tokens: np.ndarray | float  # all new tokens (speculative drafts verified included)
    num_seqs: np.ndarray | float
    prefill_tokens: np.ndarray | float  # new tokens of prefill rows
    prefill_attn: np.ndarray | float  # Σ over prefill rows of q_len · context_len (attention work)
    decode_seqs: np.ndarray | float
    decode_context: np.ndarray | float  # Σ context of decode rows (KV read)
    num_sampled: np.ndarray | float
    verify_tokens: np.ndarray | float = 0.0  # speculative decoding: draft tokens verified
    swap_tokens: np.ndarray | float = 0.0  # KV (in tokens) moved to or from host memory
    max_prefill_row: np.ndarray | float = 0.0  # the largest prefill row's new tokens (one rank computes it whole)

    def vectors(self) -> np.ndarray:
        """The shapes as rows of a [steps, SHAPE_SIZE] array."""
        cols = np.broadcast_arrays(*(np.asarray(getattr(self, f), dtype=np.float64) for f in SHAPE_FIELDS))
        return np.ascontiguousarray(np.stack([np.atleast_1d(c) for c in cols], axis=1))

    @property
    def is_scalar(self) -> bool:
        return all(np.ndim(getattr(self, f)) == 0 for f in SHAPE_FIELDS)



# A step's shape as a float64 vector: shape[Shape.X] is StepShape's field x (the one list of them).
SHAPE_FIELDS = tuple(f.name for f in fields(StepShape))
Shape = IntEnum("Shape", [name.upper() for name in SHAPE_FIELDS], start=0, module=__name__)
SHAPE_SIZE = len(Shape)
# Each field's index by its name, for pricing (tests/sim/pricing/test_pricing_structure.py checks each is its member).
(NUM_TOKENS, NUM_SEQS, PREFILL_TOKENS, PREFILL_ATTN, DECODE_SEQS, DECODE_CONTEXT, NUM_SAMPLED, VERIFY_TOKENS,
 SWAP_TOKENS, MAX_PREFILL_ROW) = Shape


@leaf
def is_decode(new, computed):
    """A decode row: one new token on a cached context (else it prefills)."""
    return new == 1 and computed > 0


@jit
def shape_into(out, new, comp, samp, n, spec_k, swapped_blocks, block_size):
    """The shape of a step whose rows 0..n-1 process ``new`` tokens on ``comp`` cached ones
    (``samp``: the row samples). A decode row is one new token on a cached context."""
    tokens = 0
    decodes = 0
    decode_context = 0
    qctx = 0
    sampled = 0
    biggest = 0
    for i in range(n):
        q = new[i]
        ctx = comp[i] + q
        tokens += q
        qctx += q * ctx
        if is_decode(q, comp[i]):
            decodes += 1
            decode_context += ctx
        elif q > biggest:
            biggest = q
        if samp[i]:
            sampled += 1
    write_shape(out, tokens, n, tokens - decodes, qctx - decode_context, decodes, decode_context, sampled,
                spec_k * decodes, swapped_blocks * block_size, biggest)


@leaf
def write_shape(out, tokens, seqs, prefill_tokens, prefill_attn, decodes, decode_context, sampled, verify, swap,
                biggest):
    """Every field of a step's shape (``tokens``: new tokens before the ``verify`` drafts;
    ``biggest``: the largest prefill row's)."""
    out[NUM_TOKENS] = float(tokens + verify)
    out[NUM_SEQS] = float(seqs)
    out[PREFILL_TOKENS] = float(prefill_tokens)
    out[PREFILL_ATTN] = float(prefill_attn)
    out[DECODE_SEQS] = float(decodes)
    out[DECODE_CONTEXT] = float(decode_context)
    out[NUM_SAMPLED] = float(sampled)
    out[VERIFY_TOKENS] = float(verify)
    out[SWAP_TOKENS] = float(swap)
    out[MAX_PREFILL_ROW] = float(biggest)


@leaf
def decode_shape(out, seqs, context):
    """The shape of a step of ``seqs`` plain decodes over ``context`` cached tokens in all."""
    write_shape(out, seqs, seqs, 0, 0, seqs, context, seqs, 0, 0, 0)


@entry
def _shape_of(out, new, comp, samp, n, spec_k, swapped_blocks, block_size):
    shape_into(out, new, comp, samp, n, spec_k, swapped_blocks, block_size)


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
        return int(self.num_new_tokens.sum())

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

    def shape_vector(self) -> np.ndarray:
        out = np.zeros(SHAPE_SIZE)
        _shape_of(out, self.num_new_tokens, self.num_computed, self.samples, self.num_seqs, self.spec_tokens,
                   self.swap_in_blocks + self.swap_out_blocks, self.block_size)
        return out

    def shape(self) -> StepShape:
        return StepShape(*self.shape_vector())


@dataclass(frozen=True)
class StepResult:
    duration: float  # seconds the step took (predicted or measured)
    stopped: np.ndarray | None = None  # bool [n]: rows whose sampled token ended the request (EOS)


class Executor(Protocol):
    """What turns a BatchPlan into elapsed time: a cost model (simulate) or the engine (execute)."""

    def run(self, plan: BatchPlan, table) -> StepResult:
        """Execute (or price) one step. Must not change the table: the scheduler commits."""
        ...
