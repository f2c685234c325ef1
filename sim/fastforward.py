"""Fast-forward: run a stretch of identical decode steps as one event.

When every running request is decoding and nothing can change the batch (no admission
possible, no completion, no new KV block beyond what is free), the next ``k`` steps differ
only in their context lengths, which grow by one token per request per step. Their costs are
priced in one vectorised call and their effects committed in closed form. Results are
identical to stepping one by one (tests/sim/test_fastforward.py runs both ways).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.plan import BatchPlan, StepShape
from sim.policies.base import Policy
from sim.requests import Status


@dataclass
class DecodeRun:
    """Up to ``k`` repeats of a pure-decode plan, with each step's start time and KV use."""

    plan: BatchPlan
    k: int
    starts: np.ndarray  # [k+1] absolute start times; starts[k] is the end of the last step
    durations: np.ndarray  # [k]
    blocks_used: np.ndarray  # [k] blocks held by the replica during each step


def decode_horizon(policy: Policy, plan: BatchPlan) -> tuple[int, np.ndarray]:
    """How many times ``plan`` can repeat before the batch must change, and the new blocks
    each of those steps allocates (``inc[0] = 0``: the plan's own step is already allocated).
    Returns (1, ...) when the plan is not a pure decode or the policy may change it."""
    t = policy.table
    ids = plan.req_ids
    if not policy.can_fast_forward(plan):
        return 1, np.zeros(1, dtype=np.int64)
    remaining = t.output_len[ids] - t.num_generated[ids]
    kmax = int(remaining.min())
    if kmax <= 1:
        return 1, np.zeros(1, dtype=np.int64)
    bs = policy.blocks.block_size
    # Step j writes position c + j. A request's held blocks cover positions below nb·bs, so it
    # opens a new block at steps f = nb·bs − c, f + bs, f + 2·bs, ...
    first = t.num_blocks[ids] * bs - plan.num_computed
    first = first[first < kmax]
    rows = -(-kmax // bs)
    inc = np.bincount(first, minlength=rows * bs).reshape(rows, bs).cumsum(axis=0).ravel()[:kmax]
    need = np.cumsum(inc)
    k = int(np.searchsorted(need, policy.blocks.available, side="right"))
    return max(1, min(k, kmax)), inc[:k]


def run_shapes(plan: BatchPlan, k: int) -> StepShape:
    """The shapes of ``k`` repeats of a pure-decode plan."""
    n = plan.num_seqs
    ctx0 = float(plan.context_lens.sum())
    return StepShape(
        num_tokens=float(n), num_seqs=float(n), prefill_tokens=0.0, prefill_attn=0.0,
        decode_seqs=float(n), decode_context=ctx0 + n * np.arange(k, dtype=np.float64),
        num_sampled=float(n))


def commit_run(policy: Policy, plan: BatchPlan, m: int, inc: np.ndarray, end_times: np.ndarray
               ) -> np.ndarray:
    """Apply ``m`` repeats of a pure-decode plan whose steps ended at ``end_times``; returns
    the ids that finished (at the last step)."""
    t, blocks = policy.table, policy.blocks
    ids = plan.req_ids
    if m > 1:
        blocks.allocate(int(inc[:m].sum()))
        t.num_blocks[ids] = np.maximum(t.num_blocks[ids],
                                       blocks.blocks_for(plan.num_computed + m))
    t.num_computed[ids] += m
    t.num_generated[ids] += m
    t.num_tokens[ids] += m
    first = ids[np.isnan(t.first_token[ids])]  # a prompt whose last token was this run's first
    t.first_token[first] = end_times[0]
    if policy.blocks.prefix_caching:
        policy._cache_prefixes(ids[t.num_generated[ids] == m])
    done = ids[t.num_generated[ids] >= t.output_len[ids]]
    if done.size:
        policy._finish(done)
    return done


def is_pure_decode(plan: BatchPlan) -> bool:
    return bool(plan.is_decode.all() and plan.samples.all())


def still_running(policy: Policy, ids: np.ndarray) -> bool:
    return bool((policy.table.status[ids] == Status.RUNNING).all())
