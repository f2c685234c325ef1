"""What moving data between GPUs costs: a KV cache over the disaggregation link, and a batch's
activations between a pipeline's stages.

Pipeline parallelism: a replica's ``pp`` stages are shared by its virtual engines. A batch
holds one stage at a time for its share of the step (the layers are split evenly) plus the
hand-off of its activations to the next stage; while it moves on, the next micro-batch can
enter. A stage serves batches in the order they reach it, so when a batch enters the pipe its
whole way through is known: at each stage it starts when both it and the stage are ready.
Uneven micro-batches leave stages idle: the bubbles show up as longer steps.
"""

from __future__ import annotations

from sim.core.jit import entry, jit
from sim.core.state import (
    LK_BANDWIDTH,
    LK_KV_BYTES,
    LK_LATENCY,
    LK_LAYERS,
    LK_LAYERWISE,
    P_REPLICA,
    P_TP,
    PF_HIDDEN_BYTES,
    PF_LATENCY,
    PF_LINK,
    PF_OVERHEAD,
    R_COUNT,
    S_PN,
)


@jit
def transfer_time(c, rid):
    """Seconds to move a request's KV cache: bytes / bandwidth + latency. Each GPU of the
    prefill replica sends its shard over its own link. With layer-wise overlap the layers leave
    while later ones are still computed, so only what outlasts the prefill remains (at least
    the last layer's share)."""
    r = c.req
    wire = r.num_computed[rid] * c.lk[LK_KV_BYTES] / (c.lk[LK_BANDWIDTH] * c.ep[r.source[rid], P_TP])
    if c.lk[LK_LAYERWISE] != 0.0:
        wire = max(wire - r.handoff_s[rid], wire / c.lk[LK_LAYERS])
    return wire + c.lk[LK_LATENCY]


@jit
def pass_through(c, r, now, duration, tokens):
    """A batch of ``tokens`` tokens whose whole forward takes ``duration`` enters replica
    ``r``'s pipe at ``now``; returns when it leaves the last stage."""
    pp = c.rp[r, R_COUNT]
    overhead = c.pf[r, PF_OVERHEAD]
    per_stage = max(duration - overhead, 0.0) / pp
    send = tokens * c.pf[r, PF_HIDDEN_BYTES] / c.pf[r, PF_LINK] + c.pf[r, PF_LATENCY]
    t = now
    for i in range(pp):
        start = max(t, c.stage_free[r, i])
        t = start + (per_stage + (overhead if i == 0 else send))
        c.stage_free[r, i] = t
    return t


@jit
def pipelined(c, e, now, duration):
    """How long engine e's planned step, computing for ``duration`` from ``now``, really lasts:
    longer on a pipelined replica when a stage is busy with another virtual engine."""
    r = c.ep[e, P_REPLICA]
    if c.rp[r, R_COUNT] == 1:
        return duration
    tokens = 0
    for i in range(c.es[e, S_PN]):
        tokens += c.p_new[e, i]
    return pass_through(c, r, now, duration, tokens) - now


@entry
def transfer_seconds(c, rid):
    """``transfer_time`` for Python callers (the SimPy loop)."""
    return transfer_time(c, rid)


@entry
def pipelined_seconds(c, e, now, duration):
    """``pipelined`` for Python callers (the SimPy loop)."""
    return pipelined(c, e, now, duration)
