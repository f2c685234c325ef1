"""The compiled loop's events and processes: its state (``Loop``), the event heap (time, then
creation order, as SimPy orders events), and the SimPy loop's processes restated as handlers —
an engine's turn (``plan``), the arrivals, the outbox (``act``) — each calling the same core
functions in the same order as sim/loops/simpy_loop.py does."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.core import disagg, router
from sim.core.commit import begin_step
from sim.core.jit import HAVE_NUMBA, entry, jit, leaf, struct
from sim.core.policies import schedule
from sim.core.state import (
    BACK,
    DONE,
    DROP_KV,
    FRONT,
    G_OUT_N,
    HANDOFF,
    P_REPLICA,
    ROUND_ROBIN,
    RT_COUNT,
    RT_FIRST,
    RT_KIND,
    RT_TURN,
    S_NREMOTE,
    SEND_KV,
    T_WAKE_AT,
)
from sim.pricing.costs import price
from sim.pricing.profiled import COUNTERS

# Events.
ARRIVAL, WAKE, STEP_END, TIMER, LANDED, SEND = range(6)
# Loop counters: k[...].
K_EID, K_HEAP_N, K_NEXT_RID, K_NEXT_SEND, K_STARTED, K_STEPS, K_JUMPED = range(7)
# Why the loop returned.
FINISHED, LOG_FULL, HEAP_FULL = range(3)


class Loop(NamedTuple):
    """The compiled loop's own state (kept across calls)."""

    ht: np.ndarray  # the event heap: time, creation order, kind, who
    he: np.ndarray
    hk: np.ndarray
    hw: np.ndarray
    k: np.ndarray  # counters (K_...)
    now: np.ndarray  # [1]
    listening: np.ndarray  # [E] bool
    waking: np.ndarray  # [E] bool: a wake-up is pending
    timer_at: np.ndarray  # [E] the earliest batching timer pending
    extrap: np.ndarray  # [E, len(COUNTERS)] steps a profile priced beyond its measured range
    closed: np.ndarray  # [2]: users (0: open loop), think time
    no_stop: np.ndarray  # [0] bool: simulated steps never stop a request early
    next_arrival: np.ndarray  # [1] when the pending arrival event is (inf: none)
    engines_apart: np.ndarray  # [1] bool: engines meet only at arrivals (open loop, colocated)


LoopType, LoopRef = struct("Loop", Loop._fields, __name__)


@entry
def _new_loop(*fields):
    return LoopRef(*fields)


def loop_ref(loop: Loop):
    return _new_loop(*loop) if HAVE_NUMBA else loop


def new_loop(engines: int, capacity: int, closed: tuple[int, float] | None, apart: bool) -> Loop:
    return Loop(np.zeros(capacity), np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.int64),
                np.zeros(capacity, dtype=np.int64), np.zeros(7, dtype=np.int64), np.zeros(1),
                np.zeros(engines, dtype=np.bool_), np.zeros(engines, dtype=np.bool_), np.full(engines, np.inf),
                np.zeros((engines, len(COUNTERS)), dtype=np.int64),
                np.array([closed[0], closed[1]] if closed else [0.0, 0.0]), np.zeros(0, dtype=np.bool_),
                np.full(1, np.inf), np.array([apart]))


def grown(L: Loop) -> Loop:
    """The same loop with twice the heap."""
    def twice(a):
        b = np.zeros(2 * len(a), dtype=a.dtype)
        b[:len(a)] = a
        return b

    return L._replace(ht=twice(L.ht), he=twice(L.he), hk=twice(L.hk), hw=twice(L.hw))


# -- the event heap: (time, creation order) first -----------------------------------------------
@leaf
def _before(L, i, t, eid):
    """Does heap entry i come before an event at (t, eid)?"""
    return L.ht[i] < t or (L.ht[i] == t and L.he[i] < eid)


@leaf
def _move(L, src, dst):
    L.ht[dst] = L.ht[src]
    L.he[dst] = L.he[src]
    L.hk[dst] = L.hk[src]
    L.hw[dst] = L.hw[src]


@jit
def push(L, t, kind, who):
    eid = L.k[K_EID]
    L.k[K_EID] = eid + 1
    i = L.k[K_HEAP_N]
    L.k[K_HEAP_N] = i + 1
    while i > 0:  # move parents down until the new event's place is found
        parent = (i - 1) // 2
        if _before(L, parent, t, eid):
            break
        _move(L, parent, i)
        i = parent
    L.ht[i] = t
    L.he[i] = eid
    L.hk[i] = kind
    L.hw[i] = who


