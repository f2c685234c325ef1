"""Pipeline parallelism: a replica's ``pp`` stages, shared by its virtual engines.

A batch holds one stage at a time for its share of the step (the layers are split evenly)
plus the hand-off of its activations to the next stage; while it moves on, the next
micro-batch can enter. A stage serves batches in the order they reach it, so when a batch
enters the pipe its whole way through is known: at each stage it starts when both it and the
stage are ready. Uneven micro-batches leave stages idle: the bubbles show up as longer steps.
"""

from __future__ import annotations

from sim.core.jit import jit
from sim.core.state import PF_HIDDEN_BYTES, PF_LATENCY, PF_LINK, PF_OVERHEAD, R_COUNT


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
