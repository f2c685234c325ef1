"""The simulated cluster: SimPy processes for arrivals, a router and each replica's step loop.

A replica's loop reads like the story it tells: ask the policy for a plan, let the executor
say how long the step takes, wait that long, commit the outcome. One SimPy event per step.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush
from itertools import islice

import numpy as np
import simpy
from simpy.core import NORMAL

from sim.executor import Executor
from sim.fastforward import commit_run, decode_horizon, run_shapes
from sim.memory import BlockAllocator
from sim.plan import BatchPlan
from sim.policies import Policy, make_policy
from sim.requests import RequestTable, Status
from sim.steplog import StepLog


def at(env: simpy.Environment, when: float) -> simpy.Event:
    """An event at the absolute time ``when``. (A timeout lands at ``now + delay``, whose
    rounding would make a fast-forwarded run drift from a stepped one by an ulp.)"""
    event = env.event()
    event._ok, event._value = True, None
    heappush(env._queue, (when, NORMAL, next(env._eid), event))
    return event


class Replica:
    def __init__(self, env: simpy.Environment, index: int, policy: Policy, executor: Executor,
                 table: RequestTable, log: StepLog, fast_forward: bool = False):
        self.env, self.index = env, index
        self.policy, self.executor = policy, executor
        self.table, self.log = table, log
        self.cost = getattr(executor, "cost", None)  # fast-forward needs a vectorised cost model
        self.fast_forward = fast_forward and self.cost is not None
        self._signal = env.event()
        self._listening = False  # idle, or in a decode run that an arrival may cut short
        self.process = env.process(self.run())

    @property
    def outstanding(self) -> int:
        return self.policy.queue_len + self.policy.running.size

    def submit(self, rid: int) -> None:
        self.table.replica[rid] = self.index
        self.policy.add(rid)
        if self._listening and not self._signal.triggered:
            self._signal.succeed()

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
            if self.fast_forward:
                k, inc = decode_horizon(policy, plan)
                if k > 1:
                    yield from self._decode_run(plan, k, inc)
                    continue
            used, queued = policy.blocks.used, policy.queue_len
            result = self.executor.run(plan, t)
            yield at(env, start + result.duration)
            done = policy.commit(plan, result.stopped)
            self._record(plan, start, result.duration, done, used, queued)

    def _listen(self) -> simpy.Event:
        self._listening = True
        if self._signal.triggered:
            self._signal = self.env.event()
        return self._signal

    def _sleep(self):
        """Idle until a request arrives (or a batching timeout passes)."""
        signal = self._listen()
        if np.isfinite(self.policy.wake_at):
            yield signal | at(self.env, max(self.env.now, self.policy.wake_at))
        else:
            yield signal
        self._listening = False

    def _decode_run(self, plan: BatchPlan, k: int, inc: np.ndarray):
        """Up to ``k`` identical decode steps as one event, cut short at the first step
        boundary after an arrival that could join the batch."""
        env, policy = self.env, self.policy
        start = env.now
        durations = np.asarray(self.cost.step_time(run_shapes(plan, k)), dtype=np.float64)
        ends = np.add.accumulate(np.concatenate(([start], durations)))  # ends[j] = start of j
        used, queued = policy.blocks.used, policy.queue_len
        m = k
        finish = at(env, ends[k])
        if policy.arrival_may_join():
            yield finish | self._listen()
            self._listening = False
            if not finish.processed:  # an arrival: finish the step under way, then stop
                m = max(1, int(np.searchsorted(ends[:k], env.now, side="left")))
                yield at(env, ends[m])
        else:
            yield finish
        done = commit_run(policy, plan, m, inc, ends[1:])
        t = self.table
        t.completion[done] = env.now
        # Requests that queued up during the run (behind a blocked head, or a static batch).
        joined = t.arrival[list(islice(policy.waiting, queued, None))]
        n = plan.num_seqs
        self.log.append(replica=self.index, start=ends[:m], duration=durations[:m], num_seqs=n,
                        num_tokens=n, prefill_tokens=0, decode_seqs=n,
                        kv_blocks_used=used + np.cumsum(inc[:m]),
                        queue_len=queued + np.searchsorted(joined, ends[:m], side="right"))

    def _record(self, plan: BatchPlan, start: float, duration: float, done: np.ndarray,
                used: int, queued: int) -> None:
        t, now = self.table, self.env.now
        sampled = plan.req_ids[plan.samples]
        first = sampled[np.isnan(t.first_token[sampled])]
        t.first_token[first] = now
        t.completion[done] = now
        decode = plan.is_decode
        self.log.append(
            replica=self.index, start=start, duration=duration, num_seqs=plan.num_seqs,
            num_tokens=plan.num_tokens, prefill_tokens=int(plan.num_new_tokens[~decode].sum()),
            decode_seqs=int(decode.sum()), kv_blocks_used=used, queue_len=queued)


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
                    executor_factory(i), table, self.log,
                    fast_forward=scenario.simulation.fast_forward)
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
