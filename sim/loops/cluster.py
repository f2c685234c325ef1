"""The simulated cluster: arrivals, routers, replicas, and KV transfers between pools.

Colocated replicas sit behind one router. With disaggregation, the router sends new requests
to the prefill pool; after its first token a request's KV cache moves over the link to a
decode replica chosen by a second router, and its decodes run there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from sim.core.policies import make_policy
from sim.core.requests import RequestTable, Status
from sim.core.router import make_router
from sim.loops.executor import Executor
from sim.loops.replica import Pipeline, PipelinedReplica, Replica, at
from sim.results.steplog import StepLog
from sim.scenario.memory import BlockAllocator, GiB
from sim.scenario.schema import ReplicaSpec


class Cluster:
    def __init__(self, env: simpy.Environment, scenario, table: RequestTable,
                 executor_factory: Callable[[int], Executor], log: StepLog | None = None):
        self.env, self.scenario, self.table = env, scenario, table
        self.log = log or StepLog()
        seeds = np.random.SeedSequence([scenario.seed, 7]).spawn(len(scenario.replica_specs) + 2)
        self.replicas = [self._build(spec, executor_factory(spec.index), seeds[spec.index])
                         for spec in scenario.replica_specs]
        front = [r for r, s in zip(self.replicas, scenario.replica_specs, strict=True) if s.role != "decode"]
        back = [r for r, s in zip(self.replicas, scenario.replica_specs, strict=True) if s.role == "decode"]
        name = scenario.router.policy
        self.router = make_router(name, front, np.random.default_rng(seeds[-2]), table)
        self.decode_router = make_router(name, back, np.random.default_rng(seeds[-1]), table) if back else None
        self.kv_bytes_per_token = scenario.model_spec.kv_bytes_per_token(scenario.quantization.kv_cache)
        self._sources: dict[int, tuple[Replica, float]] = {}  # rid -> (prefill replica, its step)
        self.on_arrival: Callable[[int], None] | None = None
        env.process(self.arrivals())

    def _build(self, spec: ReplicaSpec, executor: Executor, seed) -> Replica | PipelinedReplica:
        s, hw, mem = self.scenario, spec.hardware, spec.memory
        host_blocks = int(hw.host_memory_gb * GiB // (mem.kv_bytes_per_token * mem.block_size))
        pp = hw.pp
        pipeline = None
        if pp > 1:
            model = s.model_spec
            pipeline = Pipeline(self.env, pp, s.cost.step_overhead_s,
                                model.hidden_size * 2 / hw.tp, spec.gpu.interconnect_bandwidth)
        engines = []
        for rng in np.random.default_rng(seed).spawn(pp):
            blocks = BlockAllocator(mem.num_blocks // pp, mem.block_size, spec.scheduler.prefix_caching)
            policy = make_policy(spec.scheduler, self.table, blocks, s.model_spec.max_model_len,
                                 rng=rng, host_blocks=host_blocks // pp,
                                 prefill_only=spec.role == "prefill")
            r = Replica(self.env, spec.index, policy, executor, self.table, self.log,
                        fast_forward=s.simulation.fast_forward, role=spec.role, pipeline=pipeline)
            r.on_handoff = self._handoff
            r.on_remote = self._start_transfer
            r.on_remote_rejected = self._drop_transfer
            engines.append(r)
        return engines[0] if pp == 1 else PipelinedReplica(spec.index, engines)

    def arrivals(self):
        env, arrival = self.env, self.table.arrival
        for rid in range(self.table.n):
            if arrival[rid] > env.now:
                yield at(env, arrival[rid])
            self.router.pick(rid).submit(rid)
            if self.on_arrival is not None:
                self.on_arrival(rid)

    # -- disaggregation ----------------------------------------------------------------------
    def _handoff(self, source: Replica, rid: int, step_duration: float) -> None:
        """A prefill replica finished a prompt: queue the request at a decode replica."""
        self._sources[rid] = (source, step_duration)
        self.decode_router.pick(rid).receive(rid)

    def transfer_time(self, rid: int, prefill_duration: float, source_tp: int) -> float:
        """Seconds to move a request's KV cache: bytes / bandwidth + latency. Each GPU of the
        prefill replica sends its shard over its own link. With layer-wise overlap the layers
        leave while later ones are still computed, so only what outlasts the prefill remains
        (at least the last layer's share)."""
        link = self.scenario.disaggregation.link
        nbytes = float(self.table.num_computed[rid]) * self.kv_bytes_per_token
        wire = nbytes / (link.bandwidth * source_tp)
        if link.layerwise_overlap:
            wire = max(wire - prefill_duration, wire / self.scenario.model_spec.num_layers)
        return wire + link.latency

    def _start_transfer(self, dest: Replica, rid: int) -> None:
        self.env.process(self._transfer(dest, rid))

    def _drop_transfer(self, rid: int) -> None:
        """The decode pool can never hold this request: free its prefill replica's copy."""
        source, _ = self._sources.pop(rid)
        source.policy.release_handoff(rid)
        source.notify()

    def _transfer(self, dest: Replica, rid: int):
        source, duration = self._sources.pop(rid)
        tp = self.scenario.replica_specs[source.index].hardware.tp
        yield self.env.timeout(self.transfer_time(rid, duration, tp))
        source.policy.release_handoff(rid)
        source.notify()  # its blocks are free again
        dest.policy.kv_arrived(rid)
        self.table.first_token[rid] = self.env.now
        dest.notify()

    def unfinished(self) -> np.ndarray:
        s = self.table.status
        return np.flatnonzero((s != Status.FINISHED) & (s != Status.REJECTED))
