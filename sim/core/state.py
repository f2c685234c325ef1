"""The scheduling core's state: a few typed tuples of numpy arrays, built once per run.

Every replica runs one *engine* (a pipeline-parallel replica runs ``pp`` virtual engines, as
vLLM does, each with its own scheduler and share of the KV blocks; a replica with data-parallel
attention runs one engine per rank, each with its own scheduler, limits and KV cache, stepping
together: sim/core/lockstep.py). An engine's settings and
counters are columns of small tables (``settings``, ``counters``, ...: each table's columns an
IntEnum, numbered in the order named, filled by name with ``put``),
its running requests and the step under way are rows of [engines, seats] arrays, and the
waiting queues are linked through the request table (``qnext``/``qprev``), one per engine and
priority level, plus the swapped-out and the waiting-for-KV-transfer queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from sim.core.blocktable import BlockTable, block_table, block_table_ref
from sim.core.jit import HAVE_NUMBA, entry, struct
from sim.core.plan import SHAPE_SIZE
from sim.core.requests import Requests, RequestTable, requests_ref
from sim.vocab import (
    DP_BALANCES,
    FORECASTS,
    NO_MATCH,
    POLICIES,
    RESERVING,
    ROLES,
    ROUTERS,
    SCALE_POLICIES,
    TIER_LOADS,
    TIER_WRITES,
)


def columns(name: str, names: str, doc: str) -> type[IntEnum]:
    """A table's columns, numbered in the order named; numba reads each member as a constant."""
    enum = IntEnum(name, names.split(), start=0, module=__name__)
    enum.__doc__ = doc
    return enum


Setting = columns("Setting", """POLICY NUM_BLOCKS BLOCK_SIZE MAX_SEQS MAX_BATCHED CHUNK WATERMARK BATCH_SIZE
    SWAP PREFIX SPEC_K ROLE REPLICA MAX_LEN TP MULTI_STEP WINDOW_BLOCKS WINDOW_PPM WINDOW STATE_PPM
    TIERS LOAD_MODE MIN_LOAD WRITE ADMIT_WHOLE RESERVE_OUTPUT WHOLE_PROMPTS""",
                  "An engine's settings: settings[e, Setting.X] (int64). WINDOW*: sliding-window layers' cap "
                  "(WINDOW: their window in tokens); STATE_PPM: a running request's linear-attention / SSM "
                  "state taken from the blocks, in millionths of a block (sim/core/kvblocks.own_blocks_in); "
                  "TIERS: its KV tiers below the GPU, LOAD_MODE how blocks come back, MIN_LOAD the fewest "
                  "blocks worth loading, WRITE when blocks go there (sim/core/tierstore.py); RESERVE_OUTPUT: "
                  "admission holds blocks for prompt + whole output (TensorRT-LLM's GUARANTEED_NO_EVICT); "
                  "WHOLE_PROMPTS: chunked prefill never splits a prompt (TensorRT-LLM without chunked context).")
FloatSetting = columns("FloatSetting", "BATCH_TIMEOUT",
                       "An engine's float settings: float_settings[e, FloatSetting.X].")
Counter = columns("Counter", """FREE HOST_FREE NRUN NWAIT NSWAP NREMOTE NTRANSFER PREEMPTED PN SWAP_IN SWAP_OUT
    BATCH_N USED_AT CACHED_AT QUEUED_AT QUEUED_BLOCKS ROUND LISTENING WAKING NLOAD STEPPING""",
                  "An engine's counters: counters[e, Counter.X] (int64). QUEUED_BLOCKS: the blocks the queued "
                  "requests' prompts will take; ROUND: multi-step; LISTENING: the engine sleeps until woken; "
                  "WAKING: its wake-up is on the loop's clock; *_AT: as the step under way started; "
                  "NLOAD: requests waiting for their blocks from the KV tiers; STEPPING: a step is under way.")
