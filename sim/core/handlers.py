"""The choreography, written once: what each event means to the core, and what it leaves for
the loop's clock.

A loop owns only a clock. It pops an event, calls its handler here, and turns the handler's
*effects* into events on its clock: the compiled loop (sim/loops/compiled.py) into heap
pushes, the SimPy loop (sim/loops/simpy_loop.py) into timeouts and signals. An effect is
data — (kind, who, delay): "wake engine e", "engine e's step ends after d", "request r
arrives after d", "r's user sends after its think time", "r's KV cache lands after its
transfer", "engine e's batching timer fires after d", "the routers sample the replicas' load
after d", "sample s becomes the routers' picture after d", "the autoscaler evaluates after d",
"replica r is ready after d", "r's blocks are back from the KV tiers after d" — left in the core's effects buffer
(``fx``) in the order the loops create their events, so both take them in the same order
(tests/sim/loops/test_loops_agree.py).

Two kinds are the engines' own: a WAKE resumes an engine that sleeps, a STEP_END ends its
step; the loop answers them with ``woken`` then ``turn`` and with ``step_end`` then ``turn``
(an engine's process). Every other kind is handed back to ``handle`` when its time comes, so
a new event kind is a constant, a handler and a case in ``handle`` — here, and in the module
of the decision it makes.

Pricing is the loop's (it is above the core): after ``turn`` plans a step the loop prices it
(a cost model, or a real engine's wall time) and calls ``start_step``; a KV cache's transfer
is priced by the loop when it takes a LANDED effect whose delay is ``PRICED``.
"""

from __future__ import annotations

import numpy as np

from sim.core import autoscale, disagg, kvtiers, router
from sim.core import router_signals as signals
from sim.core.commit import begin_step, commit
from sim.core.jit import jit, leaf
from sim.core.policies import schedule
from sim.core.state import (
    DONE,
    DROP_KV,
    FRONT,
    HANDOFF,
    LOAD_KV,
    PROVISIONING,
    SEND_KV,
    Clock,
    Counter,
    FleetTime,
    RouterTime,
    RunCounter,
    RunTime,
    Scale,
)

# Effects, and the events a loop makes of them.
WAKE, STEP_END, ARRIVAL, SEND, LANDED, TIMER, REFRESH, PUBLISH, TICK, READY, LOADED = range(11)
EVENT_KINDS = ("wake", "step_end", "arrival", "send", "landed", "timer", "refresh", "publish", "tick", "ready",
               "loaded")
PRICED = -1.0  # a LANDED effect's delay: the link's price, which the loop asks sim/pricing for


@leaf
def effect(c, kind, who, delay):
    n = c.run_counters[RunCounter.FX_N]
    c.fx[n, 0] = kind
    c.fx[n, 1] = who
    c.fx_delay[n] = delay
    c.run_counters[RunCounter.FX_N] = n + 1


@leaf
def wake(c, e):
    """Engine e has something new: wake it if it sleeps and no wake-up is on its way."""
    if c.counters[e, Counter.LISTENING] and not c.counters[e, Counter.WAKING]:
        c.counters[e, Counter.WAKING] = 1
        effect(c, WAKE, e, 0.0)


@jit
def react(c, now):
    """What an engine's turn left in the outbox (sim/core/outbox.py), in order: a finished
    request's user sends the next after thinking it over (closed loop); a prefilled request
    goes to a decode replica; a reserved KV cache starts its transfer; one the decode pool can
    never hold frees its prefill replica's copy."""
    out = c.out
    for i in range(c.run_counters[RunCounter.OUT_N]):
        rid, kind = out[i] >> 3, out[i] & 7
        if kind == DONE:
            if c.run_counters[RunCounter.USERS] > 0 and c.run_counters[RunCounter.NEXT_SEND] < c.req.arrival.shape[0]:
                effect(c, SEND, c.run_counters[RunCounter.NEXT_SEND],
                       c.run_times[RunTime.THINK] + c.run_times[RunTime.FRONTEND])
                c.run_counters[RunCounter.NEXT_SEND] += 1
        elif kind == HANDOFF:
            wake(c, router.receive(c, disagg.decode_replica(c, rid), rid))
        elif kind == SEND_KV:
            effect(c, LANDED, rid, PRICED)
        elif kind == DROP_KV:
            disagg.release_source(c, rid)
            wake(c, c.req.source[rid])
        elif kind == LOAD_KV:
            effect(c, LOADED, rid, max(c.req.ready_at[rid] - now, 0.0))
    c.run_counters[RunCounter.OUT_N] = 0


