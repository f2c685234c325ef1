"""Decode runs: the compiled loop commits a stretch of steady decode steps in one go.

Once every running request of an engine decodes, nobody waits and no event can reach the
engine before a step ends, the next steps are predictable: each writes one token per row,
takes a new KV block for the rows whose token starts one, and lets the rows that reach their
last token go. ``decode_run`` commits such steps one after another with work per step that
does not grow with the batch (the rows' own updates happen once, when they leave or when the
run ends), pricing each step with the pricing core and logging it as a step. It stops before
the first step that would need more blocks than there are (that one must preempt), when the
batch empties, after RUN_STEPS steps, when the step log is full, or at the first step that
ends at or after ``horizon`` — the next event that could change the engine (the next arrival,
when engines meet only at arrivals; else the next event of any kind). The state it leaves is the state
stepping one by one leaves, so the results are identical (tests/sim/loops/test_loops_agree.py
compares this loop with the SimPy loop, which steps one by one).
"""

from __future__ import annotations

import numpy as np

from sim.core import handlers
from sim.core import kvblocks as kv
from sim.core.commit import begin_step, count_gaps, finish, gap_ns, itl_bin, log_step
from sim.core.jit import jit
from sim.core.plan import decode_shape, is_decode
from sim.core.policies import next_round_step
from sim.core.state import CHUNKED_PREFILL, CONTINUOUS, LOG_ROWS, PREFILL, Counter, Replica, RunCounter, Setting
from sim.loops.events import K_HEAP_N, K_JUMPED, K_STEPS, apply, computing, turn

RUN_STEPS = 64  # the longest run: only rows that end or grow within it are sorted


@jit
def steady(c, e, now):
    """Is engine e's planned step the first of a steady decode run: a continuous or chunked
    engine, not prefilling for others, not pipelined, no speculation, no sliding-window cap;
    every running request (and only they) decodes, every one of them had its last token now; nobody waits, nothing
    is on its way in, nothing was preempted or swapped for this step."""
    p = c.settings[e]
    if p[Setting.POLICY] != CONTINUOUS and p[Setting.POLICY] != CHUNKED_PREFILL:
        return False
    if p[Setting.ROLE] == PREFILL or p[Setting.SPEC_K] or c.replicas[p[Setting.REPLICA], Replica.COUNT] > 1:
        return False
    if p[Setting.WINDOW_PPM]:  # blocks grow unevenly past a sliding window: step by step
        return False
    s = c.counters[e]
    if (s[Counter.PN] != s[Counter.NRUN] or s[Counter.NWAIT] or s[Counter.NSWAP] or s[Counter.NREMOTE]
            or s[Counter.NTRANSFER]):
        return False
    if s[Counter.PREEMPTED] or s[Counter.SWAP_IN] or s[Counter.SWAP_OUT]:
        return False
    ids, new, comp, samp, last = c.p_ids[e], c.p_new[e], c.p_comp[e], c.p_samp[e], c.req.last_token
    ok = True
    for i in range(s[Counter.PN]):
        ok = ok and is_decode(new[i], comp[i]) and samp[i] and last[ids[i]] == now
    return ok


