"""The compiled loop: the SimPy loop's processes as one numba-compiled event loop.

Capacity planning runs thousands of simulations; a Python step loop spends tens of µs per
event. This loop takes the same events in SimPy's order (time, then creation), calls the same
core functions in the same order (sim/loops/simpy_loop.py tells the story), and prices each
step with the same pricing core, so its results are identical, bit for bit
(tests/sim/test_loops_agree.py). It returns to Python whenever the step log's chunk is full
or its event heap needs more room, and is called again to carry on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from sim.core import disagg, router
from sim.core.commit import begin_step, commit
from sim.core.jit import HAVE_NUMBA, entry, jit, leaf, struct
from sim.core.policies import schedule
from sim.core.state import (
    BACK,
    DONE,
    DROP_KV,
    FRONT,
    G_LOG_N,
    G_OUT_N,
    HANDOFF,
    LOG_ROWS,
    S_NREMOTE,
    SEND_KV,
    T_WAKE_AT,
    Core,
    core_ref,
)
from sim.pricing.costs import Costs, costs_ref, price
from sim.pricing.profiled import COUNTERS

# Events.
ARRIVAL, WAKE, STEP_END, TIMER, LANDED, SEND = range(6)
# Loop counters: k[...].
K_EID, K_HEAP_N, K_NEXT_RID, K_NEXT_SEND, K_STARTED, K_STEPS = range(6)
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


LoopType, LoopRef = struct("Loop", Loop._fields, __name__)


@entry
def _new_loop(*fields):
    return LoopRef(*fields)


def loop_ref(loop: Loop):
    return _new_loop(*loop) if HAVE_NUMBA else loop


def new_loop(engines: int, capacity: int, closed: tuple[int, float] | None) -> Loop:
    return Loop(np.zeros(capacity), np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.int64),
                np.zeros(capacity, dtype=np.int64), np.zeros(6, dtype=np.int64), np.zeros(1),
                np.zeros(engines, dtype=np.bool_), np.zeros(engines, dtype=np.bool_), np.full(engines, np.inf),
                np.zeros((engines, len(COUNTERS)), dtype=np.int64),
                np.array([closed[0], closed[1]] if closed else [0.0, 0.0]), np.zeros(0, dtype=np.bool_))


def grown(L: Loop) -> Loop:
    """The same loop with twice the heap."""
    def twice(a):
        b = np.zeros(2 * len(a), dtype=a.dtype)
        b[:len(a)] = a
        return b

    return L._replace(ht=twice(L.ht), he=twice(L.he), hk=twice(L.hk), hw=twice(L.hw))


# -- the event heap: (time, creation order) first -----------------------------------------------
@leaf
def _less(L, i, j):
    return L.ht[i] < L.ht[j] or (L.ht[i] == L.ht[j] and L.he[i] < L.he[j])


@leaf
def _swap(L, i, j):
    L.ht[i], L.ht[j] = L.ht[j], L.ht[i]
    L.he[i], L.he[j] = L.he[j], L.he[i]
    L.hk[i], L.hk[j] = L.hk[j], L.hk[i]
    L.hw[i], L.hw[j] = L.hw[j], L.hw[i]


@jit
def push(L, t, kind, who):
    i = L.k[K_HEAP_N]
    L.ht[i], L.he[i], L.hk[i], L.hw[i] = t, L.k[K_EID], kind, who
    L.k[K_EID] += 1
    L.k[K_HEAP_N] = i + 1
    while i > 0:
        parent = (i - 1) // 2
        if not _less(L, i, parent):
            break
        _swap(L, i, parent)
        i = parent


@jit
def pop(L):
    """Remove the first event; returns (time, kind, who)."""
    t, kind, who = L.ht[0], L.hk[0], L.hw[0]
    n = L.k[K_HEAP_N] - 1
    L.k[K_HEAP_N] = n
    if n:
        L.ht[0], L.he[0], L.hk[0], L.hw[0] = L.ht[n], L.he[n], L.hk[n], L.hw[n]
        i = 0
        while True:
            a, b, m = 2 * i + 1, 2 * i + 2, i
            if a < n and _less(L, a, m):
                m = a
            if b < n and _less(L, b, m):
                m = b
            if m == i:
                break
            _swap(L, i, m)
            i = m
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
def turn(c, costs, L, e, now):
    """SimpyCluster.engine, from the top of its loop to its next wait."""
    if c.es[e, S_NREMOTE]:
        disagg.admit_remote(c, e)
        act(c, L, now)
    pn = schedule(c, e, now)
    act(c, L, now)
    if pn:
        duration, flags = price(costs, e, c.shape[e])
        if flags:
            for b in range(L.extrap.shape[1]):
                if flags & (1 << b):
                    L.extrap[e, b] += 1
        push(L, now + begin_step(c, e, now, duration), STEP_END, e)
        return
    wake = c.ef[e, T_WAKE_AT]  # SimpyCluster.idle
    if np.isfinite(wake):
        at = now + max(wake - now, 0.0)
        if at < L.timer_at[e]:
            L.timer_at[e] = at
            push(L, at, TIMER, e)
    L.listening[e] = True
    L.waking[e] = False


@jit
def arrivals(c, L, now):
    """SimpyCluster.arrivals, from one wait to the next."""
    planned = c.req.arrival
    n = planned.shape[0]
    while L.k[K_NEXT_RID] < n:
        rid = L.k[K_NEXT_RID]
        if planned[rid] > now:
            push(L, now + (planned[rid] - now), ARRIVAL, -1)
            return
        submit(c, L, rid, now)
        L.k[K_NEXT_RID] += 1


@entry
def run_events(c, costs, L, seats):
    """Take events until everyone is done, the step log's chunk is full, or the heap may run
    out of room. Returns why it stopped."""
    E = c.es.shape[0]
    if not L.k[K_STARTED]:
        L.k[K_STARTED] = 1
        for e in range(E):  # every engine starts, finds nothing to do and listens
            turn(c, costs, L, e, 0.0)
        if L.closed[0] > 0:
            first = min(int(L.closed[0]), c.req.arrival.shape[0])
            for rid in range(first):
                push(L, 0.0, SEND, rid)
            L.k[K_NEXT_SEND] = first
        else:
            arrivals(c, L, 0.0)
    room = 2 * E + 4 * seats + 16  # the most events one event can add
    while L.k[K_HEAP_N]:
        if c.g[G_LOG_N] == LOG_ROWS:
            return LOG_FULL
        if L.k[K_HEAP_N] + room > L.ht.shape[0]:
            return HEAP_FULL
        now, kind, who = pop(L)
        L.now[0] = now
        if kind == STEP_END:
            commit(c, who, now, L.no_stop, False)
            L.k[K_STEPS] += 1
            act(c, L, now)
            turn(c, costs, L, who, now)
        elif kind == WAKE:
            L.waking[who] = False
            L.listening[who] = False
            turn(c, costs, L, who, now)
        elif kind == ARRIVAL:
            arrivals(c, L, now)
        elif kind == SEND:
            submit(c, L, who, now)
        elif kind == TIMER:
            if now == L.timer_at[who]:
                L.timer_at[who] = np.inf
            notify(L, who, now)
        else:  # LANDED: a KV cache has arrived
            src = c.req.source[who]
            disagg.release_source(c, who)
            notify(L, src, now)
            e = c.req.engine[who]
            disagg.kv_arrived(c, e, who, now)
            notify(L, e, now)
    return FINISHED


def run_compiled(core: Core, costs: Costs, closed: tuple[int, float] | None,
                 on_log_full: Callable[[Core], None], progress: Callable[[int], None] | None = None) -> Loop:
    """Simulate every request of ``core`` with the compiled loop. ``on_log_full`` takes each full
    chunk of the step log; ``progress`` hears how many requests have arrived, now and then."""
    E = core.es.shape[0]
    seats = core.p_ids.shape[1]
    L = new_loop(E, 4 * (2 * E + 4 * seats + 16) + (closed[0] if closed else 0), closed)
    c, cost_ref, ref = core_ref(core), costs_ref(costs), loop_ref(L)
    while True:
        why = run_events(c, cost_ref, ref, seats)
        if why == HEAP_FULL:
            L = grown(L)
            ref = loop_ref(L)
        elif why == LOG_FULL:
            on_log_full(core)
        if progress is not None:
            progress(int(L.k[K_NEXT_RID] if not closed else L.k[K_NEXT_SEND]))
        if why == FINISHED:
            return L


def compiled_this_process() -> bool:
    """Whether this process had to compile the loop (no usable cached build)."""
    return sum(run_events.stats.cache_misses.values()) > 0 if hasattr(run_events, "stats") else False
