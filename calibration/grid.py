"""What calibration measures: the per-op grid and the whole-step plans, scaled to the device.

Sizes are scaled to the device (a CPU runs a tiny model at a few hundred tokens per step, a
GPU thousands) and clipped to the model's maximum length and the engine's KV capacity.
``quick`` is a small grid for tests and smoke runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from engine.plan_timer import Row, decode_rows


@dataclass(frozen=True)
class Grid:
    tokens: tuple[int, ...]  # linear layers and the rest, by tokens in the step
    sampled: tuple[int, ...]  # LM head + sampling, by rows that sample
    prefill_chunks: tuple[int, ...]  # attention prefill: new tokens of a chunk ...
    prefill_contexts: tuple[int, ...]  # ... on top of this many cached tokens
    prefill_rows: tuple[int, ...]  # ... in this many rows at once
    decode_batches: tuple[int, ...]  # attention decode: rows ...
    decode_contexts: tuple[int, ...]  # ... each with this many cached tokens
    step_plans: int  # varied plans timed whole for the step fit
    max_tokens: int  # their ranges
    max_seqs: int
    max_context: int
    repeats: int  # timed runs per point (the median is kept)
    warmup: int  # untimed runs before timing
    loop_requests: int  # requests of the short real-time run that measures the loop overhead
    seed: int = 0
    # untimed runs of a plan right before each timing of it: a step repeating its predecessor's
    # shape (as decodes do in a serving loop) runs faster than the first steps after a change
    settle: int = 1

    def to_json(self) -> dict:
        return asdict(self)

    def clipped(self, max_len: int) -> Grid:
        """Drop sizes longer than the model's maximum length (points that do not fit the
        engine's KV cache are skipped when measured)."""
        def keep(xs, limit):
            return tuple(x for x in xs if x <= limit) or (min(xs),)

        max_tokens = min(self.max_tokens, max_len // 2)
        return replace(
            self, tokens=keep(self.tokens, max_len), prefill_chunks=keep(self.prefill_chunks, max_len),
            prefill_contexts=keep(self.prefill_contexts, max_len - min(self.prefill_chunks)),
            decode_contexts=keep(self.decode_contexts, max_len - 1), max_tokens=max_tokens,
            max_context=min(self.max_context, max_len - max_tokens))


def _pow2(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(int(x) for x in 2 ** np.arange(int(np.log2(lo)), int(np.log2(hi)) + 1))


CPU = Grid(
    tokens=(1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 320, 384, 448, 512),
    sampled=(1, 2, 4, 8, 12, 16, 24, 32),
    prefill_chunks=(16, 64, 128, 256, 384, 512),
    prefill_contexts=(0, 128, 256, 512),
    prefill_rows=(1, 3),
    decode_batches=(1, 2, 4, 8, 16, 24, 32),
    decode_contexts=(16, 128, 256, 512, 1024),
    step_plans=96, max_tokens=512, max_seqs=32, max_context=1024,
    repeats=3, warmup=3, loop_requests=24, settle=4,
)
CPU_QUICK = Grid(
    tokens=(1, 8, 32, 128), sampled=(1, 4, 8), prefill_chunks=(16, 64, 128),
    prefill_contexts=(0, 128), prefill_rows=(1, 2), decode_batches=(1, 4, 8),
    decode_contexts=(16, 256), step_plans=24, max_tokens=128, max_seqs=8, max_context=256,
    repeats=1, warmup=1, loop_requests=6, settle=2,
)
CUDA = Grid(
    tokens=_pow2(1, 16384), sampled=_pow2(1, 512), prefill_chunks=_pow2(16, 8192),
    prefill_contexts=(0, 512, 2048, 4096, 8192), prefill_rows=(1, 4),
    decode_batches=_pow2(1, 512), decode_contexts=(16, 256, 1024, 4096, 8192, 16384),
    step_plans=300, max_tokens=8192, max_seqs=256, max_context=8192,
    repeats=5, warmup=5, loop_requests=64,
)
CUDA_QUICK = replace(CPU_QUICK, repeats=3, warmup=3)


def _up_to(xs: tuple[int, ...], top: int) -> tuple[int, ...]:
    """The points of ``xs`` up to ``top``, continued by doubling, ending at ``top``."""
    out = [x for x in xs if x < top]
    x = max(xs)
    while x * 2 < top:
        x *= 2
        out.append(x)
    return tuple(sorted({*out, top}))


def grid_for(device: str, quick: bool = False, **overrides) -> Grid:
    """The device's grid; ``max_tokens``, ``max_seqs``, ``max_context`` rescale the per-op
    points too (other fields replace the defaults)."""
    g = {"cpu": CPU_QUICK if quick else CPU, "cuda": CUDA_QUICK if quick else CUDA}[device]
    given = {k: v for k, v in overrides.items() if v is not None}
    g = replace(g, **given)
    if "max_tokens" in given:
        g = replace(g, tokens=_up_to(g.tokens, g.max_tokens),
                    prefill_chunks=_up_to(g.prefill_chunks, g.max_tokens))
    if "max_seqs" in given:
        g = replace(g, sampled=_up_to(g.sampled, g.max_seqs),
                    decode_batches=_up_to(g.decode_batches, g.max_seqs))
    if "max_context" in given:
        g = replace(g, decode_contexts=_up_to(g.decode_contexts, g.max_context),
                    prefill_contexts=_up_to(g.prefill_contexts, g.max_context))
    return g


def random_plans(grid: Grid, n: int | None = None, seed: int | None = None) -> list[list[Row]]:
    """Varied plans like a scheduler makes: decode batches, whole prefills (continuous
    batching) and decodes mixed with a prefill chunk (chunked prefill), over the grid's ranges."""
    rng = np.random.default_rng(grid.seed if seed is None else seed)
    n = grid.step_plans if n is None else n
    t, s, c = grid.max_tokens, grid.max_seqs, grid.max_context
    plans: list[list[Row]] = []
    kinds = np.resize(["decode", "prefill", "mixed"], n)
    rng.shuffle(kinds)

    def loguniform(lo: int, hi: int) -> int:  # small batches are common and cheap: favour them
        return int(np.clip(np.round(np.exp(rng.uniform(np.log(lo), np.log(hi + 1)))), lo, hi))

    def contexts(b: int) -> np.ndarray:
        top = loguniform(8, c)  # a batch's contexts spread below some maximum
        return rng.integers(1, top + 1, b)

    for kind in kinds:
        if kind == "decode":
            b = loguniform(1, s)
            plans.append(decode_rows(b, contexts(b)))
        elif kind == "prefill":
            k = int(rng.integers(1, min(4, s) + 1))
            budget = max(k, loguniform(max(k, 8), t))
            cuts = np.sort(rng.choice(np.arange(1, budget), size=k - 1, replace=False)) \
                if k > 1 and budget > k else np.array([], dtype=int)
            lens = np.diff(np.concatenate(([0], cuts, [budget])))
            plans.append([Row(0, int(x)) for x in lens if x > 0])
        else:
            b = loguniform(1, max(1, min(s - 1, t // 2)))
            q = loguniform(1, max(1, t - b))
            done = int(rng.integers(0, c + 1)) if rng.random() < 0.7 else 0
            last = bool(rng.random() < 0.5)
            plans.append([*decode_rows(b, contexts(b)), Row(done, q, last)])
    return plans