@jit
def decode_run(c, costs, L, e, now, end, horizon):
    """Commit engine e's steady decode steps (the first planned at ``now``, ending at ``end``)
    that end before ``horizon``. Returns when the step it leaves planned ends (the caller
    waits for it), or -1 when it handed the engine back to its ordinary turn."""
    if not end < horizon or c.run_counters[RunCounter.LOG_N] == LOG_ROWS:
        return end
    r = c.req
    n = c.counters[e, Counter.PN]
    bs = c.settings[e, Setting.BLOCK_SIZE]
    ids = c.p_ids[e, :n].copy()  # in running order
    c0 = c.p_comp[e, :n].copy()  # cached tokens before step 1
    h = r.num_blocks[ids]  # blocks held for step 1
    rem = r.output_len[ids] - r.num_generated[ids]  # a row's last step
    grow_at = (h - kv.state_blocks(c, e)) * bs - c0 + 1  # the first step that needs a new block, then every bs
    by_growth = _by_step(grow_at)  # the rows that grow or end within the run, by step
    by_end = _by_step(rem)  # ties stay in running order
    live = np.ones(n, dtype=np.bool_)
    growing = np.zeros(n, dtype=np.bool_)
    cnt = np.zeros(bs, dtype=np.int64)  # growing rows by the residue of their first growth step
    classes = np.zeros(c.itl_sum.shape[0], dtype=np.int64)
    for i in range(n):
        classes[r.class_id[ids[i]]] += 1
    k = n  # rows alive
    context = 0
    for i in range(n):
        context += c0[i] + 1
    g_next = 0
    f_next = 0
    j = 1  # the step planned: it started at t_prev and ends at t
    t_prev, t = now, end
    while True:
        # -- commit step j at t (as commit would: tokens, gaps, the log, rows that are done)
        gap = t - t_prev
        b = itl_bin(gap)
        ns = gap_ns(gap)
        for cls in range(classes.shape[0]):
            if classes[cls]:
                count_gaps(c, cls, b, ns, classes[cls])
        log_step(c, e, k, k, k)
        L.k[K_STEPS] += 1
        L.k[K_JUMPED] += 1
        while f_next < by_end.shape[0] and rem[by_end[f_next]] == j:
            i = by_end[f_next]
            f_next += 1
            rid = ids[i]
            _materialize(c, rid, c0[i], j, max(h[i], kv.blocks_for(c, e, c0[i] + j)), t)
            finish(c, e, rid, t)
            live[i] = False
            k -= 1
            classes[r.class_id[rid]] -= 1
            context -= c0[i] + j
            if growing[i]:
                cnt[grow_at[i] % bs] -= 1
        if c.run_counters[RunCounter.OUT_N]:  # rows ended: what they left to do
            handlers.react(c, t)
            apply(c, L, t)
        if not L.engines_apart[0] and L.k[K_HEAP_N] and L.ht[0] < horizon:
            horizon = L.ht[0]  # it made an event (a closed-loop user's next request)
        # -- plan step j + 1 (as schedule would: every row decodes, blocks for those that need one)
        if k == 0 or j == RUN_STEPS:  # the batch is over, or the run is as long as it may be
            _leave(c, e, ids, c0, h, live, j, t, bs, False)
            turn(c, costs, L, e, t)
            return -1.0
        while g_next < by_growth.shape[0] and grow_at[by_growth[g_next]] <= j + 1:
            i = by_growth[g_next]
            g_next += 1
            if live[i]:
                growing[i] = True
                cnt[grow_at[i] % bs] += 1
        need = cnt[(j + 1) % bs]
        if need > kv.available(c, e):  # this step must preempt
            _leave(c, e, ids, c0, h, live, j, t, bs, False)
            turn(c, costs, L, e, t)
            return -1.0
        if need:
            kv.allocate(c, e, need)
        next_round_step(c, e)
        j += 1
        context += k
        decode_shape(c.shape[e], k, context)
        duration = computing(c, costs, L, e)  # a steady run is never pipelined
        begin_step(c, e, t, duration)
        t_prev, t = t, t + duration
        if not t < horizon or c.run_counters[RunCounter.LOG_N] == LOG_ROWS:
            _leave(c, e, ids, c0, h, live, j, t_prev, bs, True)
            return t


@jit
def _by_step(x):
    """The rows whose step ``x`` comes within a run (at most RUN_STEPS), ordered by it, ties in
    row order: a counting sort, as the steps are small integers."""
    first = np.zeros(RUN_STEPS + 2, dtype=np.int64)  # rows before each step, then a cursor
    for i in range(x.shape[0]):
        if x[i] <= RUN_STEPS:
            first[max(x[i], 0) + 1] += 1
    for s in range(1, RUN_STEPS + 2):
        first[s] += first[s - 1]
    order = np.empty(first[RUN_STEPS + 1], dtype=np.int64)
    for i in range(x.shape[0]):
        if x[i] <= RUN_STEPS:
            at = max(x[i], 0)
            order[first[at]] = i
            first[at] += 1
    return order


@jit
def _materialize(c, rid, c0, steps, blocks, last):
    """A row's state after ``steps`` committed steps of the run."""
    r = c.req
    r.num_computed[rid] = c0 + steps
    r.num_generated[rid] += steps
    r.num_tokens[rid] += steps
    r.num_blocks[rid] = blocks
    r.last_token[rid] = last


@jit
def _leave(c, e, ids, c0, h, live, j, t, bs, planned):
    """The rows still running, as stepping leaves them: after step j was committed at t, or,
    when ``planned``, with step j planned (its blocks taken, its rows in the plan) after step
    j - 1 was committed at t."""
    committed = j - 1 if planned else j
    k = 0
    for i in range(ids.shape[0]):
        if not live[i]:
            continue
        rid = ids[i]
        _materialize(c, rid, c0[i], committed, max(h[i], kv.blocks_for(c, e, c0[i] + j)), t)
        c.running[e, k] = rid
        if planned:
            c.p_ids[e, k] = rid
            c.p_new[e, k] = 1
            c.p_comp[e, k] = c0[i] + committed
            c.p_samp[e, k] = True
        k += 1
    c.counters[e, Counter.NRUN] = k
    if planned:
        c.counters[e, Counter.PN] = k
