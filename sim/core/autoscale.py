"""Autoscaling: how many replicas serve, decided every ``interval_s`` (the TICK event,
sim/core/handlers.py), and what each replica is doing: OFF, PROVISIONING (a node starting and
the weights loading: it is paid for, it serves nothing), ACTIVE (the router sends to it) or
DRAINING (the router no longer sends to it; it finishes what it holds, then stops).

A tick first stops the draining replicas that hold nothing (at the end of their last step),
then asks the policy for a replica count:

- queue: ``ceil(active × mean waiting requests per active replica / target)`` (HPA's rule on a
  queue-depth metric such as vLLM's ``num_requests_waiting``);
- kv: the same on the mean KV utilisation of the active replicas (``router_signals.kv_load``);
- sla: ``ceil(forecast rate / (target × sustainable rate of one replica))``, an SLA planner
  (as Dynamo's) that forecasts the next interval's arrival rate from the last interval's
  (``last``) or its linear trend (``trend``) and sizes the fleet by the simulator's capacity
  model of one replica (sim/pricing/capacity.py, computed from the pricing before the run).

Like Kubernetes' HPA, the queue and kv policies leave the count alone within ``tolerance`` of
the target, and every recommendation is stabilised: the count rises to at most the lowest
recommendation of the last ``scale_up_stabilization_s`` and falls to at least the highest of
the last ``scale_down_stabilization_s``; then it is held within [min, max].

The replicas are used as a stack, so the ones serving or starting are always replicas
0 .. S-1: a scale-up takes the lowest replicas that are not (a draining one is active again at
once; an off one provisions), a scale-down lets go of the highest (one still provisioning is
cancelled, an active one drains). Replicas provisioned later are ready later, so the ACTIVE
ones are a leading run of that stack, and the front router chooses among them alone: its pool
is 0 .. (the first not ACTIVE) - 1 (``serve_active``). A replica reactivated above one still
provisioning waits for it before it is sent new requests. A replica that stops forgets its
prefix cache, and the router forgets what it sent there.
"""

from __future__ import annotations

import math

import numpy as np

from sim.core import blocktable as bt
from sim.core import tierstore
from sim.core.commit import queue_len
from sim.core.jit import jit, leaf
from sim.core.router_signals import engines_at_work, kv_load, outstanding
from sim.core.state import (
    ACTIVE,
    DRAINING,
    FRONT,
    KV,
    OFF,
    PROVISIONING,
    SLA,
    TREND,
    Clock,
    Counter,
    FleetTime,
    Replica,
    Routing,
    RunCounter,
    Scale,
    ScaleCounter,
    Setting,
)


@leaf
def log(c, t, r, state):
    """The fleet's log: replica r entered ``state`` at ``t``."""
    n = c.scale_n[ScaleCounter.LOG_N]
    if n < c.scale_log.shape[0]:
        c.scale_log[n, 0] = t
        c.scale_log[n, 1] = r
        c.scale_log[n, 2] = state
        c.scale_n[ScaleCounter.LOG_N] = n + 1
    else:
        c.scale_n[ScaleCounter.LOST] += 1


@leaf
def enter(c, r, state, t):
    c.fleet[r] = state
    c.fleet_t[r, FleetTime.SINCE] = t
    log(c, t, r, state)


@jit
def serve_active(c):
    """The front router's pool: the leading ACTIVE replicas (a round-robin turn past its end
    starts again from the first)."""
    n = 0
    while n < c.fleet.shape[0] and c.fleet[n] == ACTIVE:
        n += 1
    c.routers[FRONT, Routing.COUNT] = n
    if n > 0 and c.routers[FRONT, Routing.TURN] >= n:
        c.routers[FRONT, Routing.TURN] = c.routers[FRONT, Routing.TURN] % n


@jit
def last_step_end(c, r):
    """When replica r's last step ended (-inf: it never stepped)."""
    end = -np.inf
    first = c.replicas[r, Replica.FIRST]
    for e in range(first, first + c.replicas[r, Replica.COUNT]):
        t = c.clocks[e, Clock.START] + c.clocks[e, Clock.DURATION]
        if np.isfinite(t) and t > end:
            end = t
    return end


@jit
def forget(c, r):
    """Replica r stopped: its prefix cache is gone, and the router's picture of it."""
    first = c.replicas[r, Replica.FIRST]
    for e in range(first, first + c.replicas[r, Replica.COUNT]):
        c.counters[e, Counter.FREE] += bt.evict(c.cache, e, bt.unused(c.cache, e))
        tierstore.forget(c, e)
    bt.evict(c.rtable, r, bt.unused(c.rtable, r))