Clock = columns("Clock", "WAKE_AT START DURATION TIMER_AT TURN_AT LOAD_UNTIL",
                "An engine's times: clocks[e, Clock.X]. WAKE_AT: when an idle engine should look again; "
                "TIMER_AT: the earliest batching timer pending; TURN_AT: when it last planned a step; "
                "LOAD_UNTIL: the coming step ends no earlier (blocks loaded layer by layer).")
TierCost = columns("TierCost", "LATENCY BLOCK_S SHARED",
                   "Engine e's k-th KV tier: tier_cost[e, k, TierCost.X]: a load's latency, seconds per block "
                   "on its link (sim/pricing/links.py: tier_costs), whether the replicas share it.")
TierStat = columns("TierStat", "LOADED LOADS STORED SKIPPED",
                   "What engine e's k-th tier did: tier_n[e, k, TierStat.X]: blocks loaded back, loads, blocks "
                   "stored (new there), blocks found but recomputed (too few to load).")
Replica = columns("Replica", "FIRST COUNT TURN ROLE RECORD LOCKSTEP BUSY BALANCE",
                  "A replica: replicas[r, Replica.X] (int64): its first engine, their count (pp, or attention "
                  "DP's ranks), whose turn; RECORD: prefix-affinity's prompt tokens routed there beyond the "
                  "prefixes they matched; LOCKSTEP: its engines are attention DP ranks, which step together "
                  "(sim/core/lockstep.py); BUSY: such a replica's step is under way; BALANCE: which rank "
                  "takes a request (DP_BALANCES).")
PipeCost = columns("PipeCost", "OVERHEAD HIDDEN_BYTES LINK LATENCY STAGE",
                   "A replica's pipeline hand-off costs: pipe_costs[r, PipeCost.X] (sim/pricing/links.py).")
Routing = columns("Routing", "KIND FIRST COUNT TURN BALANCE NO_MATCH SAMPLED ADD_ROUTED SAMPLES",
                  "A router: routers[k, Routing.X], k = FRONT (new requests) or BACK (handed over). SAMPLED: "
                  "it reads the replicas' load as sampled (sim/core/router_signals.py); ADD_ROUTED: it adds "
                  "what it routed since the sample; SAMPLES: the samples taken (FRONT's row).")
Signal = columns("Signal", "KV OUT ROUTED_KV ROUTED_OUT MARK_KV MARK_OUT",
                 "What a router sees of replica r: signals[r, Signal.X]. KV, OUT: its KV load and outstanding "
                 "requests as last published; ROUTED_*: what the routers sent it since the run began; MARK_*: "
                 "those as the published sample was taken. pending[slot, r, Signal.X]: a sample on its way.")
RouterTime = columns("RouterTime", "REFRESH_S DELAY_S NEXT_REFRESH",
                     "The routers' sampling: router_times[RouterTime.X]: every REFRESH_S (0: exact state), "
                     "visible DELAY_S later; when the pending refresh is (inf: none).")
LinkCost = columns("LinkCost", "BANDWIDTH LATENCY LAYERWISE LAYERS FULL_BYTES WINDOW_BYTES WINDOW CHUNKED STATE_BYTES",
                   "The disaggregation link: link_costs[LinkCost.X] (sim/pricing/links.py); what a request's KV "
                   "cache weighs (sim/scenario/specs/models.py: kv_bytes_held): bytes per token of the full and "
                   "of the windowed layers, the window and whether it is chunked, the per-request state.")
RunCounter = columns("RunCounter", "SEED OUT_N LOG_N FX_N NEXT_RID NEXT_SEND USERS LOCAL_PREFILL PREFILL_QUEUE",
                     "Run-wide counters: run_counters[RunCounter.X]: the seed, the outbox's and effects' "
                     "lengths, the step log's rows, the next request to arrive or be sent, closed-loop users; "
                     "selective disaggregation's bounds (sim/core/disagg.py; -1: off, or no bound).")
RunTime = columns("RunTime", "THINK NEXT_ARRIVAL FRONTEND",
                  "Run-wide times: run_times[RunTime.X]: a closed-loop user's think time; when the pending "
                  "arrival event is; the API server's time per request before the router (a request reaches "
                  "it FRONTEND after it is sent; its arrival stays its send).")
