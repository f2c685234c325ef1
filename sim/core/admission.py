"""Admission: who joins an engine's batch from the head of its waiting queue, and who can never
run there and is turned away with a reason."""

from __future__ import annotations

from sim.core import kvblocks as kv
from sim.core import kvtiers, queues, tierstore
from sim.core.jit import jit, leaf
from sim.core.outbox import emit
from sim.core.requests import RejectReason, Status
from sim.core.state import CHUNKED_PREFILL, DONE, PREFILL, SLOTS, STATIC, Counter, Setting

WAITING, RUNNING, REJECTED = int(Status.WAITING), int(Status.RUNNING), int(Status.REJECTED)
KV_CAPACITY = int(RejectReason.EXCEEDS_KV_CAPACITY)
MAX_MODEL_LEN = int(RejectReason.EXCEEDS_MAX_MODEL_LEN)
BATCH_TOKENS = int(RejectReason.EXCEEDS_BATCH_TOKENS)


@jit
def never_fits(c, e, rid):
    """Why ``rid`` can never run on engine ``e`` (0: it can)."""
    total = c.req.prompt_len[rid] + c.req.output_len[rid]
    if total > c.settings[e, Setting.MAX_LEN]:
        return MAX_MODEL_LEN
    policy = c.settings[e, Setting.POLICY]
    step = (total if policy == STATIC else c.settings[e, Setting.CHUNK]
            if policy in (CHUNKED_PREFILL, SLOTS) else c.settings[e, Setting.MAX_BATCHED])
    if kv.peak_blocks(c, e, total, step) > c.settings[e, Setting.NUM_BLOCKS]:
        return KV_CAPACITY
    return 0


@leaf
def reserves_output(c, e):
    """Whether a request joining engine ``e`` holds the blocks of its whole output from the start
    (``Setting.RESERVE_OUTPUT``: TensorRT-LLM's GUARANTEED_NO_EVICT); a prefill engine of a
    disaggregated pair hands each request over after its prompt, so there it holds the prompt."""
    return c.settings[e, Setting.RESERVE_OUTPUT] != 0 and c.settings[e, Setting.ROLE] != PREFILL


@leaf
def reject(c, rid, reason):
    c.req.status[rid] = REJECTED
    c.req.reject_reason[rid] = reason
    emit(c, rid, DONE)


@leaf
def free_seats(c, e):
    """Seats left for more running requests: those running and those whose KV cache is on its
    way here (a decode replica reserved their seats) count."""
    return c.settings[e, Setting.MAX_SEQS] - c.counters[e, Counter.NRUN] - c.counters[e, Counter.NTRANSFER]


@leaf
def add_row(c, e, rid, new):
    pn = c.counters[e, Counter.PN]
    c.p_ids[e, pn] = rid
    c.p_new[e, pn] = new
    c.counters[e, Counter.PN] = pn + 1


@leaf
def join_running(c, e, rid):
    c.req.status[rid] = RUNNING
    c.running[e, c.counters[e, Counter.NRUN]] = rid
    c.counters[e, Counter.NRUN] += 1


@jit
def admit_waiting(c, e, token_budget, seq_budget, chunked, reserve_whole):
    """Move requests from the head of the queue into the batch while they fit: seats, this
    step's token budget (a whole prompt, or a chunk of it when ``chunked``), and KV blocks
    (beyond the watermark: for the chunk, or, with ``Setting.ADMIT_WHOLE``, room for the whole
    sequence so far, as vLLM V1 admits). ``reserve_whole`` reserves blocks for prompt + output up front
    (static batching; TensorRT-LLM's GUARANTEED_NO_EVICT, ``Setting.RESERVE_OUTPUT``): a request
    that joins then never needs another block. A preempted request whose prompt and output so far
    outgrew any step runs alone. Returns how many joined."""
    r = c.req
    bs = c.settings[e, Setting.BLOCK_SIZE]
    # the most a step ever takes: a whole prompt beyond it can never run (under chunked prefill
    # with whole prompts, the step's budget before the decodes took theirs)
    step_capacity = (max(token_budget, c.settings[e, Setting.CHUNK])
                     if c.settings[e, Setting.POLICY] == CHUNKED_PREFILL else token_budget)
    room = kv.available(c, e) - c.settings[e, Setting.WATERMARK]
    added = 0
    while c.counters[e, Counter.NWAIT] > 0 and token_budget > 0 and added < seq_budget:
        q = queues.first_waiting(c, e)
        rid = c.qhead[e, q]
        reason = never_fits(c, e, rid)
        if reason:
            queues.pop_front(c, e, q)
            reject(c, rid, reason)
            continue
        hit = kv.prefix_hit(c, e, rid)
        found = kvtiers.lookup(c, e, rid, hit) if tierstore.has_tiers(c, e) else 0
        if kvtiers.worth_loading(c, e, found):
            cost = kvtiers.load_cost(c, e, rid, hit, found)
            if cost > room:
                break
            if kvtiers.waits(c, e):  # it leaves the queue until its blocks are here
                queues.pop_front(c, e, q)
                kvtiers.start_load(c, e, rid, hit, found)
                room -= cost
                continue
            kvtiers.start_load(c, e, rid, hit, found)  # they are cached now; the step waits for them
            hit = kv.prefix_hit(c, e, rid)
            found = 0
        computed = hit * bs
        remaining = r.num_tokens[rid] - computed
        n = min(remaining, token_budget) if chunked else remaining
        if n > token_budget:
            oversized = n > step_capacity
            if oversized and r.num_generated[rid] == 0:  # a whole prompt larger than any step
                queues.pop_front(c, e, q)
                reject(c, rid, BATCH_TOKENS)
                continue
            if not (oversized and added == 0):
                break  # wait for the next step's budget
        upto = r.prompt_len[rid] + r.output_len[rid] if reserve_whole else computed + n  # tokens it holds
        need = kv.own_blocks_in(c, e, upto, hit, n)
        pinned = kv.pin_cost(c, e, rid, hit, upto) if hit else 0
        if need + pinned > room:
            break
        # vLLM V1 (scheduler_reserve_full_isl): a chunk joins only if its whole sequence so far
        # (the prompt, and a preempted request's output) would fit; only the chunk is allocated
        if (chunked and n < remaining and c.settings[e, Setting.ADMIT_WHOLE]
                and kv.own_blocks_in(c, e, r.num_tokens[rid], hit, n) + pinned > room):
            break
        queues.pop_front(c, e, q)
        if hit:
            kv.acquire_prefix(c, e, rid, hit, upto)
            if r.num_generated[rid] == 0:
                r.cached_tokens[rid] = computed
        kv.allocate(c, e, need)
        room -= need + pinned
        r.num_computed[rid] = computed
        r.num_blocks[rid] = hit + need
        r.cache_blocks[rid] = hit
        kv.note_flight(c, e, rid, upto)
        if found:
            tierstore.skipped(c, e)  # what the tiers held is recomputed
        r.tier_state[rid] = kvtiers.IDLE
        join_running(c, e, rid)
        add_row(c, e, rid, n)
        added += 1
        token_budget -= n
    return added
