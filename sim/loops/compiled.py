"""The compiled loop: the SimPy loop's processes as one numba-compiled event loop.

Capacity planning runs thousands of simulations; a Python step loop spends tens of µs per
event. This loop takes the same events in SimPy's order (time, then creation), calls the same
handlers (sim/core/handlers.py) and turns their effects into events the same way
(sim/loops/events.py), and prices each step with the same pricing core, so its results are
identical, bit for bit (tests/sim/loops/test_loops_agree.py). Where nothing can change a batch of
decodes for a while, it commits those steps in one go (sim/loops/decode_runs.py), with the
same results. It returns to Python whenever the step log's chunk is full or its event heap
needs more room, and is called again to carry on.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.core import handlers, lockstep
from sim.core.handlers import STEP_END, WAKE
from sim.core.jit import entry
from sim.core.state import DECODE, LOG_ROWS, Core, Replica, RunCounter, Scale, Setting, core_ref
from sim.loops.decode_runs import decode_run, steady
from sim.loops.events import (
    FINISHED,
    HEAP_FULL,
    K_HEAP_N,
    K_STARTED,
    K_STEPS,
    LOG_FULL,
    Loop,
    apply,
    engine_turn,
    grown,
    horizon,
    loop_ref,
    new_loop,
    pop,
    push,
    turn,
)
from sim.pricing.costs import Costs, costs_ref


@entry
def run_events(c, costs, L, seats, group):
    """Take events until everyone is done, the step log's chunk has no room for the largest
    step end (``group``: the most rows one commits, an attention DP replica's ranks), or the
    heap may run out of room. Returns why it stopped."""
    E = c.counters.shape[0]
    if not L.k[K_STARTED]:
        L.k[K_STARTED] = 1
        for e in range(E):  # every engine starts, finds nothing to do and listens
            turn(c, costs, L, e, 0.0)
        handlers.start(c, 0.0)
        apply(c, L, 0.0)
    room = 2 * E + 4 * seats * group + 16  # the most events one event can add (a group's ranks all commit)
    while L.k[K_HEAP_N]:
        if c.run_counters[RunCounter.LOG_N] + group > LOG_ROWS:
            return LOG_FULL
        if L.k[K_HEAP_N] + room > L.ht.shape[0]:
            return HEAP_FULL
        now, kind, who = pop(L)
        L.now[0] = now
        if kind == STEP_END:
            r = lockstep.group_of(c, who)
            if r >= 0:
                L.k[K_STEPS] += lockstep.group_step_end(c, r, now, L.no_stop, False)
            else:
                handlers.step_end(c, who, now, L.no_stop, False)
                L.k[K_STEPS] += 1
            end = engine_turn(c, costs, L, who, now)
            if end >= 0.0 and steady(c, who, now):  # jump over decode steps nothing can change
                end = decode_run(c, costs, L, who, now, end, horizon(c, L, who))
            if end >= 0.0:
                push(L, end, STEP_END, who)
        elif kind == WAKE:
            handlers.woken(c, who)
            turn(c, costs, L, who, now)
        else:
            handlers.handle(c, kind, who, now)
            apply(c, L, now)
    return FINISHED


def run_compiled(core: Core, costs: Costs, closed: tuple[int, float] | None,
                 on_log_full: Callable[[Core], None], progress: Callable[[int], None] | None = None) -> Loop:
    """Simulate every request of ``core`` with the compiled loop. ``on_log_full`` takes each full
    chunk of the step log; ``progress`` hears how many requests have arrived, now and then."""
    E = core.counters.shape[0]
    seats = core.p_ids.shape[1]
    # an autoscaler reads the engines between arrivals: decode runs stop at its ticks; KV tiers'
    # loads land between them, and a shared store is written by every engine
    apart = (closed is None and not (core.replicas[:, Replica.ROLE] == DECODE).any() and not core.scale[Scale.ON]
             and not core.settings[:, Setting.TIERS].any())
    group = lockstep.largest_group(core)
    L = new_loop(E, 4 * (2 * E + 4 * seats * group + 16) + (closed[0] if closed else 0), apart)
    c, cost_ref, ref = core_ref(core), costs_ref(costs), loop_ref(L)
    while True:
        why = run_events(c, cost_ref, ref, seats, group)
        if why == HEAP_FULL:
            L = grown(L)
            ref = loop_ref(L)
        elif why == LOG_FULL:
            on_log_full(core)
        if progress is not None:
            progress(int(core.run_counters[RunCounter.NEXT_SEND if closed else RunCounter.NEXT_RID]))
        if why == FINISHED:
            return L


def compiled_this_process() -> bool:
    """Whether this process had to compile the loop (no usable cached build)."""
    return sum(run_events.stats.cache_misses.values()) > 0 if hasattr(run_events, "stats") else False