# Autoscaling (sim/core/autoscale.py): its settings and state, each replica's state and times.
Scale = columns("Scale", """ON POLICY MIN MAX START INTERVAL READY_DELAY TARGET TOLERANCE UP_WINDOW DOWN_WINDOW
    REPLICA_RATE FORECAST PREV_RATE""",
                "The autoscaler: scale[Scale.X] (float). ON: the fleet scales; START: replicas serving at 0; "
                "READY_DELAY: provisioning + cold start; REPLICA_RATE: the SLA planner's sustainable req/s "
                "per replica; PREV_RATE: the arrival rate it saw an interval before.")
ScaleCounter = columns("ScaleCounter", "LOG_N REC_N ARRIVED LOST",
                       "The autoscaler's counts: scale_n[ScaleCounter.X]: rows of its log, recommendations "
                       "kept, requests arrived at the last tick, log rows that found no room.")
FleetTime = columns("FleetTime", "SINCE READY_AT",
                    "A replica's times: fleet_t[r, FleetTime.X]: when it entered its state; when it will be ready.")
# A replica's state (fleet[r]); the routers send only to the ACTIVE ones.
OFF, PROVISIONING, ACTIVE, DRAINING = range(4)
FLEET_STATES = ("off", "provisioning", "active", "draining")
# Codes of the scenario's names (sim/vocab.py): a new name fails here until it has its constant.
STATIC, CONTINUOUS, CHUNKED_PREFILL, SLOTS = POLICIES.values()
COLOCATED, PREFILL, DECODE = ROLES.values()
FRONT, BACK = 0, 1
ROUND_ROBIN, LEAST_OUTSTANDING, LEAST_KV, POWER_OF_TWO, PREFIX_AFFINITY = ROUTERS.values()
LEAST_LOADED, SMALLEST_RECORD = NO_MATCH.values()
SHORTEST_QUEUE = DP_BALANCES["shortest-queue"]  # attention DP ranks' balance (round-robin otherwise)
QUEUE, KV, SLA = SCALE_POLICIES.values()
LAST, TREND = FORECASTS.values()
# The outbox: what an engine's turn left for its loop to act on, as rid * 8 + kind.
DONE, HANDOFF, SEND_KV, DROP_KV, LOAD_KV = range(5)
ASYNC, LAYERWISE = TIER_LOADS.values()
BACK_WRITE, THROUGH = TIER_WRITES.values()
# The step log: one row per step, int32 columns then float64 (start, duration).
LogColumn = columns("LogColumn", """REPLICA ENGINE NUM_SEQS NUM_TOKENS PREFILL_TOKENS DECODE_SEQS KV_BLOCKS_USED
    KV_BLOCKS_CACHED QUEUE_LEN""", "The step log's int columns: log_i[LogColumn.X, row].")
LOG_INT_COLUMNS = tuple(c.name.lower() for c in LogColumn)
LOG_ROWS = 1 << 16
# Inter-token gaps: a histogram per traffic class, 200 bins per decade from 1 µs.
ITL_BINS, ITL_PER_DECADE, ITL_LOG_MIN = 2000, 200, -6.0


