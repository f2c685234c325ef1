"""What moving data between GPUs costs: a KV cache over the disaggregation link, and a batch's
activations between a pipeline's stages.

Pipeline parallelism: a replica's ``pp`` stages are shared by its virtual engines. A batch
holds one stage at a time for its share of the step (the layers are split evenly) plus the
hand-off of its activations to the next stage, and each stage's fixed time per micro-batch
(``engines.<e>.stage_latency_s``); while it moves on, the next micro-batch can
enter. A stage serves batches in the order they reach it, so when a batch enters the pipe its
whole way through is known: at each stage it starts when both it and the stage are ready.
Uneven micro-batches leave stages idle: the bubbles show up as longer steps.
"""

from __future__ import annotations

import numpy as np

from sim.core.jit import entry, jit, leaf
from sim.core.state import Counter, LinkCost, PipeCost, Replica, Setting, TierSpec
from sim.scenario.specs.kv_bytes import kv_bytes_held

_kv_bytes_held = leaf(kv_bytes_held)  # the model description's own rule, compiled


@jit
def transfer_time(c, rid, now):
    """Seconds from ``now`` until a request's KV cache has moved: bytes / bandwidth + latency,
    the bytes being what the prefill engine holds (full-attention and MLA layers for every token,
    windowed layers for their last window + a block, the linear/SSM layers' state). Each GPU of
    the prefill replica sends its shard over its own link. With layer-wise overlap the layers
    leave while later ones are still computed, so only what outlasts the prefill remains (at
    least the last layer's share). Transfers share links: one starts when both the sending and
    the receiving replica's links are free of the transfers before it (``link_free``)."""
    r = c.req
    link = c.link_costs
    e = r.source[rid]
    senders = c.settings[e, Setting.TP]
    nbytes = _kv_bytes_held(r.num_computed[rid], link[LinkCost.FULL_BYTES], link[LinkCost.WINDOW_BYTES],
                            np.int64(link[LinkCost.WINDOW]), link[LinkCost.CHUNKED] != 0.0,
                            c.settings[e, Setting.BLOCK_SIZE], link[LinkCost.STATE_BYTES])
    wire = nbytes / (link[LinkCost.BANDWIDTH] * senders)
    if link[LinkCost.LAYERWISE] != 0.0:
        wire = max(wire - r.handoff_s[rid], wire / link[LinkCost.LAYERS])
    src, dst = c.settings[e, Setting.REPLICA], r.replica[rid]
    start = max(now, c.link_free[src], c.link_free[dst])
    c.link_free[src] = c.link_free[dst] = start + wire
    return start - now + wire + link[LinkCost.LATENCY]


@jit
def pass_through(c, r, now, duration, tokens):
    """A batch of ``tokens`` tokens whose whole forward takes ``duration`` enters replica
    ``r``'s pipe at ``now``; returns when it leaves the last stage."""
    pp = c.replicas[r, Replica.COUNT]
    overhead = c.pipe_costs[r, PipeCost.OVERHEAD]
    per_stage = max(duration - overhead, 0.0) / pp
    pipe = c.pipe_costs[r]
    send = tokens * pipe[PipeCost.HIDDEN_BYTES] / pipe[PipeCost.LINK] + pipe[PipeCost.LATENCY]
    t = now
    for i in range(pp):
        start = max(t, c.stage_free[r, i])
        t = start + per_stage + pipe[PipeCost.STAGE] + (overhead if i == 0 else send)
        c.stage_free[r, i] = t
    return t


@jit
def pipelined(c, e, now, duration):
    """How long engine e's planned step, computing for ``duration`` from ``now``, really lasts:
    longer on a pipelined replica when a stage is busy with another virtual engine."""
    r = c.settings[e, Setting.REPLICA]
    if c.replicas[r, Replica.COUNT] == 1:
        return duration
    tokens = 0
    for i in range(c.counters[e, Counter.PN]):
        tokens += c.p_new[e, i]
    return pass_through(c, r, now, duration, tokens) - now


@entry
def transfer_seconds(c, rid, now):
    """``transfer_time`` for Python callers (the SimPy loop)."""
    return transfer_time(c, rid, now)


@entry
def pipelined_seconds(c, e, now, duration):
    """``pipelined`` for Python callers (the SimPy loop)."""
    return pipelined(c, e, now, duration)


def tier_specs(scenario) -> list[tuple[TierSpec, ...]]:
    """Each replica's KV tiers as the core takes them (sim/core/tierstore.py): how many of its
    blocks each holds, and what loading a block costs — its bytes (every GPU's shard) over the
    tier's bandwidth to the replica, after the tier's latency."""
    from sim.scenario.memory import GiB

    if scenario.kv_tiers is None:
        return [() for _ in scenario.replica_specs]
    out = []
    for spec in scenario.replica_specs:
        hw, mem = spec.hardware, spec.memory
        block = mem.kv_bytes_per_token * mem.block_size * hw.tp
        out.append(tuple(TierSpec(int(t.capacity_gb * GiB // block), t.latency,
                                  block / t.bandwidth(spec.gpu, hw.tp), t.medium == "shared")
                         for t in scenario.kv_tiers.tiers))
    return out
