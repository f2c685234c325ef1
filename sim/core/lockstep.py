"""Attention data-parallel ranks step together.

A replica with ``hardware.dp_attention`` ranks runs one engine per rank in the core, each with
its own queue, scheduler limits and KV cache (the ranks' requests are their own: SGLang's and
TensorRT-LLM's attention DP). Every MoE layer sends each rank's tokens to the experts on all the
replica's GPUs and back, so the ranks cannot step apart: a step starts on every rank at once
(a rank with nothing to run joins idle, as the engines run a dummy batch) and ends when the
slowest is done. The loops call these instead of an engine's own turn and step end: the group
takes its turn when none of its steps is under way, the loop prices the planned ranks together
(sim/pricing/costs.price_group) and starts them with one duration, and the group's step end
commits every rank that stepped, in rank order.
"""

from __future__ import annotations

from sim.core.handlers import start_step, step_end, turn
from sim.core.jit import jit, leaf
from sim.core.state import Clock, Counter, Replica, Setting


@leaf
def group_of(c, e):
    """The replica whose attention DP ranks engine ``e`` is one of, or -1."""
    r = c.settings[e, Setting.REPLICA]
    return r if c.replicas[r, Replica.LOCKSTEP] else -1


@leaf
def busy(c, r):
    return c.replicas[r, Replica.BUSY] != 0


@jit
def group_turn(c, r, now):
    """Every rank of replica ``r`` plans its step (one with nothing to run sleeps until woken,
    as an engine does); returns how many planned one."""
    first = c.replicas[r, Replica.FIRST]
    n = 0
    for x in range(first, first + c.replicas[r, Replica.COUNT]):
        if turn(c, x, now):
            c.counters[x, Counter.LISTENING] = 0  # it steps with the others (a wake-up on its way finds it awake)
            n += 1
    return n


@jit
def start_group(c, r, now, duration):
    """The planned ranks' steps start at ``now`` and all last ``duration`` (priced together), or
    until the last blocks one of them loads layer by layer are here."""
    first = c.replicas[r, Replica.FIRST]
    last = first + c.replicas[r, Replica.COUNT]
    for x in range(first, last):
        until = c.clocks[x, Clock.LOAD_UNTIL]
        if c.counters[x, Counter.PN] > 0 and until > 0.0:
            duration = max(duration, until - now)
    for x in range(first, last):
        if c.counters[x, Counter.PN] > 0:
            c.counters[x, Counter.STEPPING] = 1
            start_step(c, x, now, duration)
    c.replicas[r, Replica.BUSY] = 1


@jit
def group_step_end(c, r, now, stopped, use_stopped):
    """The group's step ends: every rank that stepped commits, in rank order; returns how many."""
    first = c.replicas[r, Replica.FIRST]
    n = 0
    for x in range(first, first + c.replicas[r, Replica.COUNT]):
        if c.counters[x, Counter.STEPPING]:
            c.counters[x, Counter.STEPPING] = 0
            step_end(c, x, now, stopped, use_stopped)
            n += 1
    c.replicas[r, Replica.BUSY] = 0
    return n


def engine_groups(core) -> list[int]:
    """``group_of`` of every engine, for Python callers (the SimPy loop)."""
    replica = core.settings[:, Setting.REPLICA]
    return [int(r) if core.replicas[r, Replica.LOCKSTEP] else -1 for r in replica]


def largest_group(core) -> int:
    """The most engines one lockstep replica commits at one step end (1 where none): a loop keeps
    that many rows of the step log free before any event."""
    groups = core.replicas[core.replicas[:, Replica.LOCKSTEP] != 0, Replica.COUNT]
    return int(groups.max()) if len(groups) else 1
