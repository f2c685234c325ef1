"""The ladder of padded step sizes that CUDA graphs are captured for.

A CUDA graph replays fixed shapes, so a step is padded up to the smallest *bucket* that holds
it: ``tokens`` new tokens in at most ``seqs`` rows. Decode steps have one token per row, so
their buckets are square (``seqs == tokens``); above ``max_seqs`` the ladder goes on with
mixed steps (prefill chunks beside decodes) of more tokens than rows. A step with more rows or
tokens than the largest bucket runs eagerly. Pure logic, shared by the CPU and CUDA paths.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Bucket:
    tokens: int  # padded new tokens of the step
    seqs: int  # padded rows (sequences)


def default_sizes(max_seqs: int, max_tokens: int) -> tuple[int, ...]:
    """Token counts: 1, 2, 4, then every multiple of 8 up to ``max_seqs`` (the decode batches,
    as vLLM captures them), then mixed steps up to ``max_tokens`` in strides of
    ``min(64, max_seqs)`` (at least 8)."""
    sizes = {s for s in (1, 2, 4) if s <= max_tokens}
    decode_top = min(max_seqs, max_tokens)
    sizes.update(range(8, decode_top + 1, 8))
    sizes.add(decode_top)
    stride = max(8, min(64, max_seqs))
    sizes.update(range(decode_top - decode_top % stride + stride, max_tokens + 1, stride))
    sizes.add(max_tokens)
    return tuple(sorted(sizes))


@dataclass(frozen=True)
class GraphLadder:
    """Buckets ``(tokens=s, seqs=min(s, max_seqs))`` for each size ``s``."""

    sizes: tuple[int, ...]
    max_seqs: int

    def __post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 1 or self.max_seqs < 1:
            raise ValueError(f"bad graph ladder: sizes {self.sizes}, max_seqs {self.max_seqs}")
        object.__setattr__(self, "sizes", tuple(sorted(set(self.sizes))))

    @classmethod
    def build(cls, max_seqs: int = 256, max_tokens: int = 512,
              sizes: Iterable[int] | None = None) -> GraphLadder:
        max_seqs = max(1, min(max_seqs, max_tokens))
        return cls(tuple(sizes) if sizes is not None else default_sizes(max_seqs, max_tokens),
                   max_seqs)

    @property
    def buckets(self) -> tuple[Bucket, ...]:
        return tuple(Bucket(s, min(s, self.max_seqs)) for s in self.sizes)

    @property
    def largest(self) -> Bucket:
        return self.buckets[-1]

    def bucket_for(self, num_seqs: int, num_tokens: int) -> Bucket | None:
        """The smallest bucket holding the step, or None (the step runs eagerly)."""
        if num_seqs < 1 or num_tokens < num_seqs or num_seqs > self.max_seqs:
            return None
        for b in self.buckets:
            if b.tokens >= num_tokens and b.seqs >= num_seqs:
                return b
        return None
