"""Scheduling policies: from an engine's queues and running requests to the next step's rows.

- **continuous** (Orca, vLLM): waiting requests join as soon as there is room (seats, the
  step's token budget, KV blocks); a step that admits requests prefills them whole, otherwise
  every running request decodes one token. When decodes run out of KV blocks, the newest
  running request is preempted. With multi-step scheduling (``num_scheduler_steps`` k > 1,
  vLLM 0.6) decodes run in rounds of k steps and requests are admitted between rounds.
- **chunked-prefill** (Sarathi-Serve, Dynamic SplitFuse): each step has a token budget;
  running decodes go first, one token each (and k with speculative decoding: the drafts they
  verify), then chunks of prompts part-way through, then new requests from the queue. Long
  prompts no longer stall everybody's decodes.
- **slots** (llama.cpp's server): ``max_num_seqs`` slots, each with its own context of
  ``slot_context`` tokens allocated when the server starts; a request takes a free slot, one
  longer than a slot is refused, and a step is built as chunked prefill's (every decoding slot's
  token first, then prompt tokens up to ``n_batch``). The engine's KV blocks are the slots'
  contexts (``sim/scenario/schema.py: Scheduler``), so a running request never waits for memory.
- **static**: gather up to N requests (or wait at most a timeout), then run the batch until
  its longest member finishes; nobody joins mid-batch, and KV memory for every member's whole
  prompt + output is reserved up front, as engines without paging do.

``schedule`` leaves the step in the engine's plan rows and returns how many there are (0: idle;
``clocks[e, Clock.WAKE_AT]`` then says when it should look again, if not at the next arrival).
"""

from __future__ import annotations

import numpy as np

from sim.core import kvblocks as kv
from sim.core import queues
from sim.core.admission import RUNNING, add_row, admit_waiting, free_seats, reserves_output
from sim.core.jit import jit, leaf
from sim.core.plan import is_decode, shape_into
from sim.core.preemption import grow, swap_in_waiting
from sim.core.state import CHUNKED_PREFILL, CONTINUOUS, SLOTS, STATIC, Clock, Counter, FloatSetting, RunTime, Setting

BIG = np.int64(1) << np.int64(62)


@leaf
def next_round_step(c, e):
    """Multi-step scheduling (vLLM's num_scheduler_steps): a decode step either starts a round of
    k decode steps or continues one; nobody is admitted until the round is over."""
    k = c.settings[e, Setting.MULTI_STEP]
    if k > 1:
        c.counters[e, Counter.ROUND] = c.counters[e, Counter.ROUND] - 1 if c.counters[e, Counter.ROUND] > 0 else k - 1


@jit
def continuous(c, e):
    r = c.req
    if c.counters[e, Counter.NSWAP]:
        swap_in_waiting(c, e, free_seats(c, e))
    seats = free_seats(c, e)
    if c.counters[e, Counter.NRUN] == 0:
        c.counters[e, Counter.ROUND] = 0  # the round ended with its last request
    admitting = (c.counters[e, Counter.NWAIT] and seats > 0 and c.counters[e, Counter.NSWAP] == 0
                 and c.counters[e, Counter.ROUND] == 0)
    if admitting and admit_waiting(c, e, c.settings[e, Setting.MAX_BATCHED], seats, False, reserves_output(c, e)):
        return  # a step of whole prompts
    running, ids, new = c.running[e], c.p_ids[e], c.p_new[e]  # every running request: its next tokens
    num_tokens, num_computed = r.num_tokens, r.num_computed
    n = c.counters[e, Counter.NRUN]
    for i in range(n):
        rid = running[i]
        ids[i] = rid
        new[i] = num_tokens[rid] - num_computed[rid]
    c.counters[e, Counter.PN] = n
    grow(c, e, 0)
    if c.counters[e, Counter.PN]:
        next_round_step(c, e)


