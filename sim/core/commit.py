"""Committing a finished step: tokens computed, tokens sampled (speculative drafts accepted),
prompts cached for sharing, requests finished or handed over, token times and the step's row
in the log. ``begin_step`` notes what the step started with (memory, queue) and, for a
pipelined replica, how long it really takes with the other virtual engines in the pipe."""

from __future__ import annotations

import numpy as np

from sim.core import blocktable as bt
from sim.core import kvblocks as kv
from sim.core.admission import RUNNING
from sim.core.jit import jit, leaf
from sim.core.outbox import emit
from sim.core.plan import is_decode
from sim.core.requests import Status
from sim.core.rng import accepted_drafts
from sim.core.state import (
    DONE,
    HANDOFF,
    ITL_BINS,
    ITL_LOG_MIN,
    ITL_PER_DECADE,
    PREFILL,
    STATIC,
    Clock,
    Counter,
    LogColumn,
    RunCounter,
    Setting,
)

FINISHED, TRANSFER = int(Status.FINISHED), int(Status.TRANSFER)


@leaf
def queue_len(c, e):
    return c.counters[e, Counter.NWAIT] + c.counters[e, Counter.NSWAP] + c.counters[e, Counter.NREMOTE]


@leaf
def snapshot(c, e):
    """What the step log records of engine e as a step starts: blocks in use, cached, queue."""
    c.counters[e, Counter.USED_AT] = kv.in_use(c, e)
    c.counters[e, Counter.CACHED_AT] = bt.unused(c.cache, e)
    c.counters[e, Counter.QUEUED_AT] = queue_len(c, e)


@jit
def begin_step(c, e, now, duration):
    """The planned step starts at ``now`` and lasts ``duration`` (priced, pipeline waits
    included: sim/pricing)."""
    snapshot(c, e)
    c.clocks[e, Clock.START] = now
    c.clocks[e, Clock.DURATION] = duration


@leaf
def itl_bin(gap):
    """The histogram bin of an inter-token gap (200 per decade from 1 µs)."""
    if not gap > 0.0:
        return 0
    b = int(np.floor((np.log10(gap) - ITL_LOG_MIN) * ITL_PER_DECADE))
    return min(max(b, 0), ITL_BINS - 1)


@leaf
def gap_ns(gap):
    """An inter-token gap in whole nanoseconds (so sums do not depend on order)."""
    return np.int64(gap * 1e9 + 0.5)


@leaf
def count_gaps(c, cls, b, ns, n):
    """``n`` inter-token gaps of ``ns`` nanoseconds, in histogram bin ``b``, of traffic class ``cls``."""
    c.itl_sum[cls] += ns * n
    c.itl_hist[cls, b] += n


@jit
def token_out(c, rid, now, gap_seen, bin_seen):
    """A token of ``rid`` came out at ``now``: its first, or one more inter-token gap (counted in
    whole nanoseconds, so sums do not depend on order). ``gap_seen``/``bin_seen``: the last gap
    binned (rows of a step mostly share one); returns the pair for the next token."""
    r = c.req
    if np.isnan(r.first_token[rid]):
        r.first_token[rid] = now
    else:
        gap = now - r.last_token[rid]
        if gap != gap_seen:
            gap_seen, bin_seen = gap, itl_bin(gap)
        count_gaps(c, r.class_id[rid], bin_seen, gap_ns(gap), 1)
    r.last_token[rid] = now
    return gap_seen, bin_seen


