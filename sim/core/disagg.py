"""Prefill/decode disaggregation (DistServe, Splitwise, Mooncake): a request prefilled on a
prefill replica moves its KV cache over a link to a decode replica, which first makes room for
it (``admit_remote``); once the cache has arrived (``kv_arrived``) the prefill replica lets
go of its copy and the request decodes where it landed. Its first token reaches the user then."""

from __future__ import annotations

from sim.core import kvblocks as kv
from sim.core import queues
from sim.core.admission import free_seats, join_running, never_fits, reject
from sim.core.commit import token_out
from sim.core.jit import jit
from sim.core.outbox import emit
from sim.core.state import DROP_KV, SEND_KV, Counter, Setting


@jit
def admit_remote(c, e):
    """Reserve blocks for prefilled requests waiting to move here (oldest first), so their KV
    cache can be sent; one that can never fit here is turned away."""
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
        need = kv.blocks_for(c, e, r.num_computed[rid] + 1 + c.settings[e, Setting.SPEC_K])
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

