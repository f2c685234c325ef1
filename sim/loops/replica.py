"""A replica's step loop, as a SimPy process.

It reads like the story it tells: ask the policy for a plan, let the executor say how long
the step takes, wait that long, commit the outcome. One SimPy event per step, or one per run
of identical decode steps when fast-forwarding.
"""

from __future__ import annotations

from heapq import heappush

import numpy as np
import simpy
from simpy.core import NORMAL

from sim.core.plan import BatchPlan
from sim.core.policies import Policy
from sim.core.requests import RequestTable, Status
from sim.loops.executor import Executor
from sim.loops.fastforward import DecodeRun, commit_run, decode_shapes, decode_step_times, plan_run
from sim.results.steplog import StepLog


def at(env: simpy.Environment, when: float) -> simpy.Event:
    """An event at the absolute time ``when``. (A timeout lands at ``now + delay``, whose
    rounding would make a fast-forwarded run drift from a stepped one by an ulp.)"""
    event = env.event()
    event._ok, event._value = True, None
    heappush(env._queue, (when, NORMAL, next(env._eid), event))
    return event


class Replica:
    """One serving instance (or, with pipeline parallelism, one of its virtual engines)."""

    def __init__(self, env: simpy.Environment, index: int, policy: Policy, executor: Executor,
                 table: RequestTable, log: StepLog, fast_forward: bool = False,
                 role: str = "colocated", pipeline: Pipeline | None = None):
        self.env, self.index = env, index
        self.policy, self.executor = policy, executor
        self.table, self.log = table, log
        self.role = role
        self.pipeline = pipeline
        self.cost = getattr(executor, "cost", None)  # fast-forward needs a vectorised cost model
        self.fast_forward = fast_forward and self.cost is not None and pipeline is None
        self.on_handoff = None  # prefill role: called with (replica, rid, step duration)
        self.on_remote = None  # decode role: called with (replica, rid) to start a KV transfer
        self.on_remote_rejected = None  # decode role: called with rid when it can never fit
        self._signal = env.event()
        self._listening = False  # idle, or in a decode run that an arrival may cut short
        self._run: DecodeRun | None = None  # the decode run under way
        self._run_length = 0  # steps it will have done when it ends
        self._cuttable = False  # whether an arrival may cut it short
        self._wake: simpy.Event | None = None  # the end of the run under way
        self._joined: list[float] = []  # when requests queued up during the run under way
        self.clock = None  # execute mode: wall time in simulation seconds (steps last as long)
        self.events = 0  # steps and fast-forwarded runs this replica waited on
        self.process = env.process(self.run())

    # -- what a router sees ------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Requests queued or running right now (mid-way through a decode run too)."""
        p, run = self.policy, self._run
        if run is None:
            running = p.running.size
        elif run.num_seqs[0] == run.num_seqs[-1]:
            running = int(run.num_seqs[0])
        else:
            running = int(run.num_seqs[run.step_at(self.env.now)])
        return p.queue_len + running + len(p.transferring)

    def kv_load(self) -> float:
        """Share of KV blocks in use right now (mid-way through a decode run too)."""
        blocks, run = self.policy.blocks, self._run
        used = blocks.used - blocks.evictable
        if run is not None:
            j = run.step_at(self.env.now)
            used += int(run.growth[j + 1] - run.freed[j])
        return used / max(blocks.num_blocks, 1)

    def submit(self, rid: int) -> None:
        self.table.replica[rid] = self.index
        self.policy.add(rid)
        if self._run is not None:
            self._joined.append(self.env.now)
            if not self._cuttable and self.policy.jumped_the_queue(rid):
                self._cut_run()  # a higher priority than everyone waiting: it may fit where they did not
        self.notify()

    def receive(self, rid: int) -> None:
        """A request prefilled elsewhere (decode role)."""
        self.table.replica[rid] = self.index
        self.policy.add_remote(rid)
        if self._run is not None:
            self._joined.append(self.env.now)
        self.notify()

    def notify(self) -> None:
        if self._listening and not self._signal.triggered:
            self._signal.succeed()
        elif self._run is not None and self._cuttable:
            self._cut_run()

    def _cut_run(self) -> None:
        """Something arrived mid-run that may join the batch: end the run at the first step
        boundary from now, by moving the run's waiting process onto an earlier event."""
        starts = self._run.starts
        m = max(1, int(starts[:-1].searchsorted(self.env.now, side="left")))
        if m < self._run_length:
            self._run_length = m
            cut = at(self.env, starts[m])
            cut.callbacks, self._wake.callbacks = self._wake.callbacks, []
            self._wake = cut

    # -- the step loop -----------------------------------------------------------------------
    def run(self):
        env, policy, t = self.env, self.policy, self.table
        while True:
            if policy.remote_waiting:
                admitted, rejected = policy.admit_remote()
                for rid in admitted:
                    self.on_remote(self, rid)
                for rid in rejected:
                    self.on_remote_rejected(rid)
            plan = policy.schedule(env.now)
            if plan is None:
                yield from self._sleep()
                continue
            start = env.now
            if self.fast_forward:
                run = plan_run(policy, plan)
                if run is not None:  # a pure decode: everyone in it was scheduled before
                    yield from self._decode_run(run)
                    continue
            fresh = plan.req_ids[np.isnan(t.first_scheduled[plan.req_ids])]
            t.first_scheduled[fresh] = start
            used, queued = policy.blocks.used, policy.queue_len
            result = self.executor.run(plan, t)
            duration = result.duration
            if self.clock is not None:  # real time: the step took what the wall clock says
                duration = max(duration, self.clock() - start)
            self.events += 1
            if self.pipeline is None:
                yield at(env, start + duration)
            else:
                yield from self.pipeline.pass_through(duration, plan.num_tokens)
                duration = env.now - start  # including the waits for busy stages
            done = policy.commit(plan, result.stopped)
            self._record(plan, start, duration, done, used, queued)
            if policy.handoffs:
                for rid in policy.handoffs:
                    self.on_handoff(self, rid, env.now - start)
                policy.handoffs.clear()

    def _listen(self) -> simpy.Event:
        self._listening = True
        if self._signal.triggered:
            self._signal = self.env.event()
        return self._signal

    def _sleep(self):
        """Idle until a request arrives (or a batching timeout passes, or blocks come back)."""
        signal = self._listen()
        if np.isfinite(self.policy.wake_at):
            yield signal | at(self.env, max(self.env.now, self.policy.wake_at))
        else:
            yield signal
        self._listening = False

    def _decode_run(self, run: DecodeRun):
        """A stretch of pure-decode steps as one event, cut short at the first step boundary
        after an arrival that could join the batch (see ``notify``)."""
        env, policy = self.env, self.policy
        run.durations = decode_step_times(self.cost, run.num_seqs, run.context)
        starts = run.starts = np.empty(run.k + 1)
        starts[0] = env.now
        starts[1:] = run.durations
        np.add.accumulate(starts, out=starts)  # left to right, as stepping adds them
        used, queued = policy.blocks.used, policy.queue_len
        self._run, self._run_length = run, run.k
        self._joined = []
        self._cuttable = policy.arrival_may_join()
        self._wake = at(env, starts[run.k])
        self.events += 1
        yield self._wake
        m = self._run_length
        self._run = None
        if m < run.k and hasattr(self.cost, "uncount"):  # cut short: its tail never ran
            self.cost.uncount(decode_shapes(run.num_seqs[m:], run.context[m:]))
        commit_run(policy, run, m)
        # Requests that queued up during the run (behind a blocked head, or a static batch;
        # with priorities, maybe ahead of those already waiting).
        if self._joined:
            queue_len = queued + np.searchsorted(np.asarray(self._joined), starts[:m], side="right")
        else:
            queue_len = queued
        seqs = run.num_seqs[:m]
        self.log.append(replica=self.index, start=starts[:m], duration=run.durations[:m], num_seqs=seqs,
                        num_tokens=seqs, prefill_tokens=0, decode_seqs=seqs,
                        kv_blocks_used=run.blocks_used(used)[:m], queue_len=queue_len)

    def _record(self, plan: BatchPlan, start: float, duration: float, done: np.ndarray,
                used: int, queued: int) -> None:
        t, now = self.table, self.env.now
        if self.role == "prefill":
            # Handed-over requests get their first token once their KV cache has moved.
            first = done[t.status[done] == Status.FINISHED]
        else:
            sampled = plan.req_ids[plan.samples]
            first = sampled[np.isnan(t.first_token[sampled])]
        t.first_token[first] = now
        if done.size:
            t.completion[done[t.status[done] == Status.FINISHED]] = now
        decodes = plan.num_decodes
        self.log.append_step(self.index, start, duration, plan.num_seqs, plan.num_tokens,
                             plan.num_tokens - decodes, decodes, used, queued)


