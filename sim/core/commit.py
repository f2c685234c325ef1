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
    F_SPEC_ALPHA,
    G_LOG_N,
    G_SEED,
    HANDOFF,
    ITL_BINS,
    ITL_LOG_MIN,
    ITL_PER_DECADE,
    L_CACHED,
    L_DECODES,
    L_ENGINE,
    L_PREFILL,
    L_QUEUE,
    L_REPLICA,
    L_SEQS,
    L_TOKENS,
    L_USED,
    P_NUM_BLOCKS,
    P_POLICY,
    P_PREFIX,
    P_REPLICA,
    P_ROLE,
    P_SPEC_K,
    PREFILL,
    S_CACHED_AT,
    S_FREE,
    S_NREMOTE,
    S_NRUN,
    S_NSWAP,
    S_NWAIT,
    S_PN,
    S_QUEUED_AT,
    S_USED_AT,
    STATIC,
    T_DURATION,
    T_START,
)

FINISHED, TRANSFER = int(Status.FINISHED), int(Status.TRANSFER)


@leaf
def queue_len(c, e):
    return c.es[e, S_NWAIT] + c.es[e, S_NSWAP] + c.es[e, S_NREMOTE]


@leaf
def snapshot(c, e):
    """What the step log records of engine e as a step starts: blocks in use, cached, queue."""
    unused = bt.unused(c.cache, e)
    c.es[e, S_USED_AT] = c.ep[e, P_NUM_BLOCKS] - c.es[e, S_FREE] - unused
    c.es[e, S_CACHED_AT] = unused
    c.es[e, S_QUEUED_AT] = queue_len(c, e)


@jit
def begin_step(c, e, now, duration):
    """The planned step starts at ``now`` and lasts ``duration`` (priced, pipeline waits
    included: sim/pricing)."""
    snapshot(c, e)
    c.ef[e, T_START] = now
    c.ef[e, T_DURATION] = duration


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
    pn = c.es[e, S_PN]
    spec_k = c.ep[e, P_SPEC_K]
    prefill_role = c.ep[e, P_ROLE] == PREFILL
    ids, new, comp, samp = c.p_ids[e], c.p_new[e], c.p_comp[e], c.p_samp[e]
    num_computed, num_generated, num_tokens, output_len = r.num_computed, r.num_generated, r.num_tokens, r.output_len
    tokens = 0
    decodes = 0
    for i in range(pn):
        num_computed[ids[i]] = comp[i] + new[i]
        tokens += new[i]
        if is_decode(new[i], comp[i]):
            decodes += 1
    prefix = c.ep[e, P_PREFIX]
    for i in range(pn):
        if not samp[i]:
            continue
        rid = ids[i]
        gained = 1
        if spec_k:  # a decode keeps its accepted drafts plus one token of the target's own
            if is_decode(new[i], comp[i]):
                gained = 1 + accepted_drafts(c.g[G_SEED], rid, num_generated[rid], spec_k, c.epf[e, F_SPEC_ALPHA])
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
        for i in range(c.es[e, S_NRUN]):
            rid = c.running[e, i]
            if r.status[rid] == RUNNING:
                c.running[e, k] = rid
                k += 1
        c.es[e, S_NRUN] = k
    log_step(c, e, pn, tokens, decodes)


@jit
def finish(c, e, rid, now):
    r = c.req
    r.status[rid] = FINISHED
    r.completion[rid] = now
    if c.ep[e, P_POLICY] != STATIC:  # a static batch keeps its memory until the batch ends
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
    r.handoff_s[rid] = c.ef[e, T_DURATION]
    emit(c, rid, HANDOFF)


@jit
def log_step(c, e, pn, tokens, decodes):
    row = c.g[G_LOG_N]
    li = c.log_i
    li[L_REPLICA, row] = c.ep[e, P_REPLICA]
    li[L_ENGINE, row] = e
    li[L_SEQS, row] = pn
    li[L_TOKENS, row] = tokens
    li[L_PREFILL, row] = tokens - decodes
    li[L_DECODES, row] = decodes
    li[L_USED, row] = c.es[e, S_USED_AT]
    li[L_CACHED, row] = c.es[e, S_CACHED_AT]
    li[L_QUEUE, row] = c.es[e, S_QUEUED_AT]
    c.log_f[0, row] = c.ef[e, T_START]
    c.log_f[1, row] = c.ef[e, T_DURATION]
    c.g[G_LOG_N] = row + 1


