"""The per-op profile: the engine's own operations, timed inside its forward.

The engine's timer hook times every op of every layer on the engine's own tensors; a step's
per-op totals are grouped as the profiled cost model prices them:

- ``linear``: embedding and the matmuls (QKV, O, gate|up, down), by tokens in the step;
- ``other``: norms, rotary, KV writes, activation, by tokens; plus the executor's fixed
  per-step host work (input preparation, Python glue), which is the same at every size;
- ``lm_head``: LM head and sampling, by rows that sample;
- ``attn_prefill`` / ``attn_decode``: attention, fitted over (rows, Σ q·kv) and
  (rows, Σ kv); each row term also carries the executor's per-row host work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.fitting import fit_linear, robust_nnls, table
from calibration.grid import Grid
from calibration.measure import Sample
from engine.plan_timer import PlanTimer, Row, decode_rows
from sim.pricing.profile import Ops

LINEAR = ("embed", "qkv_proj", "o_proj", "gate_up_proj", "down_proj")
OTHER = ("input_norm", "rope", "kv_write", "post_attn_norm", "act", "final_norm")
HEAD = ("lm_head", "sample")
ATTENTION = ("attention",)
TIMED = LINEAR + OTHER + HEAD + ATTENTION  # prepare_inputs counts as host work


def _sum(s: Sample, names) -> float:
    return sum(s.ops.get(n, 0.0) for n in names)


@dataclass
class OpPoints:
    """The grid's plans, by purpose."""

    tokens: list[list[Row]]
    sampled: list[list[Row]]
    prefill: list[list[Row]]
    decode: list[list[Row]]

    def all(self) -> list[list[Row]]:
        return self.tokens + self.sampled + self.prefill + self.decode


def points(grid: Grid, harness: PlanTimer) -> OpPoints:
    tokens = [[Row(0, t)] for t in grid.tokens]
    sampled = [decode_rows(s, 16) for s in grid.sampled]
    prefill = [[Row(c, q)] * k for q in grid.prefill_chunks for c in grid.prefill_contexts
               for k in grid.prefill_rows if k == 1 or k * q <= grid.max_tokens]
    decode = [decode_rows(b, c) for b in grid.decode_batches for c in grid.decode_contexts]
    return OpPoints(*([p for p in group if harness.fits(p)] for group in (tokens, sampled, prefill, decode)))


def host_work(samples: list[Sample]) -> tuple[float, float]:
    """Fixed and per-row seconds of the executor's work outside the timed model ops:
    ``wall − Σ timed ops`` (the wall timed without the timer, whose own cost is not the
    engine's), fitted over the rows of each step."""
    y = np.array([s.wall - _sum(s, TIMED) for s in samples])
    x = np.array([[1.0, s.shape.num_seqs] for s in samples])
    walls = np.array([s.wall for s in samples])
    coef = robust_nnls(x, np.maximum(y, 0.0), 1.0 / walls)  # big steps are noisy: weigh less
    return float(coef[0]), float(coef[1])


def build_ops(pts: OpPoints, samples: list[Sample]) -> tuple[Ops, dict]:
    """Tables and fits from the measured grid; also their fit statistics."""
    n = [len(pts.tokens), len(pts.sampled), len(pts.prefill)]
    tok = samples[: n[0]]
    smp = samples[n[0]: n[0] + n[1]]
    pre = samples[n[0] + n[1]: n[0] + n[1] + n[2]]
    dec = samples[n[0] + n[1] + n[2]:]
    fixed, per_row = host_work(samples)
    linear = table([(s.shape.num_tokens, _sum(s, LINEAR)) for s in tok])
    other = table([(s.shape.num_tokens, _sum(s, OTHER) + fixed) for s in tok])
    head = table([(s.shape.num_sampled, _sum(s, HEAD)) for s in smp]) if len(smp) > 1 else None
    attn_prefill = fit_linear(["prefill_rows", "prefill_attn"], [s.features() for s in pre],
                              [_sum(s, ATTENTION) + per_row * s.shape.num_seqs for s in pre]) \
        if len(pre) >= 2 else None
    attn_decode = fit_linear(["decode_rows", "decode_context"], [s.features() for s in dec],
                             [_sum(s, ATTENTION) + per_row * s.shape.num_seqs for s in dec]) \
        if len(dec) >= 2 else None
    ops = Ops(linear=linear, other=other, lm_head=head, attn_prefill=attn_prefill,
              attn_decode=attn_decode)
    stats = {"host_fixed_s": fixed, "host_per_row_s": per_row,
             "op_seconds_by_tokens": {int(s.shape.num_tokens): {k: round(v, 7) for k, v in s.ops.items()}
                                      for s in tok}}
    return ops, stats
