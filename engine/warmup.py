"""Warm-up: meet every kernel variant and graph bucket a run will meet, before timing anything.

A Triton kernel compiles on the first launch of each specialisation (its constexprs and
dtypes: see ``kernels.variants``), about a second each on an H100; cuBLAS and the caching
allocator also pay on first use of a shape. The warm-up runs, with nothing timed:

* every bucket of the graph ladder (captured on CUDA, run padded otherwise);
* a one-row prefill of every power of two from 16 tokens up to the step budget, and the
  budget itself (large prefills run eagerly; they pick the prefill-sized query tile);
* a decode step of the largest batch the scheduler can plan, if the ladder stops below it;
* on a GPU, each attention variant the split-KV rule can pick (both query-tile sizes times
  every split count, merge included), launched directly on the layer-0 cache;
* one sampling call.

The steps are *ghost* steps (:func:`engine.padding.ghost_step`): attention reads block 0 and
no K/V is written anywhere, so no request or block is needed and the cache is left as it was.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from engine.padding import ghost_step
from engine.timing import synchronize
from kernels import sample
from kernels.attention import SPLIT_CHOICES, paged_attention_triton, query_block, sm_count
from kernels.compiled import compiled_variants
from kernels.dispatch import use_triton


class Warmable(Protocol):
    """What the warm-up uses of an :class:`engine.executor.EngineExecutor` (named here rather
    than imported: the executor imports this module)."""

    block_size: int
    device: Any
    graph_runner: Any
    model: Any
    spec: Any
    kv: Any
    max_context: int

    def _logits(self, host: Any, all_tokens: bool = False) -> Any: ...


@dataclass(frozen=True)
class WarmupReport:
    seconds: float
    steps: int  # ghost steps run (through a bucket or eagerly)
    buckets: int  # graph buckets captured (CUDA) or run padded
    captured: bool  # CUDA graphs were captured
    prefill_lengths: tuple[int, ...]
    attention_variants: int  # (query tile, split count) pairs launched directly
    compiled: int | None  # Triton binaries in memory afterwards (None: interpreted, or an engine on a CPU)

    def describe(self) -> str:
        graphs = f"{self.buckets} CUDA graphs" if self.captured else f"{self.buckets} padded buckets"
        compiled = "" if self.compiled is None else f", {self.compiled} Triton kernel variants"
        return (f"engine warm-up: {self.seconds:.1f} s ({self.steps} steps, {graphs}, prefills up to "
                f"{max(self.prefill_lengths, default=0)} tokens{compiled})")


def prefill_lengths(max_tokens: int) -> tuple[int, ...]:
    """16, 32, 64, ... below ``max_tokens``, then ``max_tokens``."""
    out = []
    n = 16
    while n < max_tokens:
        out.append(n)
        n *= 2
    return (*out, max(1, max_tokens))


def warm_up(ex: Warmable, max_num_seqs: int, max_num_tokens: int, repeats: int = 1) -> WarmupReport:
    """Run the warm-up on ``ex`` (see the module docstring); returns what it did and how long."""
    t0 = time.perf_counter()
    bs = ex.block_size
    lengths = prefill_lengths(max_num_tokens)
    steps = 0
    noise = torch.Generator(device=ex.device).manual_seed(0)  # leaves the engine's stream alone
    with torch.inference_mode():
        runner = ex.graph_runner
        buckets = runner.prepare_all() if runner is not None else []
        shapes = [[(n, n)] for n in lengths]
        if runner is None or max_num_seqs > runner.ladder.max_seqs:
            shapes.append([(1, 2)] * max_num_seqs)  # decodes past the ladder run eagerly
        for rows in shapes:
            for _ in range(max(1, repeats)):
                logits = ex._logits(ghost_step(rows, bs))
                steps += 1
            n = logits.shape[0]
            params = (torch.ones(n, device=ex.device), torch.zeros(n, dtype=torch.int64, device=ex.device),
                      torch.ones(n, device=ex.device))
            sample(logits, *params, generator=noise, impl=ex.model.impl)
        variants = _attention_variants(ex)
        synchronize(ex.device)
    return WarmupReport(seconds=time.perf_counter() - t0, steps=steps, buckets=len(buckets),
                        captured=bool(runner is not None and runner.capture), prefill_lengths=lengths,
                        attention_variants=variants,
                        compiled=compiled_variants() if torch.device(ex.device).type == "cuda" else None)


def attention_variants(group: int, sms: int | None) -> list[tuple[int, int, int]]:
    """``(tokens, rows, splits)`` of one attention launch per (query tile, split count) that
    :func:`kernels.attention.choose_num_splits` can pick on a device with ``sms`` SMs."""
    tiles = {query_block(4, 4, group): (4, 4), query_block(64, 1, group): (64, 1)}
    return [(t, b, s) for t, b in tiles.values() for s in (SPLIT_CHOICES if sms else (1,))]


def _attention_variants(ex: Warmable) -> int:
    """Launch every (query tile, split count) the split-KV rule can pick, on a GPU (on a CPU
    there are no splits, and the ghost steps meet both tiles)."""
    s = ex.spec
    k_cache, v_cache = ex.kv.layers[0]
    probe = torch.zeros(1, s.num_heads, s.head_dim, dtype=ex.model.dtype, device=ex.device)
    sms = sm_count(ex.device)
    if not sms or not use_triton(ex.model.impl, probe, k_cache, v_cache):
        return 0
    launches = attention_variants(s.num_heads // s.num_kv_heads, sms)
    for tokens, seqs, splits in launches:
        step = ghost_step([(tokens // seqs, max(ex.max_context, tokens // seqs))] * seqs, ex.block_size)
        x = step.to_device(ex.device)
        q = torch.zeros(tokens, s.num_heads, s.head_dim, dtype=ex.model.dtype, device=ex.device)
        paged_attention_triton(q, k_cache, v_cache, x.block_tables, x.query_start_loc,
                               x.seq_lens, ex.model.scale, num_splits=splits)
    return len(launches)
