"""A step's inputs on the host, and padding them up to a bucket.

:class:`HostStep` holds what :class:`engine.model.StepInputs` holds, as numpy arrays, before
they go to the device. :func:`pad_step` pads it to a :class:`engine.buckets.Bucket` so that a
captured CUDA graph can replay it. Padding touches nothing real:

* padding tokens (after the real ones) have id 0, position 0 and slot -1, so their K/V are
  written nowhere;
* padding rows have no query tokens and an empty context (``seq_len`` 0), so attention reads
  no KV block for them and the padding tokens, owned by no row, get zeros;
* padding sample rows point at token 0; their logits are computed and dropped, so they
  produce no token.

:func:`ghost_step` builds a step of that kind with real-looking rows (the warm-up's): every
row reads block 0 only and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from engine.buckets import Bucket
from engine.model import StepInputs


@dataclass(frozen=True)
class HostStep:
    input_ids: np.ndarray  # int64 [T]
    positions: np.ndarray  # int64 [T]
    query_start_loc: np.ndarray  # int64 [B+1]
    seq_lens: np.ndarray  # int64 [B]
    block_tables: np.ndarray  # int32 [B, W]
    slot_mapping: np.ndarray  # int64 [T]
    sample_idx: np.ndarray  # int64 [S]
    max_context: int  # max(seq_lens): feeds the split-KV rule without a device sync

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def num_samples(self) -> int:
        return len(self.sample_idx)

    def to_device(self, device: torch.device) -> StepInputs:
        """Eager inputs, unpadded (fresh tensors)."""

        def dev(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(device, dtype)

        return StepInputs(
            input_ids=dev(self.input_ids, torch.int64),
            positions=dev(self.positions, torch.int64),
            query_start_loc=dev(self.query_start_loc, torch.int32),
            seq_lens=dev(self.seq_lens, torch.int32),
            block_tables=dev(self.block_tables, torch.int32),
            slot_mapping=dev(self.slot_mapping, torch.int64),
            sample_idx=dev(self.sample_idx, torch.int64),
            max_context=self.max_context,
        )


def pad_step(step: HostStep, bucket: Bucket) -> HostStep:
    """``step`` padded to ``bucket.tokens`` tokens, ``bucket.seqs`` rows and ``bucket.seqs``
    sample rows (see the module docstring for what padding holds)."""
    t, b, s = step.num_tokens, step.num_seqs, step.num_samples
    if t > bucket.tokens or b > bucket.seqs or s > bucket.seqs:
        raise ValueError(f"a step of {t} tokens, {b} rows does not fit {bucket}")
    pt, pb = bucket.tokens - t, bucket.seqs - b
    qsl_end = step.query_start_loc[-1] if len(step.query_start_loc) else 0
    tables = np.zeros((bucket.seqs, max(step.block_tables.shape[1], 1)), dtype=np.int32)
    tables[:b, : step.block_tables.shape[1]] = step.block_tables
    return replace(
        step,
        input_ids=np.concatenate([step.input_ids, np.zeros(pt, dtype=np.int64)]),
        positions=np.concatenate([step.positions, np.zeros(pt, dtype=np.int64)]),
        query_start_loc=np.concatenate([step.query_start_loc, np.full(pb, qsl_end, dtype=np.int64)]),
        seq_lens=np.concatenate([step.seq_lens, np.zeros(pb, dtype=np.int64)]),
        block_tables=tables,
        slot_mapping=np.concatenate([step.slot_mapping, np.full(pt, -1, dtype=np.int64)]),
        sample_idx=np.concatenate([step.sample_idx, np.zeros(bucket.seqs - s, dtype=np.int64)]),
    )


def empty_step() -> HostStep:
    """No rows and no tokens: padded, a step that reads and writes no KV at all."""
    z = np.zeros(0, dtype=np.int64)
    return HostStep(z, z, np.zeros(1, dtype=np.int64), z, np.zeros((0, 1), dtype=np.int32), z, z, 0)


def ghost_step(rows: Sequence[tuple[int, int]], block_size: int) -> HostStep:
    """A step of ``(new tokens, context including them)`` rows, each sampling its last token,
    whose attention reads block 0 for every position and whose K/V are written nowhere."""
    new = np.array([n for n, _ in rows], dtype=np.int64)
    ctx = np.array([c for _, c in rows], dtype=np.int64)
    if (new < 1).any() or (ctx < new).any():
        raise ValueError(f"bad ghost rows {rows}")
    qsl = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(new, out=qsl[1:])
    t = int(qsl[-1])
    positions = np.arange(t) - np.repeat(qsl[:-1] - (ctx - new), new)
    width = max(1, int(-(-ctx.max(initial=0) // block_size)))
    return HostStep(
        input_ids=np.zeros(t, dtype=np.int64), positions=positions, query_start_loc=qsl,
        seq_lens=ctx, block_tables=np.zeros((len(rows), width), dtype=np.int32),
        slot_mapping=np.full(t, -1, dtype=np.int64), sample_idx=qsl[1:] - 1,
        max_context=int(ctx.max(initial=0)),
    )  # fmt: skip