@jit
def settle(c):
    """Draining replicas that hold nothing stop, at the end of their last step (or when they
    began to drain, if later)."""
    for r in range(c.fleet.shape[0]):
        if c.fleet[r] == DRAINING and outstanding(c, r) == 0:
            enter(c, r, OFF, max(c.fleet_t[r, FleetTime.SINCE], last_step_end(c, r)))
            forget(c, r)


@jit
def recommend(c, active, serving):
    """The policy's replica count, before stabilisation."""
    s = c.scale
    if int(s[Scale.POLICY]) == SLA:
        arrived = c.run_counters[RunCounter.NEXT_RID]
        rate = (arrived - c.scale_n[ScaleCounter.ARRIVED]) / s[Scale.INTERVAL]
        c.scale_n[ScaleCounter.ARRIVED] = arrived
        ahead = rate
        if int(s[Scale.FORECAST]) == TREND and c.scale_n[ScaleCounter.REC_N] > 0:
            ahead = max(2.0 * rate - s[Scale.PREV_RATE], 0.0)
        s[Scale.PREV_RATE] = rate
        return math.ceil(ahead / (s[Scale.TARGET] * s[Scale.REPLICA_RATE]))
    if active == 0:
        return serving
    total = 0.0
    if int(s[Scale.POLICY]) == KV:
        for r in range(c.fleet.shape[0]):
            if c.fleet[r] == ACTIVE:
                total += kv_load(c, r)
    else:  # the requests waiting at the active replicas' engines
        for e in range(c.counters.shape[0]):
            if c.fleet[c.settings[e, Setting.REPLICA]] == ACTIVE:
                total += queue_len(c, e)
    ratio = total / active / s[Scale.TARGET]
    if abs(ratio - 1.0) <= s[Scale.TOLERANCE]:
        return serving
    return math.ceil(active * ratio)


@jit
def stabilised(c, now, rec, serving):
    """HPA's stabilisation of ``rec`` over the recent recommendations, then [min, max]."""
    s, recs = c.scale, c.scale_recs
    k = recs.shape[0]
    n = c.scale_n[ScaleCounter.REC_N]
    recs[n % k, 0] = now
    recs[n % k, 1] = rec
    c.scale_n[ScaleCounter.REC_N] = n + 1
    up, down = float(rec), float(rec)
    for j in range(min(n + 1, k)):
        t, x = recs[j, 0], recs[j, 1]
        if t >= now - s[Scale.UP_WINDOW]:
            up = min(up, x)
        if t >= now - s[Scale.DOWN_WINDOW]:
            down = max(down, x)
    desired = float(serving)
    if desired < up:
        desired = up
    if desired > down:
        desired = down
    return int(min(max(desired, s[Scale.MIN]), s[Scale.MAX]))


@jit
def tick(c, now):
    """An evaluation: stop the drained, size the fleet, start or let go of replicas. The
    replicas that began provisioning are those with ``fleet_t[r, SINCE] == now`` (the handler
    sets their READY)."""
    settle(c)
    R = c.fleet.shape[0]
    serving, active = 0, 0
    for r in range(R):
        if c.fleet[r] == ACTIVE or c.fleet[r] == PROVISIONING:
            serving += 1
        if c.fleet[r] == ACTIVE:
            active += 1
    desired = stabilised(c, now, recommend(c, active, serving), serving)
    for r in range(serving, desired):  # up: the lowest replicas not serving
        if c.fleet[r] == DRAINING:
            enter(c, r, ACTIVE, now)
        else:
            enter(c, r, PROVISIONING, now)
            c.fleet_t[r, FleetTime.READY_AT] = now + c.scale[Scale.READY_DELAY]
    for r in range(serving - 1, desired - 1, -1):  # down: the highest first
        if c.fleet[r] == PROVISIONING:
            enter(c, r, OFF, now)
            c.fleet_t[r, FleetTime.READY_AT] = np.inf
        else:
            enter(c, r, DRAINING, now)
    serve_active(c)


@jit
def ready(c, r, now):
    """Replica r's provisioning and cold start are over (unless it was cancelled since)."""
    if c.fleet[r] == PROVISIONING and c.fleet_t[r, FleetTime.READY_AT] == now:
        c.fleet_t[r, FleetTime.READY_AT] = np.inf
        enter(c, r, ACTIVE, now)
        serve_active(c)


@jit
def again(c):
    """Whether to evaluate again: requests are still to arrive, a replica is starting, or an
    engine is at work (``router_signals.engines_at_work``) — a fleet idle for good is left as it is."""
    if c.run_counters[RunCounter.NEXT_RID] < c.req.arrival.shape[0]:
        return True
    for r in range(c.fleet.shape[0]):
        if c.fleet[r] == PROVISIONING:
            return True
    return engines_at_work(c)
