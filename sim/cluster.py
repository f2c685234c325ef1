"""The simulated cluster: SimPy processes for arrivals, a router and each replica's step loop.

A replica's loop reads like the story it tells: ask the policy for a plan, let the executor
say how long the step takes, wait that long, commit the outcome. One SimPy event per step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from sim.executor import Executor
from sim.memory import BlockAllocator
from sim.plan import BatchPlan
from sim.policies import Policy, make_policy
from sim.requests import RequestTable, Status
from sim.steplog import StepLog


class Replica:
    def __init__(self, env: simpy.Environment, index: int, policy: Policy, executor: Executor,
                 table: RequestTable, log: StepLog):
        self.env, self.index = env, index
        self.policy, self.executor = policy, executor
        self.table, self.log = table, log
        self._wakeup = env.event()
        self._idle = False
        self.process = env.process(self.run())

    @property
    def outstanding(self) -> int:
        return self.policy.queue_len + self.policy.running.size

    def submit(self, rid: int) -> None:
        self.table.replica[rid] = self.index
        self.policy.add(rid)
        if self._idle and not self._wakeup.triggered:
            self._wakeup.succeed()

    def run(self):
        env, policy, t = self.env, self.policy, self.table
        while True:
            plan = policy.schedule(env.now)
            if plan is None:
                yield from self._sleep()
                continue
            start = env.now
            fresh = plan.req_ids[np.isnan(t.first_scheduled[plan.req_ids])]
            t.first_scheduled[fresh] = start
            result = self.executor.run(plan, t)
            yield env.timeout(result.duration)
            done = policy.commit(plan, result.stopped)
            self._record(plan, start, result.duration, done)

    def _sleep(self):
        """Idle until a request arrives (or a batching timeout passes)."""
        self._idle = True
        wake = self._wakeup
        if np.isfinite(self.policy.wake_at):
            yield wake | self.env.timeout(max(0.0, self.policy.wake_at - self.env.now))
        else:
            yield wake
        self._idle = False
        if wake.triggered:
            self._wakeup = self.env.event()

    def _record(self, plan: BatchPlan, start: float, duration: float, done: np.ndarray) -> None:
        t, now = self.table, self.env.now
        sampled = plan.req_ids[plan.samples]
        first = sampled[np.isnan(t.first_token[sampled])]
        t.first_token[first] = now
        t.completion[done] = now
        decode = plan.is_decode
        self.log.append(
            replica=self.index, start=start, duration=duration, num_seqs=plan.num_seqs,
            num_tokens=plan.num_tokens, prefill_tokens=int(plan.num_new_tokens[~decode].sum()),
            decode_seqs=int(decode.sum()), kv_blocks_used=self.policy.blocks.used,
            queue_len=self.policy.queue_len)


class RoundRobin:
    def __init__(self, replicas: list[Replica]):
        self.replicas = replicas
        self._next = 0

    def pick(self, rid: int) -> Replica:
        r = self.replicas[self._next]
        self._next = (self._next + 1) % len(self.replicas)
        return r


class Cluster:
    """Replicas behind a router, fed by the workload's arrivals."""

    def __init__(self, env: simpy.Environment, scenario, table: RequestTable,
                 executor_factory: Callable[[int], Executor], log: StepLog | None = None):
        self.env, self.table = env, table
        self.log = log or StepLog()
        mem = scenario.memory
        self.replicas = [
            Replica(env, i,
                    make_policy(scenario.scheduler, table,
                                BlockAllocator(mem.num_blocks, mem.block_size),
                                scenario.model_spec.max_model_len),
                    executor_factory(i), table, self.log)
            for i in range(scenario.replicas)
        ]
        self.router = RoundRobin(self.replicas)
        self.on_arrival: Callable[[int], None] | None = None
        env.process(self.arrivals())

    def arrivals(self):
        env, arrival = self.env, self.table.arrival
        for rid in range(self.table.n):
            delay = arrival[rid] - env.now
            if delay > 0:
                yield env.timeout(delay)
            self.router.pick(rid).submit(rid)
            if self.on_arrival is not None:
                self.on_arrival(rid)

    def unfinished(self) -> np.ndarray:
        s = self.table.status
        return np.flatnonzero((s != Status.FINISHED) & (s != Status.REJECTED))
