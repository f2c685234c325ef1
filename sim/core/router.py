"""Routers: which replica a new request goes to (and, with disaggregation, which decode replica
a prefilled one moves to), and which of a pipelined replica's virtual engines takes it.

- round-robin: in turn.
- least-outstanding: fewest requests queued, running or arriving (vLLM production-stack, JSQ).
- least-kv: lowest share of KV blocks in active use or promised to queued prompts, then fewest
  outstanding.
- power-of-two: two replicas drawn at random, the one with fewer outstanding requests wins.
- prefix-affinity: the replica that already holds the longest prefix of the request's prompt
  (as far as the router has seen: what it routed there, forgotten least recently used first, a
  prompt's tail before its head, like SGLang's cache-aware router's radix tree and llm-d's
  prefix scorer), unless that replica has more than ``balance_abs`` outstanding requests beyond
  the least loaded one; a prompt with no known prefix goes to the least loaded replica, or
  (``no_match: smallest-record``) to the one with the fewest prompt tokens routed there beyond
  the prefixes they matched, as SGLang's and vLLM's cache_aware routers send a miss to their
  radix tree's smallest tenant (the characters inserted for it).
Ties go to the lowest replica index.

Each reads the replicas' load through ``sim/core/router_signals.py``: exactly, or as last
sampled (``router.refresh_s``; the defaults and the real routers they follow:
``sim/scenario/schema.py: Router``). The prefix-affinity router's picture of the prefixes is its
own (what it routed), so it is always current; only its balance check reads the load.
"""

from __future__ import annotations

import numpy as np

from sim.core import blocktable as bt
from sim.core import queues
from sim.core.admission import WAITING
from sim.core.jit import jit
from sim.core.rng import ROUTER, bits
from sim.core.router_signals import engine_outstanding, routed, seen_kv, seen_outstanding
from sim.core.state import (
    LEAST_KV,
    LEAST_OUTSTANDING,
    POWER_OF_TWO,
    PREFIX_AFFINITY,
    ROUND_ROBIN,
    SHORTEST_QUEUE,
    SMALLEST_RECORD,
    Replica,
    Routing,
    RunCounter,
    RunTime,
    Setting,
)


@jit
def _least_outstanding(c, k, first, count):
    best, best_out = first, seen_outstanding(c, k, first)
    for r in range(first + 1, first + count):
        out = seen_outstanding(c, k, r)
        if out < best_out:
            best, best_out = r, out
    return best


@jit
def _prefix_match(c, r, rid):
    lo, hi = c.req.prefix_offsets[rid], c.req.prefix_offsets[rid + 1]
    return bt.leading_hits(c.rtable, r, c.req.prefix_ids, lo, hi)


@jit
def _smallest_record(c, k, first, count, bound):
    """The replica with the fewest prompt tokens recorded, among those with at most ``bound``
    outstanding requests (as the router sees them)."""
    r = -1
    for x in range(first, first + count):
        record = c.replicas[x, Replica.RECORD]
        if seen_outstanding(c, k, x) <= bound and (r < 0 or record < c.replicas[r, Replica.RECORD]):
            r = x
    return r


@jit
def route(c, k, rid):
    """The replica router ``k`` (FRONT or BACK) sends ``rid`` to."""
    first, count = c.routers[k, Routing.FIRST], c.routers[k, Routing.COUNT]
    kind = c.routers[k, Routing.KIND]
    if count == 1:
        r = first
    elif kind == LEAST_OUTSTANDING:
        r = _least_outstanding(c, k, first, count)
    elif kind == LEAST_KV:
        r, best_load, best_out = first, seen_kv(c, k, first), seen_outstanding(c, k, first)
        for x in range(first + 1, first + count):
            load, out = seen_kv(c, k, x), seen_outstanding(c, k, x)
            if load < best_load or (load == best_load and out < best_out):
                r, best_load, best_out = x, load, out
    elif kind == POWER_OF_TWO:
        h = bits(c.run_counters[RunCounter.SEED], ROUTER, rid, k)
        a = np.int64(h % np.uint64(count))
        b = (a + 1 + np.int64((h >> np.uint64(32)) % np.uint64(count - 1))) % count
        lo, hi = min(a, b), max(a, b)
        r = first + lo if seen_outstanding(c, k, first + lo) <= seen_outstanding(c, k, first + hi) else first + hi
    elif kind == PREFIX_AFFINITY:
        least = _least_outstanding(c, k, first, count)
        bound = seen_outstanding(c, k, least) + c.routers[k, Routing.BALANCE]
        r, best = least, 0
        if c.routers[k, Routing.NO_MATCH] == SMALLEST_RECORD:
            r = _smallest_record(c, k, first, count, bound)
        for x in range(first, first + count):
            if seen_outstanding(c, k, x) > bound:
                continue
            m = _prefix_match(c, x, rid)
            if m > best or (m == best and m > 0 and seen_outstanding(c, k, x) < seen_outstanding(c, k, r)):
                r, best = x, m
        # r now holds the prompt's blocks, as far as the router knows (it held the first `best`)
        bt.remember(c.rtable, r, c.req.prefix_ids, c.req.prefix_offsets[rid], c.req.prefix_offsets[rid + 1], best)
        block = c.settings[c.replicas[r, Replica.FIRST], Setting.BLOCK_SIZE]
        c.replicas[r, Replica.RECORD] += max(c.req.prompt_len[rid] - best * block, 0)
    elif kind == ROUND_ROBIN:
        r = first + c.routers[k, Routing.TURN]
        c.routers[k, Routing.TURN] = (c.routers[k, Routing.TURN] + 1) % count
    else:  # no other code: the scenario accepts only the names sim/vocab.py lists
        r = first
    routed(c, r, rid)
    return r


@jit
def submit(c, r, rid, now):
    """``rid`` arrives at replica ``r`` at ``now`` and waits at one of its engines (a
    pipelined replica's virtual engines take turns); its arrival is when it was sent, the API
    server's RunTime.FRONTEND before. Returns that engine."""
    first, count = c.replicas[r, Replica.FIRST], c.replicas[r, Replica.COUNT]
    e = first
    if count > 1 and c.replicas[r, Replica.BALANCE] == SHORTEST_QUEUE:  # attention DP: the least loaded rank
        e = least_loaded_engine(c, r)
    elif count > 1:
        e = first + c.replicas[r, Replica.TURN]
        c.replicas[r, Replica.TURN] = (c.replicas[r, Replica.TURN] + 1) % count
    req = c.req
    req.arrival[rid] = now - c.run_times[RunTime.FRONTEND]
    req.replica[rid] = r
    req.engine[rid] = e
    req.status[rid] = WAITING
    queues.push_back(c, e, req.level[rid], rid)
    return e


@jit
def least_loaded_engine(c, r):
    """Replica ``r``'s engine with the fewest requests waiting, running or on their way (ties: the first)."""
    first, count = c.replicas[r, Replica.FIRST], c.replicas[r, Replica.COUNT]
    e, best = first, engine_outstanding(c, first)
    for x in range(first + 1, first + count):
        out = engine_outstanding(c, x)
        if out < best:
            e, best = x, out
    return e


@jit
def receive(c, r, rid):
    """A request prefilled elsewhere waits at decode replica ``r`` (at its least loaded engine)
    for room to receive its KV cache. Returns that engine."""
    e = least_loaded_engine(c, r)
    req = c.req
    req.source[rid] = req.engine[rid]
    req.replica[rid] = r
    req.engine[rid] = e
    queues.push_back(c, e, queues.remote_q(c), rid)
    return e
