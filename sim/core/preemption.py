"""Memory pressure: giving a step's rows the KV blocks their new tokens need, and when blocks
run out, preempting the newest running request — its KV cache parked in host memory (swap) if
there is room, else dropped and recomputed later — and bringing swapped requests back."""

from __future__ import annotations

from sim.core import kvblocks as kv
from sim.core import queues
from sim.core.admission import WAITING, join_running
from sim.core.jit import jit, leaf
from sim.core.state import Counter, Setting


@leaf
def _short(c, e, rid, tokens, flight, blocks):
    """The blocks ``rid`` misses for ``tokens`` tokens, ``flight`` of them in the coming step,
    when ``blocks`` are held (most steps: none, found without dividing)."""
    return max(kv.short(c, e, rid, tokens, flight), 0) if tokens > kv.token_room(c, e, blocks) else 0


@jit
def grow(c, e, first):
    """Give plan rows ``first``.. the blocks their new tokens need (and speculative drafts'),
    preempting the newest running requests until everything left fits."""
    r = c.req
    ahead = c.settings[e, Setting.SPEC_K]
    ids, new, num_computed, num_blocks = c.p_ids[e], c.p_new[e], r.num_computed, r.num_blocks
    while True:
        total = 0
        for i in range(first, c.counters[e, Counter.PN]):
            total += _short(c, e, ids[i], num_computed[ids[i]] + new[i] + ahead, new[i] + ahead, num_blocks[ids[i]])
        if total == 0 or total <= kv.available(c, e) or c.counters[e, Counter.NRUN] == 0:
            break
        victim = c.running[e, c.counters[e, Counter.NRUN] - 1]
        preempt(c, e, victim)
        k = first
        for i in range(first, c.counters[e, Counter.PN]):
            if c.p_ids[e, i] != victim:
                c.p_ids[e, k] = c.p_ids[e, i]
                c.p_new[e, k] = c.p_new[e, i]
                k += 1
        c.counters[e, Counter.PN] = k
    if total:
        kv.allocate(c, e, total)
    if total or kv.windowed_cache(c, e):  # (windows move even when no block is needed)
        for i in range(first, c.counters[e, Counter.PN]):
            rid = ids[i]
            tokens = num_computed[rid] + new[i] + ahead
            kv.take(c, e, rid, _short(c, e, rid, tokens, new[i] + ahead, num_blocks[rid]) if total else 0, tokens)


@jit
def remove_running(c, e, rid):
    n = c.counters[e, Counter.NRUN]
    k = 0
    for i in range(n):
        if c.running[e, i] != rid:
            c.running[e, k] = c.running[e, i]
            k += 1
    c.counters[e, Counter.NRUN] = k


@jit
def preempt(c, e, rid):
    """Free a running request's blocks: park them in host memory (swap) if there is room, or
    drop them and recompute the request later (it goes back to the front of its queue)."""
    r = c.req
    remove_running(c, e, rid)
    c.counters[e, Counter.PREEMPTED] = 1
    r.preemptions[rid] += 1
    r.status[rid] = WAITING
    n = kv.swap_size(c, e, rid)
    if c.settings[e, Setting.SWAP] and n <= c.counters[e, Counter.HOST_FREE]:
        kv.drop_cache_refs(c, e, rid)  # shared blocks stay cached; its own blocks go to host memory
        kv.give_back(c, e, rid)
        c.counters[e, Counter.HOST_FREE] -= n
        c.counters[e, Counter.SWAP_OUT] += n
        r.swapped_blocks[rid] = n
        queues.push_back(c, e, queues.swapped_q(c), rid)
        return
    kv.free_blocks(c, e, rid)
    r.num_computed[rid] = 0
    queues.push_front(c, e, r.level[rid], rid)


@jit
def swap_in_waiting(c, e, seats):
    """Bring swapped-out requests back (before any new admission), oldest first."""
    r = c.req
    q = queues.swapped_q(c)
    back = 0
    while c.counters[e, Counter.NSWAP] > 0 and back < seats:
        rid = c.qhead[e, q]
        n = r.swapped_blocks[rid]
        if n + c.settings[e, Setting.WATERMARK] > kv.available(c, e):
            break
        queues.pop_front(c, e, q)
        kv.allocate(c, e, n)
        c.counters[e, Counter.HOST_FREE] += n
        c.counters[e, Counter.SWAP_IN] += n
        r.num_blocks[rid] = n
        r.swapped_blocks[rid] = 0
        join_running(c, e, rid)
        back += 1
    return back
