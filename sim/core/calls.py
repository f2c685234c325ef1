"""The core's functions as Python calls (for the SimPy loop and the engine's generate).

Each call goes through one compiled entry point, ``_call``, so the core is compiled (and
cached) once for all of them, not once per function.
"""

from __future__ import annotations

import numpy as np

from sim.core import handlers, lockstep, router
from sim.core.commit import begin_step, commit
from sim.core.jit import entry
from sim.core.plan import BatchPlan
from sim.core.policies import schedule
from sim.core.requests import Status
from sim.core.state import FRONT, Core, Counter, RunCounter, Setting, core_ref

(SCHEDULE, BEGIN_STEP, COMMIT, SUBMIT, TURN, START_STEP, STEP_END, WOKEN, HANDLE, START, GROUP_TURN, START_GROUP,
 GROUP_STEP_END) = range(13)
_NO_STOP = np.zeros(0, dtype=np.bool_)


@entry
def _call(c, op, e, rid, now, x, stopped, use_stopped):
    if op == SCHEDULE:
        return float(schedule(c, e, now))
    if op == BEGIN_STEP:
        begin_step(c, e, now, x)
        return 0.0
    if op == COMMIT:
        commit(c, e, now, stopped, use_stopped)
        return 0.0
    if op == SUBMIT:
        return float(router.submit(c, router.route(c, FRONT, rid), rid, now))
    if op == TURN:
        return float(handlers.turn(c, e, now))
    if op == START_STEP:
        handlers.start_step(c, e, now, x)
    elif op == STEP_END:
        handlers.step_end(c, e, now, stopped, use_stopped)
    elif op == WOKEN:
        handlers.woken(c, e)
    elif op == HANDLE:
        handlers.handle(c, e, rid, now)
    elif op == START:
        handlers.start(c, now)
    elif op == GROUP_TURN:
        return float(lockstep.group_turn(c, e, now))
    elif op == START_GROUP:
        lockstep.start_group(c, e, now, x)
    elif op == GROUP_STEP_END:
        return float(lockstep.group_step_end(c, e, now, stopped, use_stopped))
    return 0.0


class CoreCalls:
    """A core, and what can be done to it."""

    def __init__(self, core: Core):
        self.c = core
        self.ref = core_ref(core)
        self.holding: list[set[int]] = [set() for _ in range(core.counters.shape[0])]  # given blocks in a plan

    def _do(self, op, e=0, rid=0, now=0.0, x=0.0, stopped=None) -> float:
        use = stopped is not None
        return _call(self.ref, op, e, rid, now, x, stopped if use else _NO_STOP, use)

    def schedule(self, e: int, now: float) -> int:
        """Plan engine e's next step; the number of rows (0: nothing to run)."""
        return int(self._do(SCHEDULE, e, now=now))

    def plan(self, e: int) -> BatchPlan:
        """Engine e's planned step as a BatchPlan, with the memory actions since its last one:
        requests whose blocks were freed (finished) or taken back (preempted)."""
        c = self.c
        n = int(c.counters[e, Counter.PN])
        ids = c.p_ids[e, :n].copy()
        r, held = c.req, self.holding[e]
        gone = [rid for rid in held if r.num_blocks[rid] == 0]
        held.difference_update(gone)
        held.update(ids.tolist())
        waiting = [rid for rid in gone if r.status[rid] == Status.WAITING]
        return BatchPlan(req_ids=ids, num_new_tokens=c.p_new[e, :n].copy(), num_computed=c.p_comp[e, :n].copy(),
                         samples=c.p_samp[e, :n].copy(), num_blocks=r.num_blocks[ids],
                         spec_tokens=int(c.settings[e, Setting.SPEC_K]),
                         freed=np.array(sorted(set(gone) - set(waiting)), dtype=np.int64),
                         preempted=np.array(sorted(waiting), dtype=np.int64),
                         swap_in_blocks=int(c.counters[e, Counter.SWAP_IN]),
                         swap_out_blocks=int(c.counters[e, Counter.SWAP_OUT]),
                         block_size=int(c.settings[e, Setting.BLOCK_SIZE]))

    def begin_step(self, e: int, now: float, duration: float) -> None:
        """The planned step starts (Standalone: no loop, no effects)."""
        self._do(BEGIN_STEP, e, now=now, x=duration)

    def commit(self, e: int, now: float, stopped: np.ndarray | None = None) -> None:
        self._do(COMMIT, e, now=now, stopped=_stops(stopped))

    def submit(self, rid: int, now: float) -> int:
        """Route a new request and queue it; returns the engine it waits at (no wake-up)."""
        return int(self._do(SUBMIT, rid=rid, now=now))

    # -- the handlers (sim/core/handlers.py): each leaves effects for ``effects``
    def turn(self, e: int, now: float) -> int:
        return int(self._do(TURN, e, now=now))

    def start_step(self, e: int, now: float, duration: float) -> None:
        self._do(START_STEP, e, now=now, x=duration)

    def step_end(self, e: int, now: float, stopped: np.ndarray | None = None) -> None:
        self._do(STEP_END, e, now=now, stopped=_stops(stopped))

    def woken(self, e: int) -> None:
        self._do(WOKEN, e)

    def handle(self, kind: int, who: int, now: float) -> None:
        self._do(HANDLE, kind, who, now)

    def start(self, now: float) -> None:
        self._do(START, now=now)

    # -- attention DP ranks, which step together (sim/core/lockstep.py); ``r`` is their replica
    def group_turn(self, r: int, now: float) -> int:
        return int(self._do(GROUP_TURN, r, now=now))

    def start_group(self, r: int, now: float, duration: float) -> None:
        self._do(START_GROUP, r, now=now, x=duration)

    def group_step_end(self, r: int, now: float) -> int:
        return int(self._do(GROUP_STEP_END, r, now=now))

    def effects(self) -> list[tuple[int, int, float]]:
        """The handlers' effects since the last call, in order: (kind, who, delay)."""
        c = self.c
        n = int(c.run_counters[RunCounter.FX_N])
        c.run_counters[RunCounter.FX_N] = 0
        return list(zip(c.fx[:n, 0].tolist(), c.fx[:n, 1].tolist(), c.fx_delay[:n].tolist(), strict=True))


def _stops(stopped: np.ndarray | None) -> np.ndarray | None:
    return None if stopped is None else np.ascontiguousarray(stopped, dtype=bool)