class Core(NamedTuple):
    req: Requests
    settings: np.ndarray  # [E, Setting]
    float_settings: np.ndarray  # [E, FloatSetting]
    spec_survival: np.ndarray  # [E, max k] speculative decoding: P(at least j + 1 drafts accepted)
    counters: np.ndarray  # [E, Counter]
    clocks: np.ndarray  # [E, Clock]
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
    replicas: np.ndarray  # [R, Replica]
    pipe_costs: np.ndarray  # [R, PipeCost]
    stage_free: np.ndarray  # [R, stages] when each pipeline stage is next free
    routers: np.ndarray  # [2, Routing]
    rtable: BlockTable  # prefix-affinity: each replica's prefixes, as its router saw them
    signals: np.ndarray  # [R, Signal] the replicas' load as the routers see it
    pending: np.ndarray  # [slots, R, Signal] samples taken, not yet visible (router.delay_s)
    router_times: np.ndarray  # [RouterTime]
    link_costs: np.ndarray  # [LinkCost]
    link_free: np.ndarray  # [R] when each replica's KV link (its GPUs' NICs) is next free
    run_counters: np.ndarray  # [RunCounter]
    run_times: np.ndarray  # [RunTime]
    out: np.ndarray
    fx: np.ndarray  # [capacity, 2] the effects of the handlers since the loop last took them: kind, who
    fx_delay: np.ndarray  # [capacity] and after how long
    log_i: np.ndarray  # [LOG_INT_COLUMNS, LOG_ROWS] the step log's chunk, a row per column
    log_f: np.ndarray  # [2, LOG_ROWS] start, duration
    itl_hist: np.ndarray  # [classes, ITL_BINS]
    itl_sum: np.ndarray  # [classes] whole nanoseconds
    fleet: np.ndarray  # [R] each replica's state: OFF, PROVISIONING, ACTIVE, DRAINING
    fleet_t: np.ndarray  # [R, FleetTime]
    scale: np.ndarray  # [Scale]
    scale_n: np.ndarray  # [ScaleCounter]
    scale_log: np.ndarray  # [rows, 3] the fleet's changes: time, replica, new state
    scale_recs: np.ndarray  # [rows, 2] the recommendations of the stabilisation window: time, replicas
    tiers: BlockTable  # the KV tiers' blocks (sim/core/tierstore.py)
    tier_of: np.ndarray  # [E, K] engine e's k-th tier's owner in ``tiers``
    tier_cost: np.ndarray  # [E, K, TierCost]
    tier_free: np.ndarray  # [E, K] when the link to each tier is next free
    tier_n: np.ndarray  # [E, K, TierStat]
    tier_hit: np.ndarray  # [K] a lookup's blocks per tier
    tier_keys: np.ndarray  # [most blocks of an engine] the ids of blocks the GPU just gave up


CoreType, CoreRef = struct("Core", Core._fields, __name__)


@entry
def _new_core(*fields):
    return CoreRef(*fields)


