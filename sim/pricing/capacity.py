"""The SLA planner's capacity model of one replica: the request rate it sustains at the
scenario's SLO, from the pricing, before the run (sim/core/autoscale.py sizes the fleet by it).

A replica serving requests of the traffic's mean prompt P and output O at a steady batch of B
decoding requests spends, per request, one prefill of P tokens (``prefill_s``) and its share of
O decode steps of the batch (``O · decode_s(B) / B``, each step's context the batch's mean,
P + O/2). Its sustainable rate is ``B / (B · prefill_s + O · decode_s(B))``; the prefills take
``u = rate · prefill_s`` of its time, so a request's time per output token is
``decode_s(B) / (1 - u)``. B is the largest batch within ``max_num_seqs`` and the KV cache
(B · (P + O) tokens) whose time per output token meets ``slo.tpot_s`` (and whose prefill plus
O such tokens meets ``slo.e2e_s``); with no such limit, the batch of the highest rate. The
planner then plans each replica for ``autoscale.target`` of that rate (headroom for queueing,
which is what keeps TTFT low). A model, not a measurement: the run shows how it holds.

With speculative decoding (k drafts), each decode step verifies k + 1 tokens per row (priced
with the drafter) and yields L = ``speculative.mean_length`` of them on average (1 + p1 + p1·p2
+ … from the per-position rates), so a request takes O / L decode steps and ``decode_s(B) / L``
per output token.
"""

from __future__ import annotations

import numpy as np

from sim.core.plan import StepShape
from sim.pricing.costs import Pricer


def replica_rate(scenario, cost, prompt: float, output: float) -> float:
    """Requests per second one replica sustains at ``scenario``'s SLO (see the module), priced
    by ``cost`` (the replica's cost model), for mean prompt and output lengths."""
    spec = scenario.replica_specs[0]
    p, o = max(float(prompt), 1.0), max(float(output), 1.0)
    kv_tokens = spec.memory.num_blocks * spec.memory.block_size
    top = int(max(1, min(spec.scheduler.max_num_seqs, kv_tokens // (p + o))))
    b = np.arange(1, top + 1, dtype=np.float64)
    pricer = Pricer(cost, 1.0)
    prefill = float(pricer.price(StepShape(num_tokens=p, num_seqs=1.0, prefill_tokens=p, prefill_attn=p * (p + 1) / 2,
                                           decode_seqs=0.0, decode_context=0.0, num_sampled=1.0).vectors())[0][0])
    sp = spec.scheduler.speculative
    k, length = (sp.num_tokens, sp.mean_length) if sp is not None else (0, 1.0)
    decode = pricer.price(StepShape(num_tokens=b * (1 + k), num_seqs=b, prefill_tokens=0.0, prefill_attn=0.0,
                                    decode_seqs=b, decode_context=b * (p + o / 2), num_sampled=b,
                                    verify_tokens=b * k).vectors())[0]
    per_token = decode / length  # a decode step's seconds per output token of one row
    rate = b / (b * prefill + o * per_token)
    tpot = per_token / np.maximum(1.0 - rate * prefill, 1e-9)
    ok = np.ones(len(b), dtype=bool)
    if scenario.slo.tpot_s is not None:
        ok &= tpot <= scenario.slo.tpot_s
    if scenario.slo.e2e_s is not None:
        ok &= prefill + o * tpot <= scenario.slo.e2e_s
    if not ok.any():  # no batch meets it: the planner sizes for one request at a time
        return float(rate[0])
    return float(rate[ok].max())
