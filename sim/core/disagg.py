"""Prefill/decode disaggregation (DistServe, Splitwise, Mooncake): a request prefilled on a
prefill replica moves its KV cache over a link to a decode replica, which first makes room for
it (``admit_remote``); once the cache has arrived (``kv_arrived``) the prefill replica lets
go of its copy and the request decodes where it landed. Its first token reaches the user then.

Selective disaggregation (Dynamo's conditional disaggregation): a request goes to a decode
replica first (``decide``), which prefills it itself when the prompt tokens its prefix cache lacks
are few (``local_prefill_tokens``) or the prefill pool's queue is long (``max_prefill_queue``
per prefill replica); otherwise it is prefilled in the pool and its KV cache comes back to that
decode replica."""

from __future__ import annotations

from sim.core import kvblocks as kv
from sim.core import queues, router
from sim.core.admission import free_seats, join_running, never_fits, reject, reserves_output
from sim.core.commit import token_out
from sim.core.jit import jit
from sim.core.outbox import emit
from sim.core.state import BACK, DROP_KV, FRONT, SEND_KV, Counter, Replica, Routing, RunCounter, Setting


@jit
def admit_remote(c, e):
    """Reserve blocks for prefilled requests waiting to move here (oldest first), so their KV
    cache can be sent (and, where the engine reserves outputs, the blocks of the rest of it);
    one that can never fit here is turned away."""
    r = c.req
    q = queues.remote_q(c)
    room = kv.available(c, e) - c.settings[e, Setting.WATERMARK]
    seats = free_seats(c, e)
    while c.counters[e, Counter.NREMOTE] > 0 and seats > 0:
        rid = c.qhead[e, q]
        reason = never_fits(c, e, rid)
        if reason:
            queues.pop_front(c, e, q)
            reject(c, rid, reason)
            emit(c, rid, DROP_KV)
            continue
        tokens = r.num_computed[rid] + 1 + c.settings[e, Setting.SPEC_K]
        if reserves_output(c, e):  # the decode engine holds the rest of its output's blocks too
            tokens = max(tokens, r.prompt_len[rid] + r.output_len[rid])
        need = kv.blocks_for(c, e, tokens)
        if need > room:
            break
        queues.pop_front(c, e, q)
        kv.allocate(c, e, need)
        room -= need
        seats -= 1
        r.num_blocks[rid] = need
        c.counters[e, Counter.NTRANSFER] += 1
        emit(c, rid, SEND_KV)


@jit
def release_source(c, rid):
    """The prefill replica's copy of a handed-over request's KV cache is no longer needed."""
    r = c.req
    e = r.source[rid]
    cached = r.held_cached[rid]
    if cached:
        kv.drop_prefix(c, e, rid, cached)
    kv.release(c, e, r.held_blocks[rid] - cached)
    r.held_blocks[rid] = 0
    r.held_cached[rid] = 0


@jit
def kv_arrived(c, e, rid, now):
    c.counters[e, Counter.NTRANSFER] -= 1
    join_running(c, e, rid)
    token_out(c, rid, now, -1.0, 0)



@jit
def prefill_queue(c):
    """Requests waiting in the prefill pool, per prefill replica."""
    first, count = c.routers[FRONT, Routing.FIRST], c.routers[FRONT, Routing.COUNT]
    waiting = 0
    for r in range(first, first + count):
        e0 = c.replicas[r, Replica.FIRST]
        for e in range(e0, e0 + c.replicas[r, Replica.COUNT]):
            waiting += c.counters[e, Counter.NWAIT]
    return waiting / max(count, 1)


@jit
def decide(c, rid):
    """Selective disaggregation: the decode replica ``rid`` goes to, and whether that replica
    prefills it itself (else the prefill pool does and the KV cache comes back to it)."""
    d = router.route(c, BACK, rid)
    e = c.replicas[d, Replica.FIRST]
    uncached = c.req.prompt_len[rid] - kv.prefix_hit(c, e, rid) * c.settings[e, Setting.BLOCK_SIZE]
    bound = c.run_counters[RunCounter.PREFILL_QUEUE]
    local = uncached <= c.run_counters[RunCounter.LOCAL_PREFILL] or (bound >= 0 and prefill_queue(c) > bound)
    if not local:
        c.req.decode_at[rid] = d
    return d, local


@jit
def decode_replica(c, rid):
    """Where a prefilled request decodes: the replica selective disaggregation chose, or the
    decode pool's router's pick now."""
    d = c.req.decode_at[rid]
    return d if d >= 0 else router.route(c, BACK, rid)