def core_ref(core: Core):
    """The core as compiled functions take it: one structure over the same arrays."""
    if not HAVE_NUMBA:
        return core
    return _new_core(*(requests_ref(v) if name == "req" else block_table_ref(v) if name in ("cache", "rtable", "tiers")
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
    window_blocks: int = 0  # the most blocks a sliding-window layer keeps per request (0: no cap)
    window_ppm: int = 0  # parts per million of a block's bytes in those layers
    window: int = 0  # their window, in tokens
    state_ppm: int = 0  # a running request's state taken from the blocks, in millionths of a block
    tiers: tuple[TierSpec, ...] = ()  # its KV tiers below the GPU, first first
    tier_load: str = "async"  # how their blocks come back (sim/vocab.py: TierLoad)
    min_load_blocks: int = 0  # fewer found in the tiers are recomputed
    tier_write: str = "through"  # when blocks reach the tiers (sim/vocab.py: TierWrite)
    lockstep: bool = False  # one of a replica's attention DP ranks (they step together)
    balance: str = "round-robin"  # which of them takes a request (sim/vocab.py: DpBalance)


@dataclass(frozen=True)
class TierSpec:
    """One KV tier of an engine, as the core needs it (sim/pricing/links.py: tier_costs)."""

    capacity_blocks: int
    latency_s: float
    block_s: float  # seconds per block on its link
    shared: bool = False  # one store for every replica


def engines_of(scenario, tiers: list[tuple[TierSpec, ...]] | None = None) -> list[EngineSpec]:
    """Every engine of ``scenario``'s cluster: one per replica, ``pp`` per pipelined replica
    (each with its share of the replica's KV blocks and swap space), one per attention DP rank
    (each with its share of the blocks and of the scheduler's limits); ``tiers``: each replica's
    KV tiers (sim/pricing/links.py: tier_specs)."""
    from sim.scenario.memory import GiB

    load, least, write = scenario.tier_settings()
    out = []
    for spec in scenario.replica_specs:
        hw, mem, n = spec.hardware, spec.memory, spec.hardware.engines
        host = int(hw.host_memory_gb * GiB // (mem.kv_bytes_per_token * mem.block_size)) // n
        max_len = scenario.model_spec.max_model_len
        if spec.scheduler.slot_context is not None:  # slots: a request longer than a slot is refused
            max_len = min(max_len, spec.scheduler.slot_context)
        own = tiers[spec.index] if tiers is not None and spec.scheduler.prefix_caching else ()
        ranks = hw.dp_attention
        sch = spec.scheduler if ranks == 1 else spec.scheduler.per_rank(ranks)
        out += [EngineSpec(sch, mem.num_blocks // n, mem.block_size, max_len,
                           spec.index, spec.role, host, hw.tp, mem.window_blocks, mem.window_ppm,
                           mem.window, mem.state_ppm, own, load, -(-least // mem.block_size), write,
                           lockstep=ranks > 1, balance=hw.dp_balance)] * n
    return out


def table(columns: type[IntEnum], rows: int | None = None, dtype=np.float64, fill=0.0) -> np.ndarray:
    """A table with ``columns`` (one row when ``rows`` is None)."""
    return np.full(len(columns) if rows is None else (rows, len(columns)), fill, dtype=dtype)


def put(row: np.ndarray, columns: type[IntEnum], **values) -> None:
    """Fill a table's row by name; every column must be named (none is left at its default by accident)."""
    missing = [c.name.lower() for c in columns if c.name.lower() not in values]
    if missing:
        raise ValueError(f"{columns.__name__}: no value for {', '.join(missing)}")
    for name, v in values.items():
        row[columns[name.upper()]] = v


def build_core(scenario, table_: RequestTable, *, step_overhead_s: float = 0.0, stage_latency_s: float = 0.0,
               closed: tuple[int, float] | None = None, replica_rate: float = 0.0,
               tiers: list[tuple[TierSpec, ...]] | None = None, request_overhead_s: float = 0.0) -> Core:
    """The core of ``scenario``'s cluster over ``table_``'s requests, nothing arrived yet
    (``step_overhead_s``: a step's fixed cost, which a pipeline's first stage pays;
    ``stage_latency_s``: what every stage of a pipeline pays per micro-batch beside its compute;
    ``request_overhead_s``: the API server's time per request before the router; ``closed``:
    a closed loop's users and think time; ``replica_rate``: the SLA planner's sustainable
    req/s per replica, sim/pricing/capacity.py; ``tiers``: each replica's KV tiers,
    sim/pricing/links.py: tier_specs)."""
    specs = scenario.replica_specs
    pipe = table(PipeCost, len(specs))
    for r, spec in enumerate(specs):
        put(pipe[r], PipeCost, overhead=step_overhead_s,
            hidden_bytes=scenario.model_spec.hidden_size * 2 / spec.hardware.tp, link=spec.gpu.interconnect_bandwidth,
            latency=5e-6, stage=stage_latency_s)
    link = table(LinkCost)
    selective = None
    if scenario.disaggregation is not None:
        selective = (scenario.disaggregation.local_prefill_tokens, scenario.disaggregation.max_prefill_queue)
        x = scenario.disaggregation.link
        m = scenario.model_spec
        full, windowed = m.kv_bytes_per_token_split(scenario.quantization.kv_cache)
        put(link, LinkCost, bandwidth=x.bandwidth, latency=x.latency, layerwise=x.layerwise_overlap,
            layers=m.num_layers, full_bytes=full, window_bytes=windowed, window=m.sliding_window,
            chunked=m.chunked, state_bytes=m.state_bytes_per_request())
    x = scenario.router
    return core_of(engines_of(scenario, tiers), table_, seed=scenario.seed, router=x.policy, balance=x.balance_abs,
                   no_match=x.no_match, refresh_s=x.refresh, delay_s=x.delay_s, add_routed=x.adds_routed,
                   pipeline=pipe, link=link, closed=closed, autoscale=scale_settings(scenario, replica_rate),
                   selective=selective, frontend_s=request_overhead_s)


def cold_start_s(scenario) -> float:
    """How long a new replica loads its weights: ``autoscale.cold_start_s``, or its weight
    bytes per GPU (each GPU loads its shard) over ``autoscale.load_bandwidth_gbps``."""
    a = scenario.autoscale
    if a.cold_start_s is not None:
        return a.cold_start_s
    return scenario.memory.weight_bytes / (a.load_bandwidth_gbps * 1e9)


def scale_settings(scenario, replica_rate: float = 0.0) -> np.ndarray | None:
    """The autoscaler's row (``Scale``) of ``scenario``, or None for a fixed fleet."""
    a = scenario.autoscale
    if a is None:
        return None
    row = table(Scale)
    put(row, Scale, on=1, policy=SCALE_POLICIES[a.policy], min=a.min_replicas, max=a.max_replicas,
        start=a.start_replicas, interval=a.interval_s, ready_delay=a.provisioning_s + cold_start_s(scenario),
        target=a.target_value,
        tolerance=a.tolerance, up_window=a.scale_up_stabilization_s, down_window=a.scale_down_stabilization_s,
        replica_rate=replica_rate, forecast=FORECASTS[a.forecast], prev_rate=0.0)
    return row


def core_of(engines: list[EngineSpec], requests: RequestTable, *, seed: int = 0, router: str = "round-robin",
            balance: int = 0, no_match: str = "least-loaded", refresh_s: float = 0.0, delay_s: float = 0.0,
            add_routed: bool = False, pipeline: np.ndarray | None = None, link: np.ndarray | None = None,
            closed: tuple[int, float] | None = None, autoscale: np.ndarray | None = None,
            selective: tuple[int | None, int | None] | None = None, frontend_s: float = 0.0) -> Core:
    """A core over these engines (consecutive engines of one replica are its pipeline's). Its
    routers see the replicas' load sampled every ``refresh_s`` (0: exactly), each sample
    ``delay_s`` late, plus what they routed since it when ``add_routed``; ``autoscale``: the
    autoscaler's settings (``scale_settings``), None for a fixed fleet; ``selective``:
    disaggregation's local_prefill_tokens and max_prefill_queue (sim/core/disagg.py); ``frontend_s``:
    each request reaches the router this long after it is sent (RunTime.FRONTEND)."""
    E = len(engines)
    R = engines[-1].replica + 1
    ints = np.int64
    settings, float_settings = table(Setting, E, ints), table(FloatSetting, E)
    counters, replicas = table(Counter, E, ints), table(Replica, R, ints)
    for e, x in enumerate(engines):
        s = x.scheduler
        if replicas[x.replica, Replica.COUNT] == 0:
            put(replicas[x.replica], Replica, first=e, count=0, turn=0, role=ROLES[x.role], record=0,
                lockstep=x.lockstep, busy=0, balance=DP_BALANCES[x.balance])
        replicas[x.replica, Replica.COUNT] += 1
        put(settings[e], Setting, policy=POLICIES[s.policy], num_blocks=x.num_blocks, block_size=x.block_size,
            max_seqs=s.max_num_seqs, max_batched=s.max_batched_tokens, chunk=s.chunk_size,
            watermark=0 if s.policy in RESERVING else int(s.watermark * x.num_blocks),
            batch_size=s.batch_size,
            swap=s.preemption == "swap", prefix=s.prefix_caching,
            spec_k=s.speculative.num_tokens if s.speculative else 0, role=ROLES[x.role], replica=x.replica,
            max_len=x.max_model_len, tp=x.tp, multi_step=s.num_scheduler_steps, window_blocks=x.window_blocks,
            window_ppm=x.window_ppm, window=x.window, state_ppm=x.state_ppm, tiers=len(x.tiers),
            load_mode=TIER_LOADS[x.tier_load], min_load=x.min_load_blocks, write=TIER_WRITES[x.tier_write],
            admit_whole=s.admit_whole_prompt, reserve_output=s.reserve_output, whole_prompts=not s.split_prompts)
        put(float_settings[e], FloatSetting, batch_timeout=s.batch_timeout_s)
        counters[e, Counter.FREE] = x.num_blocks
        counters[e, Counter.HOST_FREE] = x.host_blocks
    seats = int(max(max(x.scheduler.max_num_seqs, x.scheduler.batch_size) for x in engines))
    spec_survival = np.zeros((E, int(max(1, settings[:, Setting.SPEC_K].max()))))
    for e, x in enumerate(engines):
        if x.scheduler.speculative:
            surv = x.scheduler.speculative.survival
            spec_survival[e, :len(surv)] = surv
    kind = ROUTERS[router]
    routers = table(Routing, 2, ints)
    front = [r for r in range(R) if replicas[r, Replica.ROLE] != DECODE]
    back = [r for r in range(R) if replicas[r, Replica.ROLE] == DECODE]
    for k, pool in ((FRONT, front), (BACK, back)):
        if pool:
            put(routers[k], Routing, kind=kind, first=pool[0], count=len(pool), turn=0, balance=balance,
                no_match=NO_MATCH[no_match], sampled=refresh_s > 0, add_routed=add_routed, samples=0)
    router_times = table(RouterTime)
    put(router_times, RouterTime, refresh_s=refresh_s, delay_s=delay_s, next_refresh=np.inf)
    # a sample waits delay_s to be seen, and one is taken every refresh_s: this many are on their way at once
    slots = int(delay_s // refresh_s) + 2 if refresh_s > 0 else 1
    blocks = settings[:, Setting.NUM_BLOCKS]
    caching = [int(blocks[e]) if settings[e, Setting.PREFIX] else 0 for e in range(E)]
    # Prefix-affinity remembers as many blocks per replica as the replica could cache, its own
    # KV tiers included (they give up blocks in the order the GPU does: together, one LRU).
    first, count = replicas[:, Replica.FIRST], replicas[:, Replica.COUNT]
    router_tables = [int(blocks[first[r]:first[r] + count[r]].sum()
                         + sum(t.capacity_blocks for t in engines[first[r]].tiers if not t.shared))
                     if kind == PREFIX_AFFINITY else 0 for r in range(R)]
    run_counters, run_times = table(RunCounter, dtype=ints), table(RunTime)
    run_counters[RunCounter.SEED] = seed
    run_counters[RunCounter.USERS] = closed[0] if closed else 0
    run_counters[RunCounter.LOCAL_PREFILL] = -1 if selective is None or selective[0] is None else selective[0]
    run_counters[RunCounter.PREFILL_QUEUE] = -1 if selective is None or selective[1] is None else selective[1]
    run_times[RunTime.THINK] = closed[1] if closed else 0.0
    run_times[RunTime.NEXT_ARRIVAL] = np.inf
    run_times[RunTime.FRONTEND] = frontend_s
    rows = lambda *shape: np.zeros(shape, dtype=ints)  # noqa: E731
    classes = len(requests.class_names)
    levels = requests.num_levels
    effects = 2 * requests.n + 4 * E + 64  # a request sends and lands once; an engine wakes, times, steps
    fleet = fleet_of(R, requests, autoscale, frontend_s)
    effects += R  # a tick may start every replica
    if autoscale is not None:
        routers[FRONT, Routing.COUNT] = int(autoscale[Scale.START])  # the initial replicas serve
    effects += requests.n  # a request's blocks may come back from the KV tiers once
    clocks = table(Clock, E, fill=np.inf)
    clocks[:, Clock.LOAD_UNTIL] = 0.0
    return Core(
        req=requests.arrays(), settings=settings, float_settings=float_settings, spec_survival=spec_survival,
        counters=counters,
        clocks=clocks,
        qhead=np.full((E, levels + 2), -1, dtype=ints), qtail=np.full((E, levels + 2), -1, dtype=ints),
        running=rows(E, seats), batch=rows(E, seats), p_ids=rows(E, seats), p_new=rows(E, seats),
        p_comp=rows(E, seats), p_samp=np.zeros((E, seats), dtype=np.bool_), shape=np.zeros((E, SHAPE_SIZE)),
        cache=block_table(caching), replicas=replicas, pipe_costs=table(PipeCost, R) if pipeline is None else pipeline,
        stage_free=np.zeros((R, int(count.max()))), routers=routers, rtable=block_table(router_tables),
        signals=table(Signal, R), pending=np.zeros((slots, R, len(Signal))), router_times=router_times,
        link_costs=table(LinkCost) if link is None else link, link_free=np.zeros(R), run_counters=run_counters,
        run_times=run_times,
        out=rows(2 * requests.n + 64), fx=rows(effects, 2), fx_delay=np.zeros(effects),
        log_i=np.zeros((len(LOG_INT_COLUMNS), LOG_ROWS), dtype=np.int32), log_f=np.zeros((2, LOG_ROWS)),
        itl_hist=rows(classes, ITL_BINS), itl_sum=rows(classes), **fleet, **tiers_of(engines))


def tiers_of(engines: list[EngineSpec]) -> dict:
    """The KV tiers' tables: an owner per engine for each tier of its own, one for every engine
    for a shared store (the first engine's capacity), and their costs."""
    E, K = len(engines), max(1, max(len(x.tiers) for x in engines))
    tier_of = np.full((E, K), -1, dtype=np.int64)
    cost = np.zeros((E, K, len(TierCost)))
    capacities: list[int] = []
    shared: dict[int, int] = {}
    for e, x in enumerate(engines):
        for k, t in enumerate(x.tiers):
            if t.shared and k in shared:
                tier_of[e, k] = shared[k]
            else:
                tier_of[e, k] = len(capacities)
                capacities.append(t.capacity_blocks)
                if t.shared:
                    shared[k] = tier_of[e, k]
            put(cost[e, k], TierCost, latency=t.latency_s, block_s=t.block_s, shared=t.shared)
    most = max(x.num_blocks for x in engines) if any(x.tiers for x in engines) else 1
    return dict(tiers=block_table(capacities), tier_of=tier_of, tier_cost=cost, tier_free=np.zeros((E, K)),
                tier_n=np.zeros((E, K, len(TierStat)), dtype=np.int64), tier_hit=np.zeros(K, dtype=np.int64),
                tier_keys=np.zeros(max(1, most), dtype=np.int64))


def fleet_of(R: int, requests: RequestTable, autoscale: np.ndarray | None, frontend_s: float = 0.0) -> dict:
    """Each replica's state (all ACTIVE for a fixed fleet; the initial ones ACTIVE, logged at
    0, when autoscaled) and the autoscaler's tables, sized for the most changes it can make:
    a tick changes each replica at most twice (a drained one stops, then restarts) and a
    replica's readiness is one more, over the ticks until the last planned arrival and as many
    again after it."""
    scale = table(Scale) if autoscale is None else autoscale.copy()
    fleet = np.full(R, ACTIVE, dtype=np.int64)
    fleet_t = table(FleetTime, R)
    fleet_t[:, FleetTime.READY_AT] = np.inf
    if autoscale is None:
        return dict(fleet=fleet, fleet_t=fleet_t, scale=scale, scale_n=table(ScaleCounter, dtype=np.int64),
                    scale_log=np.zeros((0, 3)), scale_recs=np.zeros((1, 2)))
    start = int(scale[Scale.START])
    fleet[start:] = OFF
    interval = scale[Scale.INTERVAL]
    last = float(requests.arrival.max()) + frontend_s if requests.n else 0.0
    ticks = 2 * (int(last / interval) + 2)
    log = np.zeros((start + 3 * R * ticks + 16, 3))
    log[:start, 1] = np.arange(start)
    log[:start, 2] = ACTIVE
    counts = table(ScaleCounter, dtype=np.int64)
    counts[ScaleCounter.LOG_N] = start
    window = max(scale[Scale.UP_WINDOW], scale[Scale.DOWN_WINDOW])
    recs = np.full((int(window / interval) + 2, 2), -np.inf)
    return dict(fleet=fleet, fleet_t=fleet_t, scale=scale, scale_n=counts, scale_log=log, scale_recs=recs)
