"""What a router knows of the replicas' load: the exact state, or a sample of it.

A replica's load is two figures: its outstanding requests (queued, running, arriving) and its
KV load (the share of its KV blocks in active use or promised to queued prompts). A router that
counts the requests it sends has the first exactly; a router that reads the engines' metrics has
both only as its last scrape saw them. With ``router.refresh_s`` > 0 (``sim/scenario/schema.py:
Router``, which says which real routers do which and cites them) every REFRESH event samples
every replica (work: refreshes × replicas); the sample becomes the routers' picture at once, or
``router.delay_s`` later (a PUBLISH event; samples still on their way wait in ``pending``, one
slot each). Between samples a router that ``add_routed`` adds to the picture what it has sent
each replica since the sample was taken: one outstanding request and the prompt's KV blocks for
each; others see the sample alone. Refreshes stop when nothing is left to come: every request
is on its way to the front router and no engine has work, a step, a timer or a KV transfer under
way.

The compiled loop's decode runs stop before the next refresh (``sim/loops/events.py: horizon``),
so a sample reads the state stepping one by one leaves.
"""

from __future__ import annotations

import numpy as np

from sim.core.commit import queue_len
from sim.core.jit import jit, leaf
from sim.core.kvblocks import blocks_for
from sim.core.kvblocks import in_use as kv_in_use
from sim.core.state import (
    FRONT,
    Clock,
    Counter,
    Replica,
    RouterTime,
    Routing,
    RunCounter,
    RunTime,
    Setting,
    Signal,
)


@leaf
def engine_outstanding(c, e):
    return (queue_len(c, e) + c.counters[e, Counter.NRUN] + c.counters[e, Counter.NTRANSFER]
            + c.counters[e, Counter.NLOAD])


@jit
def outstanding(c, r):
    """Replica r's outstanding requests, exactly."""
    n = 0
    first = c.replicas[r, Replica.FIRST]
    for e in range(first, first + c.replicas[r, Replica.COUNT]):
        n += engine_outstanding(c, e)
    return n


@jit
def kv_load(c, r):
    """Share of KV blocks in active use (cached but unused ones are reclaimable) or promised to
    the queued requests' prompts, averaged over the replica's engines, exactly: a burst does not
    all go to the replica whose queue has not been admitted yet."""
    first = c.replicas[r, Replica.FIRST]
    k = c.replicas[r, Replica.COUNT]
    total = 0.0
    for e in range(first, first + k):
        used = kv_in_use(c, e) + c.counters[e, Counter.QUEUED_BLOCKS]
        total += used / max(c.settings[e, Setting.NUM_BLOCKS], 1)
    return total / k


# -- the picture a router decides on ------------------------------------------------------------
@leaf
def _sampled(c, k, r, value, routed, mark):
    """A sampled figure as router k sees it: plus what it routed since the sample, if it adds that."""
    s = c.signals[r]
    if c.routers[k, Routing.ADD_ROUTED]:
        return s[value] + s[routed] - s[mark]
    return s[value]


@jit
def seen_outstanding(c, k, r):
    """Replica r's outstanding requests as router k sees them."""
    if c.routers[k, Routing.SAMPLED]:
        return _sampled(c, k, r, Signal.OUT, Signal.ROUTED_OUT, Signal.MARK_OUT)
    return float(outstanding(c, r))


@jit
def seen_kv(c, k, r):
    """Replica r's KV load as router k sees it."""
    if c.routers[k, Routing.SAMPLED]:
        return _sampled(c, k, r, Signal.KV, Signal.ROUTED_KV, Signal.MARK_KV)
    return kv_load(c, r)


@jit
def routed(c, r, rid):
    """A router sent ``rid`` to replica r: counted, with the share of r's KV blocks its prompt takes."""
    first = c.replicas[r, Replica.FIRST]
    k = c.replicas[r, Replica.COUNT]
    blocks = 0
    for e in range(first, first + k):
        blocks += c.settings[e, Setting.NUM_BLOCKS]
    c.signals[r, Signal.ROUTED_OUT] += 1.0
    c.signals[r, Signal.ROUTED_KV] += blocks_for(c, first, c.req.prompt_len[rid]) / max(blocks, 1)


# -- sampling -----------------------------------------------------------------------------------
@jit
def sample(c):
    """Every replica's load now, into the next slot of samples on their way; returns the slot."""
    slot = c.routers[FRONT, Routing.SAMPLES] % c.pending.shape[0]
    c.routers[FRONT, Routing.SAMPLES] += 1
    for r in range(c.replicas.shape[0]):
        p = c.pending[slot, r]
        p[Signal.KV] = kv_load(c, r)
        p[Signal.OUT] = outstanding(c, r)
        p[Signal.MARK_KV] = c.signals[r, Signal.ROUTED_KV]
        p[Signal.MARK_OUT] = c.signals[r, Signal.ROUTED_OUT]
    return slot


@jit
def publish(c, slot):
    """The sample in ``slot`` becomes what the routers see."""
    for r in range(c.replicas.shape[0]):
        p, s = c.pending[slot, r], c.signals[r]
        s[Signal.KV] = p[Signal.KV]
        s[Signal.OUT] = p[Signal.OUT]
        s[Signal.MARK_KV] = p[Signal.MARK_KV]
        s[Signal.MARK_OUT] = p[Signal.MARK_OUT]


@jit
def more_to_come(c):
    """Can anything still change what a router decides: an arrival on its way, a closed-loop
    user's request sent but not yet at the front router, or an engine with work, a step, a
    wake-up, a batching timer or a KV transfer under way? (A request stuck in a queue no engine
    will ever admit is none of these.)"""
    first, count = c.routers[FRONT, Routing.FIRST], c.routers[FRONT, Routing.COUNT]
    sent = 0.0
    for r in range(first, first + count):
        sent += c.signals[r, Signal.ROUTED_OUT]
    if np.isfinite(c.run_times[RunTime.NEXT_ARRIVAL]) or c.run_counters[RunCounter.NEXT_SEND] > sent:
        return True
    return engines_at_work(c)


@jit
def engines_at_work(c):
    """Has any engine work, a step, a wake-up, a batching timer or a KV transfer under way? (The
    routers' refreshes and the autoscaler's ticks go on while one has.)"""
    for e in range(c.counters.shape[0]):
        s = c.counters[e]
        if (s[Counter.NRUN] or s[Counter.NREMOTE] or s[Counter.NTRANSFER] or s[Counter.WAKING]
                or not s[Counter.LISTENING] or np.isfinite(c.clocks[e, Clock.TIMER_AT])):
            return True
    return False


@leaf
def refresh_s(c):
    return c.router_times[RouterTime.REFRESH_S]


@leaf
def delay_s(c):
    return c.router_times[RouterTime.DELAY_S]
