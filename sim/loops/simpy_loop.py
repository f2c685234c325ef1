"""The SimPy loop: the reference, and the real-time driver of ``servesim execute`` / ``validate``.

It tells the story with SimPy processes. Requests arrive (at their times, or — closed loop —
when a user's previous request is done and they have thought it over) and a router sends each
to a replica. Each engine loops: plan a step (the scheduling core), let its executor say how
long the step takes (a cost model's price, or a real engine's wall time), wait that long,
commit the step. With disaggregation a prefilled request is handed to a decode replica, which
makes room for its KV cache; the cache then travels over the link. Every decision is a call
into the core's handlers (sim/core/handlers.py), the same the compiled loop calls, and their
effects become SimPy events here in the order the compiled loop pushes them, so both loops
give the same results; this file only keeps the clock. One SimPy event per step.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from sim.core.calls import CoreCalls
from sim.core.handlers import ARRIVAL, PRICED, SEND, STEP_END, WAKE
from sim.core.lockstep import engine_groups
from sim.core.plan import Executor
from sim.core.requests import RequestTable
from sim.core.state import LOG_ROWS, Core, Counter, Replica, RunCounter
from sim.pricing.links import pipelined_seconds, transfer_seconds


class SimpyCluster:
    """The cluster's processes over a core; ``executors[e]`` runs engine e's steps."""

    def __init__(self, env: simpy.Environment, core: Core, table: RequestTable, executors: list[Executor],
                 *, clock: Callable[[], float] | None = None,
                 on_log_full: Callable[[Core], None] | None = None,
                 on_arrival: Callable[[int], None] | None = None):
        self.env, self.c, self.table = env, core, table
        self.core = CoreCalls(core)
        self.executors = executors
        self.clock = clock  # execute: wall time in simulation seconds (a step lasts what it took)
        self.on_log_full = on_log_full
        self.on_arrival = on_arrival
        self.signal = [env.event() for _ in executors]
        self.steps = 0
        self.group = engine_groups(core)  # each engine's attention DP replica, or -1
        for e in range(len(executors)):
            if self.group[e] < 0:
                env.process(self.engine(e))
            else:  # an attention DP rank: its replica's ranks step together, on callbacks (no process)
                env.timeout(0.0).callbacks.append(lambda _, e=e: self._group_turn(self.group[e]))
        env.timeout(0.0).callbacks.append(lambda _: self._start())  # traffic starts after the engines

    def _start(self) -> None:
        self.core.start(self.env.now)
        self.apply()

    # -- effects onto SimPy's clock ----------------------------------------------------------
    def apply(self) -> float | None:
        """Turn the handlers' effects into SimPy events, in order: a wake-up into the engine's
        signal, the rest into timeouts that hand the event back to the core. Returns how long a
        step a turn started lasts (the engine's process waits for it), or None."""
        step = None
        for kind, who, delay in self.core.effects():
            if kind == STEP_END:
                step = delay
            elif kind == WAKE and self.group[who] >= 0:  # the rank's replica takes its turn, if not stepping
                self.env.timeout(0.0).callbacks.append(lambda _, who=who: self._group_woken(who))
            elif kind == WAKE:
                self.signal[who].succeed()
            else:
                if delay == PRICED:
                    delay = transfer_seconds(self.core.ref, who, self.env.now)
                self.env.timeout(delay).callbacks.append(lambda _, kind=kind, who=who: self._handle(kind, who))
        return step

    def _handle(self, kind: int, who: int) -> None:
        self.core.handle(kind, who, self.env.now)
        self.apply()
        if self.on_arrival is not None and kind in (ARRIVAL, SEND):
            self.on_arrival(int(self.c.run_counters[RunCounter.NEXT_RID if kind == ARRIVAL else RunCounter.NEXT_SEND]))

    # -- attention DP ranks (sim/core/lockstep.py): the compiled loop's order, on callbacks -------
    def _group_woken(self, e: int) -> None:
        self.core.woken(e)
        self._group_turn(self.group[e])

    def _group_turn(self, r: int) -> None:
        c, core, now = self.c, self.core, self.env.now
        if not c.replicas[r, Replica.BUSY] and core.group_turn(r, now):
            first, count = int(c.replicas[r, Replica.FIRST]), int(c.replicas[r, Replica.COUNT])
            planned = [x for x in range(first, first + count) if c.counters[x, Counter.PN] > 0]
            result = self.executors[first].run_group(c.shape[planned])
            core.start_group(r, now, result.duration)
        step = self.apply()
        if step is not None:
            self.env.timeout(step).callbacks.append(lambda _, r=r: self._group_step_end(r))

    def _group_step_end(self, r: int) -> None:
        c = self.c
        if c.run_counters[RunCounter.LOG_N] + c.replicas[r, Replica.COUNT] > LOG_ROWS and self.on_log_full is not None:
            self.on_log_full(c)
        self.steps += self.core.group_step_end(r, self.env.now)
        if c.run_counters[RunCounter.LOG_N] == LOG_ROWS and self.on_log_full is not None:
            self.on_log_full(c)
        self.apply()
        self._group_turn(r)

    # -- an engine ---------------------------------------------------------------------------
    def engine(self, e: int):
        env, core = self.env, self.core
        while True:
            result = None
            if core.turn(e, env.now):
                start = env.now
                result = self.executors[e].run(core.plan(e), self.table)
                duration = result.duration
                if self.clock is not None:  # real time: the step took what the wall clock says
                    duration = max(duration, self.clock() - start)
                core.start_step(e, start, pipelined_seconds(core.ref, e, start, duration))
            else:  # it sleeps until woken (a request, a batching timer, KV space coming back)
                self.signal[e] = env.event()
            step = self.apply()
            if step is None:
                yield self.signal[e]
                core.woken(e)
                continue
            yield env.timeout(step)
            core.step_end(e, env.now, result.stopped)
            self.steps += 1
            if self.c.run_counters[RunCounter.LOG_N] == LOG_ROWS and self.on_log_full is not None:
                self.on_log_full(self.c)
            self.apply()