@jit
def pop(L):
    """Remove the first event; returns (time, kind, who)."""
    t, kind, who = L.ht[0], L.hk[0], L.hw[0]
    n = L.k[K_HEAP_N] - 1
    L.k[K_HEAP_N] = n
    if n:
        last_t, last_eid = L.ht[n], L.he[n]
        i = 0
        while True:  # move children up until the last event's place is found
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and (L.ht[child + 1] < L.ht[child] or (
                    L.ht[child + 1] == L.ht[child] and L.he[child + 1] < L.he[child])):
                child += 1
            if not _before(L, child, last_t, last_eid):
                break
            _move(L, child, i)
            i = child
        _move(L, n, i)
    return t, kind, who


# -- the processes ---------------------------------------------------------------------------
@leaf
def notify(L, e, now):
    if L.listening[e] and not L.waking[e]:
        L.waking[e] = True
        push(L, now, WAKE, e)


@jit
def submit(c, L, rid, now):
    notify(L, router.submit(c, router.route(c, FRONT, rid), rid, now), now)


@jit
def act(c, L, now):
    """What the turn left to do (SimpyCluster.act)."""
    n = c.g[G_OUT_N]
    for i in range(n):
        rid, kind = c.out[i] >> 3, c.out[i] & 7
        if kind == DONE:
            if L.closed[0] > 0 and L.k[K_NEXT_SEND] < c.req.arrival.shape[0]:
                push(L, now + L.closed[1], SEND, L.k[K_NEXT_SEND])
                L.k[K_NEXT_SEND] += 1
        elif kind == HANDOFF:
            notify(L, router.receive(c, router.route(c, BACK, rid), rid), now)
        elif kind == SEND_KV:
            push(L, now + disagg.transfer_time(c, rid), LANDED, rid)
        elif kind == DROP_KV:
            disagg.release_source(c, rid)
            notify(L, c.req.source[rid], now)
    c.g[G_OUT_N] = 0


@jit
def priced(c, costs, L, e):
    """The planned step's computing time (its extrapolated profile counters counted)."""
    duration, flags = price(costs, e, c.shape[e])
    if flags:
        for b in range(L.extrap.shape[1]):
            if flags & (1 << b):
                L.extrap[e, b] += 1
    return duration


@jit
def plan(c, costs, L, e, now):
    """SimpyCluster.engine, from the top of its loop to its next wait: returns when the step it
    planned ends (the caller waits for it), or -1 when it sleeps."""
    if c.es[e, S_NREMOTE]:
        disagg.admit_remote(c, e)
        act(c, L, now)
    pn = schedule(c, e, now)
    act(c, L, now)
    if pn:
        return now + begin_step(c, e, now, priced(c, costs, L, e))
    wake = c.ef[e, T_WAKE_AT]  # SimpyCluster.idle
    if np.isfinite(wake):
        at = now + max(wake - now, 0.0)
        if at < L.timer_at[e]:
            L.timer_at[e] = at
            push(L, at, TIMER, e)
    L.listening[e] = True
    L.waking[e] = False
    return -1.0


@jit
def horizon(c, L, e):
    """The earliest time an event could change engine e: when engines meet only at arrivals, the
    next arrival that can reach it (behind a round-robin router, the next one routed to its
    replica; else any arrival); otherwise the next event of any kind."""
    if not L.engines_apart[0]:
        return L.ht[0] if L.k[K_HEAP_N] else np.inf
    count = c.rt[FRONT, RT_COUNT]
    if c.rt[FRONT, RT_KIND] != ROUND_ROBIN or count == 1:
        return L.next_arrival[0]
    offset = (c.ep[e, P_REPLICA] - c.rt[FRONT, RT_FIRST] - c.rt[FRONT, RT_TURN]) % count
    if offset == 0:
        return L.next_arrival[0]
    rid = L.k[K_NEXT_RID] + offset
    if rid >= c.req.arrival.shape[0]:
        return np.inf
    t = c.req.arrival[rid]  # planned; its event lands within an ulp of it: stop a little before
    return t - abs(t) * 1e-15


@jit
def turn(c, costs, L, e, now):
    end = plan(c, costs, L, e, now)
    if end >= 0.0:
        push(L, end, STEP_END, e)


@jit
def arrivals(c, L, now, due):
    """SimpyCluster.arrivals, from one wait to the next; ``due``: its wait has just ended (the
    request it waited for arrives now, even if rounding left now an ulp short of its time)."""
    planned = c.req.arrival
    n = planned.shape[0]
    while L.k[K_NEXT_RID] < n:
        rid = L.k[K_NEXT_RID]
        if planned[rid] > now and not due:
            L.next_arrival[0] = now + (planned[rid] - now)
            push(L, L.next_arrival[0], ARRIVAL, -1)
            return
        due = False
        submit(c, L, rid, now)
        L.k[K_NEXT_RID] += 1