@jit
def turn(c, e, now):
    """An engine's turn: make room for KV caches coming from prefill replicas, plan a step, act
    on what that left. Returns the planned rows (the loop prices the step and calls
    ``start_step``), or 0: the engine sleeps until woken (or its batching timer fires)."""
    if c.counters[e, Counter.NREMOTE]:
        disagg.admit_remote(c, e)
        react(c, now)
    pn = schedule(c, e, now)
    react(c, now)
    if pn:
        return pn
    c.clocks[e, Clock.LOAD_UNTIL] = 0.0  # a load with no step to overlap is simply done
    wake_at = c.clocks[e, Clock.WAKE_AT]
    if np.isfinite(wake_at):
        delay = max(wake_at - now, 0.0)
        at = now + delay
        if at < c.clocks[e, Clock.TIMER_AT]:
            c.clocks[e, Clock.TIMER_AT] = at
            effect(c, TIMER, e, delay)
    c.counters[e, Counter.LISTENING] = 1
    c.counters[e, Counter.WAKING] = 0
    return 0


@jit
def start_step(c, e, now, duration):
    """Engine e's planned step starts at ``now`` and lasts ``duration`` (priced by the loop), or
    until the blocks it loads layer by layer are here (sim/core/kvtiers.py)."""
    until = c.clocks[e, Clock.LOAD_UNTIL]
    if until > 0.0:
        duration = max(duration, until - now)
        c.clocks[e, Clock.LOAD_UNTIL] = 0.0
    begin_step(c, e, now, duration)
    effect(c, STEP_END, e, duration)


@jit
def step_end(c, e, now, stopped, use_stopped):
    """Engine e's step ends: commit it (``stopped``: rows a real engine stopped; read when
    ``use_stopped``) and act on what it left. The engine's next turn follows."""
    commit(c, e, now, stopped, use_stopped)
    react(c, now)


@leaf
def woken(c, e):
    """Engine e is awake; its turn follows."""
    c.counters[e, Counter.LISTENING] = 0
    c.counters[e, Counter.WAKING] = 0


@jit
def submit(c, rid, now):
    """Request ``rid`` reaches the router, which queues it at a replica's engine (with selective
    disaggregation, at a decode replica that prefills it itself, or at a prefill replica)."""
    if c.run_counters[RunCounter.LOCAL_PREFILL] >= 0:
        d, local = disagg.decide(c, rid)
        if local:
            wake(c, router.submit(c, d, rid, now))
            return
    wake(c, router.submit(c, router.route(c, FRONT, rid), rid, now))


@jit
def arrivals(c, now, due):
    """Open loop: submit the requests due by ``now`` and set the next arrival's event (a request
    reaches the router RunTime.FRONTEND after its planned send). ``due``: the arrival event has
    just come (its request arrives now, even if rounding left ``now`` an ulp short of its time)."""
    planned = c.req.arrival
    n = planned.shape[0]
    front = c.run_times[RunTime.FRONTEND]
    while c.run_counters[RunCounter.NEXT_RID] < n:
        rid = c.run_counters[RunCounter.NEXT_RID]
        if planned[rid] + front > now and not due:
            delay = planned[rid] + front - now
            c.run_times[RunTime.NEXT_ARRIVAL] = now + delay
            effect(c, ARRIVAL, -1, delay)
            return
        due = False
        submit(c, rid, now)
        c.run_counters[RunCounter.NEXT_RID] += 1


