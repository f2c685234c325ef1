"""The compiled loop's clock: its state (``Loop``), the event heap (time, then creation order,
as SimPy orders events), and the few functions that turn the core's handlers' effects
(sim/core/handlers.py) into events on it — an engine's turn with its step priced, and
``apply``. Nothing here decides anything: sim/loops/simpy_loop.py keeps the other clock over
the same handlers."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.core import handlers, lockstep
from sim.core.handlers import PRICED, STEP_END
from sim.core.jit import HAVE_NUMBA, entry, jit, leaf, struct
from sim.core.plan import SHAPE_SIZE
from sim.core.state import FRONT, ROUND_ROBIN, Counter, Replica, RouterTime, Routing, RunCounter, RunTime, Setting
from sim.pricing.costs import price, price_group
from sim.pricing.links import pipelined, transfer_time
from sim.pricing.profiled import COUNTERS

# Loop counters: k[...].
K_EID, K_HEAP_N, K_STARTED, K_STEPS, K_JUMPED = range(5)
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
    extrap: np.ndarray  # [E, len(COUNTERS)] steps a profile priced beyond its measured range
    no_stop: np.ndarray  # [0] bool: simulated steps never stop a request early
    engines_apart: np.ndarray  # [1] bool: engines meet only at arrivals (open loop, colocated)


LoopType, LoopRef = struct("Loop", Loop._fields, __name__)


@entry
def _new_loop(*fields):
    return LoopRef(*fields)


def loop_ref(loop: Loop):
    return _new_loop(*loop) if HAVE_NUMBA else loop


def new_loop(engines: int, capacity: int, apart: bool) -> Loop:
    return Loop(np.zeros(capacity), np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.int64),
                np.zeros(capacity, dtype=np.int64), np.zeros(5, dtype=np.int64), np.zeros(1),
                np.zeros((engines, len(COUNTERS)), dtype=np.int64), np.zeros(0, dtype=np.bool_), np.array([apart]))


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


# -- effects onto the heap -------------------------------------------------------------------
@jit
def apply(c, L, now):
    """Push the handlers' effects as events, in order; returns when the step a turn started
    ends (the caller pushes it, maybe after a decode run), or -1 if none did."""
    end = -1.0
    counters, fx, delays = c.run_counters, c.fx, c.fx_delay  # each read of a structure's field costs
    for i in range(counters[RunCounter.FX_N]):
        kind, who, delay = fx[i, 0], fx[i, 1], delays[i]
        if kind == STEP_END:
            end = now + delay
        else:
            push(L, now + (transfer_time(c, who, now) if delay == PRICED else delay), kind, who)
    counters[RunCounter.FX_N] = 0
    return end


@jit
def computing(c, costs, L, e):
    """The planned step's computing time (its extrapolated profile counters counted)."""
    duration, flags = price(costs, e, c.shape[e])
    if flags:
        for b in range(L.extrap.shape[1]):
            if flags & (1 << b):
                L.extrap[e, b] += 1
    return duration


@jit
def priced(c, costs, L, e, now):
    """The planned step's duration, pipeline waits included."""
    return pipelined(c, e, now, computing(c, costs, L, e))


@jit
def group_priced(c, costs, r):
    """The step attention DP replica ``r``'s planned ranks take together (sim/core/lockstep.py)."""
    first, count = c.replicas[r, Replica.FIRST], c.replicas[r, Replica.COUNT]
    shapes = np.empty((count, SHAPE_SIZE))
    n = 0
    for x in range(first, first + count):
        if c.counters[x, Counter.PN] > 0:
            shapes[n, :] = c.shape[x]
            n += 1
    duration, _ = price_group(costs, first, shapes, n)
    return duration


@jit
def engine_turn(c, costs, L, e, now):
    """Engine e's turn (its step priced and started); returns when that step ends, or -1 when
    the engine sleeps. An attention DP rank's turn is its replica's, unless their step is under
    way (then the rank steps with the others at its end)."""
    r = lockstep.group_of(c, e)
    if r >= 0:
        if not lockstep.busy(c, r) and lockstep.group_turn(c, r, now):
            lockstep.start_group(c, r, now, group_priced(c, costs, r))
    elif handlers.turn(c, e, now):
        handlers.start_step(c, e, now, priced(c, costs, L, e, now))
    return apply(c, L, now)


@jit
def turn(c, costs, L, e, now):
    end = engine_turn(c, costs, L, e, now)
    if end >= 0.0:
        push(L, end, STEP_END, e)


@jit
def horizon(c, L, e):
    """The earliest time an event could change engine e, or a router's sample read it: when
    engines meet only at arrivals, the next arrival that can reach it (behind a round-robin
    router, the next one routed to its replica; else any arrival) or the routers' next refresh;
    otherwise the next event of any kind."""
    if not L.engines_apart[0]:
        return L.ht[0] if L.k[K_HEAP_N] else np.inf
    return min(_arrival_horizon(c, L, e), c.router_times[RouterTime.NEXT_REFRESH])


@jit
def _arrival_horizon(c, L, e):
    count = c.routers[FRONT, Routing.COUNT]
    if c.routers[FRONT, Routing.KIND] != ROUND_ROBIN or count == 1:
        return c.run_times[RunTime.NEXT_ARRIVAL]
    offset = (c.settings[e, Setting.REPLICA] - c.routers[FRONT, Routing.FIRST] - c.routers[FRONT, Routing.TURN]) % count
    if offset == 0:
        return c.run_times[RunTime.NEXT_ARRIVAL]
    rid = c.run_counters[RunCounter.NEXT_RID] + offset
    if rid >= c.req.arrival.shape[0]:
        return np.inf
    # planned (and the API server's time); its event lands within an ulp of it: stop a little before
    t = c.req.arrival[rid] + c.run_times[RunTime.FRONTEND]
    return t - abs(t) * 1e-15
