"""The core's functions as Python calls (for the SimPy loop and the engine's generate).

Each call goes through one compiled entry point, ``_call``, so the core is compiled (and
cached) once for all of them, not once per function.
"""

from __future__ import annotations

import numpy as np

from sim.core import disagg, router
from sim.core.commit import begin_step, commit
from sim.core.jit import entry
from sim.core.plan import BatchPlan
from sim.core.policies import schedule
from sim.core.requests import Status
from sim.core.state import (
    BACK,
    FRONT,
    P_BLOCK_SIZE,
    P_SPEC_K,
    S_PN,
    S_SWAP_IN,
    S_SWAP_OUT,
    Core,
    core_ref,
)

SCHEDULE, BEGIN_STEP, COMMIT, ADMIT_REMOTE, SUBMIT, HAND_OVER, TRANSFER_TIME, RELEASE_SOURCE, KV_ARRIVED = range(9)
_NO_STOP = np.zeros(0, dtype=np.bool_)


@entry
def _call(c, op, e, rid, now, x, stopped, use_stopped):
    if op == SCHEDULE:
        return float(schedule(c, e, now))
    if op == BEGIN_STEP:
        return begin_step(c, e, now, x)
    if op == COMMIT:
        commit(c, e, now, stopped, use_stopped)
        return 0.0
    if op == ADMIT_REMOTE:
        disagg.admit_remote(c, e)
        return 0.0
    if op == SUBMIT:
        return float(router.submit(c, router.route(c, FRONT, rid), rid, now))
    if op == HAND_OVER:
        return float(router.receive(c, router.route(c, BACK, rid), rid))
    if op == TRANSFER_TIME:
        return disagg.transfer_time(c, rid)
    if op == RELEASE_SOURCE:
        disagg.release_source(c, rid)
        return 0.0
    disagg.kv_arrived(c, e, rid, now)
    return 0.0


class CoreCalls:
    """A core, and what can be done to it."""

    def __init__(self, core: Core):
        self.c = core
        self.ref = core_ref(core)
        self.holding: list[set[int]] = [set() for _ in range(core.es.shape[0])]  # given blocks in a plan

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
        n = int(c.es[e, S_PN])
        ids = c.p_ids[e, :n].copy()
        r, held = c.req, self.holding[e]
        gone = [rid for rid in held if r.num_blocks[rid] == 0]
        held.difference_update(gone)
        held.update(ids.tolist())
        waiting = [rid for rid in gone if r.status[rid] == Status.WAITING]
        return BatchPlan(req_ids=ids, num_new_tokens=c.p_new[e, :n].copy(), num_computed=c.p_comp[e, :n].copy(),
                         samples=c.p_samp[e, :n].copy(), num_blocks=r.num_blocks[ids],
                         spec_tokens=int(c.ep[e, P_SPEC_K]),
                         freed=np.array(sorted(set(gone) - set(waiting)), dtype=np.int64),
                         preempted=np.array(sorted(waiting), dtype=np.int64),
                         swap_in_blocks=int(c.es[e, S_SWAP_IN]), swap_out_blocks=int(c.es[e, S_SWAP_OUT]),
                         block_size=int(c.ep[e, P_BLOCK_SIZE]))

    def begin_step(self, e: int, now: float, duration: float) -> float:
        """The planned step starts; returns how long it lasts (pipeline waits included)."""
        return self._do(BEGIN_STEP, e, now=now, x=duration)

    def commit(self, e: int, now: float, stopped: np.ndarray | None = None) -> None:
        self._do(COMMIT, e, now=now, stopped=None if stopped is None else np.ascontiguousarray(stopped, dtype=bool))

    def admit_remote(self, e: int) -> None:
        self._do(ADMIT_REMOTE, e)

    def submit(self, rid: int, now: float) -> int:
        """Route a new request and queue it; returns the engine it waits at."""
        return int(self._do(SUBMIT, rid=rid, now=now))

    def hand_over(self, rid: int) -> int:
        """Route a prefilled request to a decode replica; returns the engine it waits at."""
        return int(self._do(HAND_OVER, rid=rid))

    def transfer_time(self, rid: int) -> float:
        return self._do(TRANSFER_TIME, rid=rid)

    def release_source(self, rid: int) -> None:
        self._do(RELEASE_SOURCE, rid=rid)

    def kv_arrived(self, e: int, rid: int, now: float) -> None:
        self._do(KV_ARRIVED, e, rid, now)