@jit
def next_refresh(c, now):
    """The routers sample the replicas' load ``router.refresh_s`` from now."""
    delay = signals.refresh_s(c)
    c.router_times[RouterTime.NEXT_REFRESH] = now + delay
    effect(c, REFRESH, -1, delay)


@jit
def refresh(c, now):
    """The routers sample every replica's load (sim/core/router_signals.py); they see it now or
    ``router.delay_s`` later. The next refresh follows while anything is left to come."""
    slot = signals.sample(c)
    if signals.delay_s(c) > 0.0:
        effect(c, PUBLISH, slot, signals.delay_s(c))
    else:
        signals.publish(c, slot)
    c.router_times[RouterTime.NEXT_REFRESH] = np.inf
    if signals.more_to_come(c):
        next_refresh(c, now)


@jit
def start(c, now):
    """Traffic starts (after every engine's first turn): a closed loop's users each send their
    first request at once (it reaches the router RunTime.FRONTEND later); an open loop's requests
    arrive at their times. Routers that sample the
    replicas' load start from the idle fleet's and take the next sample ``refresh_s`` later."""
    if signals.refresh_s(c) > 0.0:
        next_refresh(c, now)
    users = c.run_counters[RunCounter.USERS]
    if users > 0:
        first = min(users, c.req.arrival.shape[0])
        for rid in range(first):
            effect(c, SEND, rid, c.run_times[RunTime.FRONTEND])
        c.run_counters[RunCounter.NEXT_SEND] = first
    else:
        arrivals(c, now, False)
    if c.scale[Scale.ON]:  # the autoscaler's first evaluation
        effect(c, TICK, -1, c.scale[Scale.INTERVAL])


@jit
def landed(c, rid, now):
    """Request ``rid``'s KV cache has arrived: its prefill replica lets go, it decodes here."""
    src = c.req.source[rid]
    disagg.release_source(c, rid)
    wake(c, src)
    e = c.req.engine[rid]
    disagg.kv_arrived(c, e, rid, now)
    wake(c, e)


@jit
def loaded(c, rid):
    """Request ``rid``'s blocks have come back from the KV tiers: it waits first in its queue."""
    e = c.req.engine[rid]
    kvtiers.loaded(c, e, rid)
    wake(c, e)


@jit
def timer(c, e, now):
    """Engine e's batching timer fires (a later one it set since stays pending)."""
    if now == c.clocks[e, Clock.TIMER_AT]:
        c.clocks[e, Clock.TIMER_AT] = np.inf
    wake(c, e)


@jit
def tick(c, now):
    """The autoscaler evaluates (sim/core/autoscale.py); each replica it starts is ready after
    its provisioning and cold start."""
    autoscale.tick(c, now)
    for r in range(c.fleet.shape[0]):
        if c.fleet[r] == PROVISIONING and c.fleet_t[r, FleetTime.SINCE] == now:
            effect(c, READY, r, c.scale[Scale.READY_DELAY])
    if autoscale.again(c):
        effect(c, TICK, -1, c.scale[Scale.INTERVAL])


@jit
def handle(c, kind, who, now):
    """An event other than the engines' own (WAKE, STEP_END) has come: its handler."""
    if kind == ARRIVAL:
        c.run_times[RunTime.NEXT_ARRIVAL] = np.inf
        arrivals(c, now, True)
    elif kind == SEND:
        submit(c, who, now)
    elif kind == LANDED:
        landed(c, who, now)
    elif kind == TIMER:
        timer(c, who, now)
    elif kind == REFRESH:
        refresh(c, now)
    elif kind == PUBLISH:
        signals.publish(c, who)
    elif kind == TICK:
        tick(c, now)
    elif kind == READY:
        autoscale.ready(c, who, now)
    elif kind == LOADED:
        loaded(c, who)
