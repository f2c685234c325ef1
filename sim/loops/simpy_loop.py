"""The SimPy loop: the reference, and the real-time driver of ``servesim execute`` / ``validate``.

It tells the story with SimPy processes. Requests arrive (at their times, or — closed loop —
when a user's previous request is done and they have thought it over) and a router sends each
to a replica. Each engine loops: plan a step (the scheduling core), let its executor say how
long the step takes (a cost model's price, or a real engine's wall time), wait that long,
commit the step. With disaggregation a prefilled request is handed to a decode replica, which
makes room for its KV cache; the cache then travels over the link. Every decision is a call
into the core (sim/core), the same functions the compiled loop calls, so both loops give the
same results; this file only keeps the clock. One SimPy event per step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from sim.core.calls import CoreCalls
from sim.core.outbox import drain
from sim.core.plan import Executor
from sim.core.requests import RequestTable
from sim.core.state import (
    DONE,
    DROP_KV,
    G_LOG_N,
    HANDOFF,
    LOG_ROWS,
    S_NREMOTE,
    SEND_KV,
    T_WAKE_AT,
    Core,
)


class SimpyCluster:
    """The cluster's processes over a core; ``executors[e]`` runs engine e's steps."""

    def __init__(self, env: simpy.Environment, core: Core, table: RequestTable, executors: list[Executor],
                 *, closed: tuple[int, float] | None = None, clock: Callable[[], float] | None = None,
                 on_log_full: Callable[[Core], None] | None = None,
                 on_arrival: Callable[[int], None] | None = None):
        self.env, self.c, self.table = env, core, table
        self.core = CoreCalls(core)
        self.executors = executors
        self.clock = clock  # execute: wall time in simulation seconds (a step lasts what it took)
        self.on_log_full = on_log_full
        self.on_arrival = on_arrival
        E = len(executors)
        self.signal = [env.event() for _ in range(E)]
        self.listening = [False] * E
        self.timer_at = [np.inf] * E  # the earliest batching timer pending at each engine
        self.steps = 0
        for e in range(E):
            env.process(self.engine(e))
        n = table.n
        if closed is None:
            self.think = None
            env.process(self.arrivals())
        else:
            users, self.think = closed
            self.next_send = min(users, n)
            for rid in range(self.next_send):  # every user sends its first request at once
                self._send_after(0.0, rid)

    # -- traffic -----------------------------------------------------------------------------
    def arrivals(self):
        """Open loop: requests arrive at their times, whatever happens to the earlier ones."""
        env, planned = self.env, self.table.arrival
        for rid in range(self.table.n):
            if planned[rid] > env.now:
                yield env.timeout(planned[rid] - env.now)
            self.submit(rid)

    def _send_after(self, delay: float, rid: int) -> None:
        self.env.timeout(delay).callbacks.append(lambda _: self.submit(rid))

    def submit(self, rid: int) -> None:
        self.notify(self.core.submit(rid, self.env.now))
        if self.on_arrival is not None:
            self.on_arrival(rid)

    # -- an engine ---------------------------------------------------------------------------
    def engine(self, e: int):
        env, c, core = self.env, self.c, self.core
        while True:
            if c.es[e, S_NREMOTE]:
                core.admit_remote(e)  # make room for KV caches coming from prefill replicas
                self.act()
            planned = core.schedule(e, env.now)
            self.act()  # requests it turned away are done
            if not planned:
                yield from self.idle(e)
                continue
            start = env.now
            plan = core.plan(e)
            result = self.executors[e].run(plan, self.table)
            duration = result.duration
            if self.clock is not None:  # real time: the step took what the wall clock says
                duration = max(duration, self.clock() - start)
            yield env.timeout(core.begin_step(e, start, duration))
            core.commit(e, env.now, result.stopped)
            self.steps += 1
            if c.g[G_LOG_N] == LOG_ROWS and self.on_log_full is not None:
                self.on_log_full(c)
            self.act()

    def idle(self, e: int):
        """Sleep until a request arrives (or a static batch's timeout, or KV space comes back)."""
        env, c = self.env, self.c
        wake = c.ef[e, T_WAKE_AT]
        if np.isfinite(wake):
            at = env.now + max(wake - env.now, 0.0)
            if at < self.timer_at[e]:
                self.timer_at[e] = at
                env.timeout(at - env.now).callbacks.append(lambda ev: self._timer(e, ev.env.now))
        self.listening[e] = True
        self.signal[e] = env.event()
        yield self.signal[e]
        self.listening[e] = False

    def _timer(self, e: int, now: float) -> None:
        if now == self.timer_at[e]:
            self.timer_at[e] = np.inf
        self.notify(e)

    def notify(self, e: int) -> None:
        if self.listening[e] and not self.signal[e].triggered:
            self.signal[e].succeed()

    # -- what a turn left to do --------------------------------------------------------------
    def act(self) -> None:
        c, env, core = self.c, self.env, self.core
        for rid, kind in drain(c):
            if kind == DONE:
                if self.think is not None and self.next_send < self.table.n:  # its user sends the next
                    self._send_after(self.think, self.next_send)
                    self.next_send += 1
            elif kind == HANDOFF:  # prefilled: on to a decode replica
                self.notify(core.hand_over(rid))
            elif kind == SEND_KV:
                env.timeout(core.transfer_time(rid)).callbacks.append(lambda ev, rid=rid: self._landed(rid))
            elif kind == DROP_KV:  # the decode pool can never hold it: free its prefill replica's copy
                core.release_source(rid)
                self.notify(int(c.req.source[rid]))

    def _landed(self, rid: int) -> None:
        """A KV cache has arrived: its prefill replica lets go, the request decodes here."""
        c = self.c
        self.core.release_source(rid)
        self.notify(int(c.req.source[rid]))
        e = int(c.req.engine[rid])
        self.core.kv_arrived(e, rid, self.env.now)
        self.notify(e)
