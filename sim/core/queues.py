"""The queues an engine keeps, linked through the request table: first come, first served
within a priority level (level 0 first); a preempted request goes back to its level's front.
Column ``l`` of ``qhead``/``qtail`` is level ``l``'s queue; the last two columns are the
swapped-out requests and the requests waiting for room to receive their KV cache. Each engine
counts its queued requests and the KV blocks their prompts will take (a router weighs those)."""

from __future__ import annotations

from sim.core.jit import leaf
from sim.core.kvblocks import blocks_for
from sim.core.state import Counter


@leaf
def swapped_q(c):
    return c.qhead.shape[1] - 2


@leaf
def remote_q(c):
    return c.qhead.shape[1] - 1


@leaf
def _count(c, e, q):
    if q == c.qhead.shape[1] - 2:
        return Counter.NSWAP
    if q == c.qhead.shape[1] - 1:
        return Counter.NREMOTE
    return Counter.NWAIT


@leaf
def _queued_blocks(c, e, rid):
    return blocks_for(c, e, c.req.prompt_len[rid])


@leaf
def push_back(c, e, q, rid):
    r = c.req
    tail = c.qtail[e, q]
    r.qprev[rid] = tail
    r.qnext[rid] = -1
    if tail >= 0:
        r.qnext[tail] = rid
    else:
        c.qhead[e, q] = rid
    c.qtail[e, q] = rid
    c.counters[e, _count(c, e, q)] += 1
    c.counters[e, Counter.QUEUED_BLOCKS] += _queued_blocks(c, e, rid)


@leaf
def push_front(c, e, q, rid):
    r = c.req
    head = c.qhead[e, q]
    r.qnext[rid] = head
    r.qprev[rid] = -1
    if head >= 0:
        r.qprev[head] = rid
    else:
        c.qtail[e, q] = rid
    c.qhead[e, q] = rid
    c.counters[e, _count(c, e, q)] += 1
    c.counters[e, Counter.QUEUED_BLOCKS] += _queued_blocks(c, e, rid)


@leaf
def pop_front(c, e, q):
    r = c.req
    rid = c.qhead[e, q]
    nxt = r.qnext[rid]
    c.qhead[e, q] = nxt
    if nxt >= 0:
        r.qprev[nxt] = -1
    else:
        c.qtail[e, q] = -1
    r.qnext[rid] = -1
    c.counters[e, _count(c, e, q)] -= 1
    c.counters[e, Counter.QUEUED_BLOCKS] -= _queued_blocks(c, e, rid)
    return rid


@leaf
def first_waiting(c, e):
    """The waiting queue whose head is served next: the first non-empty level (-1: none)."""
    for q in range(c.qhead.shape[1] - 2):
        if c.qhead[e, q] >= 0:
            return q
    return -1