@jit
def commit(c, e, now, stopped, use_stopped):
    """Apply engine ``e``'s finished step at ``now``. ``stopped[i]``: row i's sampled token
    was an end of sequence (a real engine; read when ``use_stopped``)."""
    r = c.req
    pn = c.counters[e, Counter.PN]
    spec_k = c.settings[e, Setting.SPEC_K]
    prefill_role = c.settings[e, Setting.ROLE] == PREFILL
    ids, new, comp, samp = c.p_ids[e], c.p_new[e], c.p_comp[e], c.p_samp[e]
    num_computed, num_generated, num_tokens, output_len = r.num_computed, r.num_generated, r.num_tokens, r.output_len
    tokens = 0
    decodes = 0
    for i in range(pn):
        num_computed[ids[i]] = comp[i] + new[i]
        kv.settle(c, e, ids[i])
        tokens += new[i]
        if is_decode(new[i], comp[i]):
            decodes += 1
    prefix = c.settings[e, Setting.PREFIX]
    for i in range(pn):
        if not samp[i]:
            continue
        rid = ids[i]
        gained = 1
        if spec_k:  # a decode keeps its accepted drafts plus one token of the target's own
            if is_decode(new[i], comp[i]):
                gained = 1 + accepted_drafts(c.run_counters[RunCounter.SEED], rid, num_generated[rid], spec_k,
                                             c.spec_survival[e])
            gained = min(gained, output_len[rid] - num_generated[rid])
            num_computed[rid] += gained - 1  # the kept drafts' KV entries are valid
        num_generated[rid] += gained
        num_tokens[rid] += gained
        if prefix and num_generated[rid] == gained:
            kv.cache_prefix(c, e, rid)
    any_done = False
    gap, bin_ = -1.0, 0
    for i in range(pn):
        if not samp[i]:
            continue
        rid = ids[i]
        limit = 1 if prefill_role else output_len[rid]
        done = num_generated[rid] >= limit or (use_stopped and stopped[i])
        if prefill_role:
            if done and r.output_len[rid] > 1:
                hand_over(c, e, rid, now)
                any_done = True
                continue
            if done:
                gap, bin_ = token_out(c, rid, now, gap, bin_)
        else:
            gap, bin_ = token_out(c, rid, now, gap, bin_)
        if done:
            finish(c, e, rid, now)
            any_done = True
    if any_done:
        k = 0
        for i in range(c.counters[e, Counter.NRUN]):
            rid = c.running[e, i]
            if r.status[rid] == RUNNING:
                c.running[e, k] = rid
                k += 1
        c.counters[e, Counter.NRUN] = k
    log_step(c, e, pn, tokens, decodes)


@jit
def finish(c, e, rid, now):
    r = c.req
    r.status[rid] = FINISHED
    r.completion[rid] = now
    if c.settings[e, Setting.POLICY] != STATIC:  # a static batch keeps its memory until the batch ends
        kv.free_blocks(c, e, rid)
    emit(c, rid, DONE)


@jit
def hand_over(c, e, rid, now):
    """A prefill replica finished a prompt: the request waits for a decode replica, and this
    replica keeps its KV blocks until they have been sent."""
    r = c.req
    r.status[rid] = TRANSFER
    r.held_blocks[rid] = r.num_blocks[rid]
    r.held_cached[rid] = r.cache_blocks[rid]
    r.num_blocks[rid] = 0
    r.cache_blocks[rid] = 0
    r.handoff_s[rid] = c.clocks[e, Clock.DURATION]
    emit(c, rid, HANDOFF)


@jit
def log_step(c, e, pn, tokens, decodes):
    row = c.run_counters[RunCounter.LOG_N]
    li = c.log_i
    li[LogColumn.REPLICA, row] = c.settings[e, Setting.REPLICA]
    li[LogColumn.ENGINE, row] = e
    li[LogColumn.NUM_SEQS, row] = pn
    li[LogColumn.NUM_TOKENS, row] = tokens
    li[LogColumn.PREFILL_TOKENS, row] = tokens - decodes
    li[LogColumn.DECODE_SEQS, row] = decodes
    li[LogColumn.KV_BLOCKS_USED, row] = c.counters[e, Counter.USED_AT]
    li[LogColumn.KV_BLOCKS_CACHED, row] = c.counters[e, Counter.CACHED_AT]
    li[LogColumn.QUEUE_LEN, row] = c.counters[e, Counter.QUEUED_AT]
    c.log_f[0, row] = c.clocks[e, Clock.START]
    c.log_f[1, row] = c.clocks[e, Clock.DURATION]
    c.run_counters[RunCounter.LOG_N] = row + 1