class Pipeline:
    """The stages of a pipeline-parallel replica, shared by its virtual engines.

    A batch holds one stage at a time for its share of the step (the layers are split evenly)
    plus the hand-off of its activations to the next stage; while it moves on, the next
    micro-batch can enter. Uneven micro-batches leave stages idle: the bubbles show up as
    longer step times.
    """

    def __init__(self, env: simpy.Environment, stages: int, overhead_s: float,
                 hidden_bytes_per_token: float, link_bandwidth: float, link_latency: float = 5e-6):
        self.env = env
        self.stages = [simpy.Resource(env, capacity=1) for _ in range(stages)]
        self.overhead = overhead_s
        self.hidden_bytes = hidden_bytes_per_token
        self.link, self.latency = link_bandwidth, link_latency

    def pass_through(self, duration: float, tokens: int):
        pp = len(self.stages)
        per_stage = max(duration - self.overhead, 0.0) / pp
        send = tokens * self.hidden_bytes / self.link + self.latency
        for i, stage in enumerate(self.stages):
            with stage.request() as slot:
                yield slot
                extra = self.overhead if i == 0 else send
                yield self.env.timeout(per_stage + extra)


class PipelinedReplica:
    """A replica with pipeline parallelism: ``pp`` virtual engines (each with its own policy
    and a share of the KV blocks) feeding one pipeline, as vLLM runs it."""

    def __init__(self, index: int, engines: list[Replica]):
        self.index = index
        self.engines = engines
        self._next = 0

    @property
    def outstanding(self) -> int:
        return sum(e.outstanding for e in self.engines)

    def kv_load(self) -> float:
        return float(np.mean([e.kv_load() for e in self.engines]))

    def submit(self, rid: int) -> None:
        engine = self.engines[self._next]
        self._next = (self._next + 1) % len(self.engines)
        engine.submit(rid)

    def receive(self, rid: int) -> None:
        engine = min(self.engines, key=lambda e: e.outstanding)
        engine.receive(rid)
