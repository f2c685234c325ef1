"""The scheduling core's state: a few typed tuples of numpy arrays, built once per run.

Every replica runs one *engine* (a pipeline-parallel replica runs ``pp`` virtual engines, as
vLLM does, each with its own scheduler and share of the KV blocks). An engine's settings and
counters are columns of small integer tables (``ep``, ``es``: indexed by the names below),
its running requests and the step under way are rows of [engines, seats] arrays, and the
waiting queues are linked through the request table (``qnext``/``qprev``), one per engine and
priority level, plus the swapped-out and the waiting-for-KV-transfer queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sim.core.blocktable import BlockTable, block_table, block_table_ref
from sim.core.jit import HAVE_NUMBA, entry, struct
from sim.core.plan import SHAPE_SIZE
from sim.core.requests import Requests, RequestTable, requests_ref
from sim.vocab import POLICIES, ROLES, ROUTERS

# Engine settings: ep[e, ...] (int64).
(P_POLICY, P_NUM_BLOCKS, P_BLOCK_SIZE, P_MAX_SEQS, P_MAX_BATCHED, P_CHUNK, P_WATERMARK, P_BATCH_SIZE, P_SWAP,
 P_PREFIX, P_SPEC_K, P_ROLE, P_REPLICA, P_MAX_LEN, P_TP, P_MULTI_STEP) = range(16)
NUM_EP = 16
# Engine settings: epf[e, ...] (float64).
F_BATCH_TIMEOUT, F_SPEC_ALPHA = range(2)
NUM_EPF = 2
# Codes of the scenario's names (sim/vocab.py): a new name fails here until it has its constant.
STATIC, CONTINUOUS, CHUNKED_PREFILL = POLICIES.values()
COLOCATED, PREFILL, DECODE = ROLES.values()
# Engine counters: es[e, ...] (int64).
(S_FREE, S_HOST_FREE, S_NRUN, S_NWAIT, S_NSWAP, S_NREMOTE, S_NTRANSFER, S_PREEMPTED, S_PN, S_SWAP_IN, S_SWAP_OUT,
 S_BATCH_N, S_USED_AT, S_CACHED_AT, S_QUEUED_AT, S_QUEUED_BLOCKS, S_ROUND, S_LISTENING, S_WAKING) = range(19)
NUM_ES = 19  # S_QUEUED_BLOCKS: the blocks the queued requests' prompts will take; S_ROUND: multi-step;
# S_LISTENING: the engine sleeps until woken; S_WAKING: its wake-up is on the loop's clock
# Engine clocks: ef[e, ...] (float64).
T_WAKE_AT, T_START, T_DURATION, T_TIMER_AT = range(4)
NUM_EF = 4  # T_TIMER_AT: the earliest batching timer pending
# Replicas: rp[r, ...] (int64); pf[r, ...] (float64) the pipeline's hand-off costs.
R_FIRST, R_COUNT, R_TURN, R_ROLE = range(4)
NUM_RP = 4
PF_OVERHEAD, PF_HIDDEN_BYTES, PF_LINK, PF_LATENCY = range(4)
# Routers: rt[k, ...], k = FRONT (new requests) or BACK (handed-over requests, disaggregation).
RT_KIND, RT_FIRST, RT_COUNT, RT_TURN, RT_BALANCE = range(5)
FRONT, BACK = 0, 1
ROUND_ROBIN, LEAST_OUTSTANDING, LEAST_KV, POWER_OF_TWO, PREFIX_AFFINITY = ROUTERS.values()
# The disaggregation link: lk[...] (float64).
LK_BANDWIDTH, LK_LATENCY, LK_LAYERWISE, LK_LAYERS, LK_KV_BYTES = range(5)
# Run-wide counters: g[...].
G_SEED, G_OUT_N, G_LOG_N, G_FX_N, G_NEXT_RID, G_NEXT_SEND, G_USERS = range(7)
# Run-wide floats: gf[...]: a closed-loop user's think time; when the pending arrival event is.
GF_THINK, GF_NEXT_ARRIVAL = range(2)
# The outbox: what an engine's turn left for its loop to act on, as rid * 8 + kind.
DONE, HANDOFF, SEND_KV, DROP_KV = range(4)
# The step log: one row per step, int32 columns then float64 (start, duration).
(L_REPLICA, L_ENGINE, L_SEQS, L_TOKENS, L_PREFILL, L_DECODES, L_USED, L_CACHED, L_QUEUE) = range(9)
LOG_INT_COLUMNS = ("replica", "engine", "num_seqs", "num_tokens", "prefill_tokens", "decode_seqs",
                   "kv_blocks_used", "kv_blocks_cached", "queue_len")
LOG_ROWS = 1 << 16
# Inter-token gaps: a histogram per traffic class, 200 bins per decade from 1 µs.
ITL_BINS, ITL_PER_DECADE, ITL_LOG_MIN = 2000, 200, -6.0


class Core(NamedTuple):
    req: Requests
    ep: np.ndarray
    epf: np.ndarray
    es: np.ndarray
    ef: np.ndarray
    qhead: np.ndarray  # [E, levels + 2]: waiting (by level), then swapped, then remote queues
    qtail: np.ndarray
    running: np.ndarray  # [E, seats] in admission order (the last is preempted first)
    batch: np.ndarray  # [E, seats] static batching: the batch under way
    p_ids: np.ndarray  # [E, seats] the step under way: rows, new tokens, cached tokens, samples
    p_new: np.ndarray
    p_comp: np.ndarray
    p_samp: np.ndarray
    shape: np.ndarray  # [E, SHAPE_SIZE] its shape
    cache: BlockTable  # each engine's prefix cache
    rp: np.ndarray
    pf: np.ndarray
    stage_free: np.ndarray  # [R, stages] when each pipeline stage is next free
    rt: np.ndarray
    rtable: BlockTable  # prefix-affinity: each replica's prefixes, as its router saw them
    lk: np.ndarray
    g: np.ndarray
    gf: np.ndarray
    out: np.ndarray
    fx: np.ndarray  # [capacity, 2] the effects of the handlers since the loop last took them: kind, who
    fx_delay: np.ndarray  # [capacity] and after how long
    log_i: np.ndarray  # [LOG_INT_COLUMNS, LOG_ROWS] the step log's chunk, a row per column
    log_f: np.ndarray  # [2, LOG_ROWS] start, duration
    itl_hist: np.ndarray  # [classes, ITL_BINS]
    itl_sum: np.ndarray  # [classes] whole nanoseconds


CoreType, CoreRef = struct("Core", Core._fields, __name__)


@entry
def _new_core(*fields):
    return CoreRef(*fields)


def core_ref(core: Core):
    """The core as compiled functions take it: one structure over the same arrays."""
    if not HAVE_NUMBA:
        return core
    return _new_core(*(requests_ref(v) if name == "req" else block_table_ref(v) if name in ("cache", "rtable")
                       else v for name, v in zip(Core._fields, core, strict=True)))


@dataclass(frozen=True)
class EngineSpec:
    """What the core needs to know of one engine."""

    scheduler: object  # the scenario's Scheduler section
    num_blocks: int
    block_size: int
    max_model_len: int
    replica: int = 0
    role: str = "colocated"
    host_blocks: int = 0  # swap space, in blocks
    tp: int = 1


def engines_of(scenario) -> list[EngineSpec]:
    """Every engine of ``scenario``'s cluster: one per replica, ``pp`` per pipelined replica
    (each with its share of the replica's KV blocks and swap space)."""
    from sim.scenario.memory import GiB

    out = []
    for spec in scenario.replica_specs:
        hw, mem, pp = spec.hardware, spec.memory, spec.hardware.pp
        host = int(hw.host_memory_gb * GiB // (mem.kv_bytes_per_token * mem.block_size)) // pp
        out += [EngineSpec(spec.scheduler, mem.num_blocks // pp, mem.block_size, scenario.model_spec.max_model_len,
                           spec.index, spec.role, host, hw.tp)] * pp
    return out


def build_core(scenario, table: RequestTable, *, step_overhead_s: float = 0.0,
               closed: tuple[int, float] | None = None) -> Core:
    """The core of ``scenario``'s cluster over ``table``'s requests, nothing arrived yet
    (``step_overhead_s``: a step's fixed cost, which a pipeline's first stage pays; ``closed``:
    a closed loop's users and think time)."""
    specs = scenario.replica_specs
    overhead = step_overhead_s
    pf = np.array([(overhead, scenario.model_spec.hidden_size * 2 / r.hardware.tp,
                    r.gpu.interconnect_bandwidth, 5e-6) for r in specs])
    lk = np.zeros(5)
    if scenario.disaggregation is not None:
        link = scenario.disaggregation.link
        lk[:] = (link.bandwidth, link.latency, link.layerwise_overlap, scenario.model_spec.num_layers,
                 scenario.model_spec.kv_bytes_per_token(scenario.quantization.kv_cache))
    return core_of(engines_of(scenario), table, seed=scenario.seed, router=scenario.router.policy,
                   balance=scenario.router.balance_abs, pipeline=pf, link=lk, closed=closed)


def core_of(engines: list[EngineSpec], table: RequestTable, *, seed: int = 0, router: str = "round-robin",
            balance: int = 0, pipeline: np.ndarray | None = None, link: np.ndarray | None = None,
            closed: tuple[int, float] | None = None) -> Core:
    """A core over these engines (consecutive engines of one replica are its pipeline's)."""
    E = len(engines)
    R = engines[-1].replica + 1
    ep = np.zeros((E, NUM_EP), dtype=np.int64)
    epf = np.zeros((E, NUM_EPF))
    es = np.zeros((E, NUM_ES), dtype=np.int64)
    rp = np.zeros((R, NUM_RP), dtype=np.int64)
    for e, x in enumerate(engines):
        s = x.scheduler
        if rp[x.replica, R_COUNT] == 0:
            rp[x.replica] = (e, 0, 0, ROLES[x.role])
        rp[x.replica, R_COUNT] += 1
        watermark = 0 if s.policy == "static" else int(s.watermark * x.num_blocks)
        spec_k = s.speculative.num_tokens if s.speculative else 0
        ep[e] = (POLICIES[s.policy], x.num_blocks, x.block_size, s.max_num_seqs, s.max_batched_tokens, s.chunk_size,
                 watermark, s.batch_size, s.preemption == "swap", s.prefix_caching, spec_k, ROLES[x.role],
                 x.replica, x.max_model_len, x.tp, s.num_scheduler_steps)
        epf[e] = (s.batch_timeout_s, s.speculative.acceptance_rate if s.speculative else 0.0)
        es[e, S_FREE] = x.num_blocks
        es[e, S_HOST_FREE] = x.host_blocks
    seats = int(max(max(x.scheduler.max_num_seqs, x.scheduler.batch_size) for x in engines))
    kind = ROUTERS[router]
    rt = np.zeros((2, 5), dtype=np.int64)
    front = [r for r in range(R) if rp[r, R_ROLE] != DECODE]
    back = [r for r in range(R) if rp[r, R_ROLE] == DECODE]
    rt[FRONT] = (kind, front[0], len(front), 0, balance)
    if back:
        rt[BACK] = (kind, back[0], len(back), 0, balance)
    caching = [int(ep[e, P_NUM_BLOCKS]) if ep[e, P_PREFIX] else 0 for e in range(E)]
    # Prefix-affinity remembers as many blocks per replica as the replica could cache.
    router_tables = [int(ep[rp[r, R_FIRST]:rp[r, R_FIRST] + rp[r, R_COUNT], P_NUM_BLOCKS].sum())
                     if kind == PREFIX_AFFINITY else 0 for r in range(R)]
    ints = lambda *shape: np.zeros(shape, dtype=np.int64)  # noqa: E731
    classes = len(table.class_names)
    levels = table.num_levels
    effects = 2 * table.n + 4 * E + 64  # a request sends and lands once; an engine wakes, times, steps
    return Core(
        req=table.arrays(), ep=ep, epf=epf, es=es, ef=np.full((E, NUM_EF), np.inf),
        qhead=np.full((E, levels + 2), -1, dtype=np.int64), qtail=np.full((E, levels + 2), -1, dtype=np.int64),
        running=ints(E, seats), batch=ints(E, seats), p_ids=ints(E, seats), p_new=ints(E, seats),
        p_comp=ints(E, seats), p_samp=np.zeros((E, seats), dtype=np.bool_), shape=np.zeros((E, SHAPE_SIZE)),
        cache=block_table(caching), rp=rp, pf=np.zeros((R, 4)) if pipeline is None else pipeline,
        stage_free=np.zeros((R, int(rp[:, R_COUNT].max()))), rt=rt, rtable=block_table(router_tables),
        lk=np.zeros(5) if link is None else link,
        g=np.array([seed, 0, 0, 0, 0, 0, closed[0] if closed else 0], dtype=np.int64),
        gf=np.array([closed[1] if closed else 0.0, np.inf]), out=ints(2 * table.n + 64),
        fx=ints(effects, 2), fx_delay=np.zeros(effects),
        log_i=np.zeros((len(LOG_INT_COLUMNS), LOG_ROWS), dtype=np.int32), log_f=np.zeros((2, LOG_ROWS)),
        itl_hist=ints(classes, ITL_BINS), itl_sum=ints(classes))
