"""Fast-forward: run a stretch of pure-decode steps as one event.

Once every running request is decoding, the next steps are predictable until something from
outside changes the batch: each step every live row writes one token, and a row leaves the
batch at the step that writes its last token. When nobody waits to take a leaver's place,
completions change nothing but the batch size, so the stretch runs on through them; when
someone waits, it ends at the first completion. It also ends before the first step whose new
KV blocks would not fit (that step must preempt), and an arrival that may join cuts it short
at the next step boundary (Replica.notify).

The stretch is priced in one vectorised call and committed in closed form: per-step sizes,
contexts and block counts come from the rows' remaining lengths with a sort, a few cumulative
sums and one bincount, so the work grows with events, not tokens. Results are identical to
stepping one by one (tests/sim/test_fastforward.py runs both ways).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.core.plan import BatchPlan, StepShape
from sim.core.policies.base import Policy


@dataclass
class DecodeRun:
    """Up to ``k`` pure-decode steps of the rows ``ids``; row i is in steps 1..left[i]."""

    ids: np.ndarray
    computed: np.ndarray  # tokens each row had in the KV cache before step 1
    blocks: np.ndarray  # blocks each row held in step 1
    left: np.ndarray  # tokens each row has still to generate: its last step
    first_token: np.ndarray  # rows whose step-1 token is their first (a 1-token last chunk)
    k: int
    num_seqs: np.ndarray  # [k] rows in step j+1
    growth: np.ndarray  # [k+1] cumulative new blocks allocated up to step j (growth[0] = 0)
    freed: np.ndarray  # [k+1] cumulative blocks released at the end of steps up to j
    context: np.ndarray  # [k] total context of the rows in step j+1 (what attention reads)
    starts: np.ndarray | None = None  # [k+1] start of each step; starts[k] ends the run
    durations: np.ndarray | None = None  # [k]

    def blocks_used(self, used: int) -> np.ndarray:
        """Blocks held during each step, given those held during step 1."""
        return used + self.growth[1:] - self.freed[:-1]

    def step_at(self, now: float) -> int:
        """The step (0-based) under way at ``now``."""
        return max(0, int(np.searchsorted(self.starts[:-1], now, side="right")) - 1)


def plan_run(policy: Policy, plan: BatchPlan) -> DecodeRun | None:
    """The decode stretch that ``plan`` starts, or None when it must be stepped alone."""
    if not policy.can_fast_forward(plan):
        return None
    t, blocks = policy.table, policy.blocks
    ids = plan.req_ids
    generated = t.num_generated[ids]
    left = t.output_len[ids] - generated
    lefts = left.tolist()  # (Python's min/max/sum beat numpy's reductions on a batch)
    absorb = policy.completions_change_nothing()
    k = max(lefts) if absorb else min(lefts)
    if k <= 1:
        return None
    n = len(lefts)
    c, nb, bs = plan.num_computed, plan.num_blocks, blocks.block_size
    # Step j writes position c + j - 1; a row's held blocks cover positions below nb·bs, so it
    # takes a new block at steps f, f + bs, ... while it lives (f >= 2: step 1 is allocated).
    last = np.minimum(left, k)
    f = nb * bs - c + 1
    grows = f <= last
    f = f[grows]
    stop = f + bs * ((last[grows] - f) // bs + 1)  # the first such step after its last
    size = (-(-(k + 1) // bs) + 1) * bs
    marks = np.bincount(f, minlength=size) - np.bincount(stop, minlength=size)
    growth = np.add.accumulate(marks.reshape(-1, bs).cumsum(axis=0).ravel()[: k + 1])
    freed = None
    if absorb and policy.frees_on_finish and min(lefts) < k:
        dies = left < k
        done_blocks = np.maximum(nb[dies], -(-(c[dies] + left[dies]) // bs))
        freed = np.add.accumulate(np.bincount(left[dies], weights=done_blocks, minlength=k + 1)
                                  .astype(np.int64))
    # The first step whose new blocks do not fit ends the stretch before it.
    # (With prefix caching, only free blocks: taking a cached one would evict mid-stretch.)
    room = blocks.free if blocks.prefix_caching else blocks.available
    if growth[k] > room:
        short = growth[1:] - (0 if freed is None else freed[:-1]) > room
        if short.any():
            k = int(short.argmax())
            if k <= 1:
                return None
            growth = growth[: k + 1]
    freed = np.zeros(k + 1, dtype=np.int64) if freed is None else freed[: k + 1]
    steps = np.arange(1, k + 1)
    if absorb and min(lefts) < k:
        order = left.argsort(kind="stable")
        gone = left[order].searchsorted(steps, side="left")  # rows done before step j
        num_seqs = n - gone
        suffix = np.zeros(n + 1, dtype=np.int64)
        suffix[:n] = np.add.accumulate(c[order][::-1])[::-1]
        context = suffix[gone] + steps * num_seqs
    else:
        num_seqs = np.full(k, n)
        context = steps * n
        context += sum(c.tolist())
    return DecodeRun(ids, c, nb, left, ids[generated == 0], k, num_seqs, growth, freed, context)


def commit_run(policy: Policy, run: DecodeRun, m: int) -> np.ndarray:
    """Apply the first ``m`` steps of ``run``; returns the ids that finished, in step order."""
    t, blocks = policy.table, policy.blocks
    ids, left = run.ids, run.left
    done_mask = left <= m
    steps = np.minimum(left, m)
    # Rows that finished before the last step gave their blocks back along the way.
    blocks.allocate(int(run.growth[m] - run.freed[m - 1]))
    held = np.maximum(run.blocks, -(-(run.computed + steps) // blocks.block_size))
    if run.freed[m - 1]:
        held[left < m] = 0
    t.num_blocks[ids] = held
    t.num_computed[ids] = run.computed + steps
    t.num_generated[ids] += steps
    t.num_tokens[ids] += steps
    if run.first_token.size:
        t.first_token[run.first_token] = run.starts[1]
        if policy.blocks.prefix_caching:
            policy._cache_prefixes(run.first_token)
    if np.count_nonzero(done_mask):
        done = ids[done_mask]
        order = np.argsort(left[done_mask], kind="stable")
        done = done[order]
        t.completion[done] = run.starts[left[done_mask][order]]
        policy._finish(done)
        return done
    return ids[:0]


def decode_step_times(cost, seqs: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Durations of a run's steps: the cost model's own ``decode_steps`` when it has one
    (priced per batch size, see RooflineCost), else its ``step_time`` on the run's shapes."""
    if hasattr(cost, "decode_steps"):
        return cost.decode_steps(seqs, context)
    return np.asarray(cost.step_time(decode_shapes(seqs, context)), dtype=np.float64)


def decode_shapes(seqs: np.ndarray, context: np.ndarray) -> StepShape:
    """Pure-decode steps of ``seqs[j]`` rows reading ``context[j]`` tokens of KV."""
    n = np.asarray(seqs, dtype=np.float64)
    return StepShape(n, n, 0.0, 0.0, n, np.asarray(context, dtype=np.float64), n)
