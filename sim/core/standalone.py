"""One engine and its scheduler, stepped by hand with no clock but the caller's: the real
engine's offline generation, and tests that look at single scheduling decisions."""

from __future__ import annotations

import numpy as np

from sim.core.calls import CoreCalls
from sim.core.outbox import drain
from sim.core.plan import BatchPlan
from sim.core.requests import RequestTable, Status
from sim.core.state import Clock, Counter, EngineSpec, RunCounter, core_of


class Standalone:
    """``scheduler`` (a scenario's Scheduler section) over ``table``'s requests, with
    ``num_blocks`` KV blocks of ``block_size`` tokens."""

    def __init__(self, scheduler, table: RequestTable, num_blocks: int, block_size: int, max_model_len: int,
                 seed: int = 0):
        self.table = table
        self.core = core_of([EngineSpec(scheduler, num_blocks, block_size, max_model_len)], table, seed=seed)
        self.calls = CoreCalls(self.core)
        self.rejected: list[int] = []

    def add(self, rid: int, now: float = 0.0) -> None:
        self.calls.submit(rid, now)

    def schedule(self, now: float = 0.0) -> BatchPlan | None:
        n = self.calls.schedule(0, now)
        self._drain()
        return self.calls.plan(0) if n else None

    def commit(self, now: float = 0.0, stopped: np.ndarray | None = None) -> None:
        """The planned step ran (from ``now``, taking no simulated time)."""
        self.calls.begin_step(0, now, 0.0)
        self.calls.commit(0, now, stopped)
        self.core.run_counters[RunCounter.LOG_N] = 0
        self._drain()

    def _drain(self) -> None:
        for rid, _ in drain(self.core):
            if self.table.status[rid] == Status.REJECTED:
                self.rejected.append(rid)

    @property
    def has_work(self) -> bool:
        es = self.core.counters[0]
        return bool(es[Counter.NWAIT] + es[Counter.NRUN] + es[Counter.NSWAP])

    @property
    def wake_at(self) -> float:
        """When an idle engine should look again (a static batch's timeout), or inf."""
        return float(self.core.clocks[0, Clock.WAKE_AT])