@jit
def chunked(c, e):
    r = c.req
    budget = c.settings[e, Setting.CHUNK]
    if c.counters[e, Counter.NSWAP]:
        swap_in_waiting(c, e, free_seats(c, e))
    prefilling = False
    for i in range(c.counters[e, Counter.NRUN]):  # decodes first
        rid = c.running[e, i]
        if is_decode(r.num_tokens[rid] - r.num_computed[rid], r.num_computed[rid]):
            add_row(c, e, rid, 1)
        else:
            prefilling = True
    grow(c, e, 0)
    # each decode row takes its token and its speculative drafts from the budget (vLLM counts
    # num_tokens_with_spec - num_computed_tokens per running request)
    budget -= c.counters[e, Counter.PN] * (1 + c.settings[e, Setting.SPEC_K])
    if prefilling:  # then prompts part-way through, oldest first
        for i in range(c.counters[e, Counter.NRUN]):
            rid = c.running[e, i]
            done = r.num_computed[rid]
            rest = r.num_tokens[rid] - done
            if not (rest > 1 or done == 0):
                continue
            if budget <= 0:
                break
            n = min(rest, budget)
            need = kv.short(c, e, rid, done + n, n)
            if need > kv.available(c, e):
                break
            kv.allocate(c, e, need)
            kv.take(c, e, rid, need, done + n)
            add_row(c, e, rid, n)
            budget -= n
    seats = free_seats(c, e)
    if (budget > 0 and seats > 0 and c.counters[e, Counter.NWAIT] and not c.counters[e, Counter.PREEMPTED]
            and c.counters[e, Counter.NSWAP] == 0):
        admit_waiting(c, e, budget, seats, c.settings[e, Setting.WHOLE_PROMPTS] == 0, reserves_output(c, e))


@jit
def static(c, e, now):
    r = c.req
    n = c.counters[e, Counter.BATCH_N]
    if n:
        for i in range(n):
            rid = c.batch[e, i]
            if r.status[rid] == RUNNING:
                add_row(c, e, rid, r.num_tokens[rid] - r.num_computed[rid])
        if c.counters[e, Counter.PN]:
            return
        for i in range(n):  # the batch is over: its memory comes back
            kv.free_blocks(c, e, c.batch[e, i])
        c.counters[e, Counter.BATCH_N] = 0
    c.clocks[e, Clock.WAKE_AT] = np.inf
    if not c.counters[e, Counter.NWAIT]:
        return
    head = c.qhead[e, queues.first_waiting(c, e)]
    deadline = r.arrival[head] + c.run_times[RunTime.FRONTEND] + c.float_settings[e, FloatSetting.BATCH_TIMEOUT]
    if c.counters[e, Counter.NWAIT] < c.settings[e, Setting.BATCH_SIZE] and now < deadline:
        c.clocks[e, Clock.WAKE_AT] = deadline
        return
    admit_waiting(c, e, BIG, c.settings[e, Setting.BATCH_SIZE], False, True)
    for i in range(c.counters[e, Counter.PN]):
        c.batch[e, i] = c.p_ids[e, i]
    c.counters[e, Counter.BATCH_N] = c.counters[e, Counter.PN]


@jit
def schedule(c, e, now):
    """Plan engine ``e``'s next step at ``now``: its rows, their cached context, which sample,
    and the step's shape. Returns the number of rows (0: nothing to run)."""
    c.counters[e, Counter.PN] = 0
    c.clocks[e, Clock.TURN_AT] = now
    c.counters[e, Counter.PREEMPTED] = 0
    c.counters[e, Counter.SWAP_IN] = 0
    c.counters[e, Counter.SWAP_OUT] = 0
    policy = c.settings[e, Setting.POLICY]
    if policy == CONTINUOUS:
        continuous(c, e)
    elif policy == CHUNKED_PREFILL:
        chunked(c, e)
    elif policy == STATIC:
        static(c, e, now)
    elif policy == SLOTS:
        chunked(c, e)  # a slot's batch: decodes first, then prompts up to n_batch (the slots are its seats)
    pn = c.counters[e, Counter.PN]
    if pn == 0:
        return 0
    r = c.req
    ids, new, comp, samp = c.p_ids[e], c.p_new[e], c.p_comp[e], c.p_samp[e]
    num_computed, num_tokens, first_scheduled = r.num_computed, r.num_tokens, r.first_scheduled
    for i in range(pn):
        rid = ids[i]
        comp[i] = num_computed[rid]
        samp[i] = comp[i] + new[i] == num_tokens[rid]
        if np.isnan(first_scheduled[rid]):
            first_scheduled[rid] = now
    shape_into(c.shape[e], new, comp, samp, pn, c.settings[e, Setting.SPEC_K],
               c.counters[e, Counter.SWAP_IN] + c.counters[e, Counter.SWAP_OUT], c.settings[e, Setting.BLOCK_SIZE])
    return pn
