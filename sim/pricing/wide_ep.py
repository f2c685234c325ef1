"""Wide expert parallelism with data-parallel attention (SGLang's DP attention + DeepEP,
TensorRT-LLM's and Dynamo's wide EP): what the roofline needs beyond a TP group.

A replica of ``tp`` GPUs runs attention as ``dp`` data-parallel ranks of ``tp / dp`` GPUs each
(every rank its own requests and their KV cache) and the experts spread over all ``tp`` GPUs.
Each MoE layer dispatches every token to the GPUs of its top-k experts and combines the results
back (two all-to-alls), over the GPU's link within its domain (an 8-GPU NVLink node, a 72-GPU NVL72
rack) and its NIC beyond. The busiest GPU sets the MoE layer's time: how busy follows from how
tokens spread over experts (``expert_imbalance``) and where the experts (and EPLB's redundant
copies of the hottest) are placed.

Each DP rank is an engine of its own in the core, and the ranks step together
(sim/core/lockstep.py): a step's attention and dense layers are the slowest rank's, its experts
take every rank's tokens (roofline.group_time). What is approximated, and said so in the run's
warnings (sim/scenario/schema.py): the routing distribution is a steady share per expert (no
sampling noise of small batches). Requests go to the ranks in turn or to the least loaded
(``hardware.dp_balance``, sim/core/router.py). A replica-level shape priced
with ``price`` (a study's capacity model, Python callers) takes its rows as spread evenly.
"""

from __future__ import annotations

import numpy as np

from sim.scenario.specs import GpuSpec
from sim.scenario.specs.gpus import LINKS


def expert_shares(num_experts: int, distribution: str = "uniform", skew: float = 1.0,
                  counts: list[float] | None = None, seed: int = 0) -> np.ndarray:
    """Each expert's share of the routed tokens: uniform; Zipf with exponent ``skew`` over the
    experts in a fixed random order (``seed``); or measured ``counts`` (per expert)."""
    if counts is not None:
        w = np.asarray(counts, dtype=np.float64)
    elif distribution == "zipf":
        ranks = np.random.default_rng(seed).permutation(num_experts) + 1.0
        w = ranks ** -skew
    else:
        w = np.ones(num_experts)
    return w / w.sum()


def expert_imbalance(shares: np.ndarray, gpus: int, redundant: int = 0, eplb: bool = False) -> float:
    """The busiest GPU's load over the mean GPU's, experts placed over ``gpus`` GPUs: in order,
    ``E / gpus`` each (no balancing), or as EPLB places them (``eplb``): the hottest experts get
    the ``redundant`` extra copies one at a time (each copy takes an equal part of its expert's
    tokens), then the copies go, hottest first, to the least loaded GPU with a free slot."""
    e = len(shares)
    slots = (e + redundant) // gpus
    if not eplb:
        per_gpu = shares.reshape(gpus, e // gpus).sum(axis=1)
        return float(per_gpu.max() / per_gpu.mean())
    copies = np.ones(e, dtype=np.int64)
    for _ in range(redundant):
        copies[int(np.argmax(shares / copies))] += 1
    loads = np.repeat(shares / copies, copies)
    order = np.argsort(-loads, kind="stable")
    gpu_load, gpu_used = np.zeros(gpus), np.zeros(gpus, dtype=np.int64)
    for i in order:
        free = np.flatnonzero(gpu_used < slots)
        g = free[np.argmin(gpu_load[free])]
        gpu_load[g] += loads[i]
        gpu_used[g] += 1
    return float(gpu_load.max() / gpu_load.mean())


def all_to_all_seconds_per_byte(gpu: GpuSpec, gpus: int) -> float:
    """Seconds per byte a GPU sends to the others in an all-to-all among ``gpus`` GPUs: the
    share for GPUs within its link domain over the domain's link, the rest over its NIC, the two
    at once (the slower sets the time)."""
    if gpus <= 1:
        return 0.0
    domain = min(gpu.link_domain, gpus)
    inside = (domain - 1) / (gpus - 1)
    t_in = inside / gpu.interconnect_bandwidth
    if domain == gpus or not gpu.scale_out:
        return t_in
    return max(t_in, (1.0 - inside) / LINKS[gpu.scale_out].bandwidth)
