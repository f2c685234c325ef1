"""The scenario schema: a typed, validated description of a serving setup and its traffic.

Errors name the field path and what was expected; reading a scenario file (or the embedded
default), ``--set`` overrides and the checks across fields are ``sim/scenario/load.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PrivateAttr,
    field_validator,
    model_validator,
)

from sim.scenario.engines import (
    COST_FIELDS,
    DEFAULT_ENGINE,
    DEFAULT_GPU,
    ENGINE_NAMES,
    EngineCost,
    engine_cost,
    kv_tiers_of,
    memory_of,
    state_memory_of,
    with_engine_defaults,
)
from sim.scenario.engines import fitted as engine_fitted
from sim.scenario.gpu_input import GpuField
from sim.scenario.memory import MemoryBudget, memory_budget
from sim.scenario.specs import GpuSpec, ModelSpec, get_gpu, get_model, model_from_hf_config
from sim.scenario.specs.drafts import draft_spec
from sim.scenario.specs.gpus import resolution, with_price
from sim.scenario.specs.models import DTYPE_BYTES
from sim.traffic.schema import PositiveInt, Slo, Strict, WorkloadSpec
from sim.vocab import (
    CHUNKING,
    RESERVING,
    DpBalance,
    Forecast,
    Policy,
    Role,
    RouterNoMatch,
    RouterPolicy,
    ScalePolicy,
    TierLoad,
    TierMedium,
    TierWrite,
)

Fraction = Annotated[float, Field(gt=0, le=1)]
Gigabytes = Annotated[float, Field(ge=0, le=1e6)]  # a petabyte: beyond, byte counts overflow
MAX_REPLICAS = 10_000  # each replica is simulated: beyond this, memory runs out first
Replicas = Annotated[int, Field(gt=0, le=MAX_REPLICAS)]
MAX_SEED = 2**63 - 1


def _seed_range(v: int) -> int:
    if not 0 <= v <= MAX_SEED:
        raise ValueError(f"expected a whole number from 0 to 2**63 - 1 = {MAX_SEED}")
    return v


Seed = Annotated[int, AfterValidator(_seed_range)]


# -- the serving system ----------------------------------------------------------------------
class HfConfigModel(Strict):
    hf_config: str  # a config.json, or the folder holding it
    name: str | None = None


Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
KvDtype = Literal["fp32", "bf16", "fp16", "fp8", "int8"]


class Quantization(Strict):
    """Weight dtype (fp8/int8: W8A8 on tensor cores; fp4: NVFP4, fp4 math where the GPU has it,
    else weight-only; int4: weight-only) and KV-cache dtype. Unset means the model's own dtype
    (and its checkpoint's quantization_config)."""

    weights: Dtype | None = None
    kv_cache: KvDtype | None = None


def _catalog_name(lookup, name: str) -> str:
    """A catalog entry's canonical name; an unknown one fails validation with the catalog's message."""
    try:
        return lookup(name).name
    except KeyError as e:
        raise ValueError(e.args[0]) from None


class ExpertLoad(Strict):
    """How an MoE model's tokens spread over its experts, and how the experts are placed over the
    expert-parallel GPUs (sim/pricing/wide_ep.py): the busiest GPU sets each MoE layer's time."""

    distribution: Literal["uniform", "zipf"] = "uniform"
    skew: Annotated[float, Field(ge=0, le=10)] = 1.0  # zipf: the exponent over the experts' ranks
    counts: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=1)] | None = None  # measured, per expert
    eplb: bool = False  # place experts (and their copies) to balance the GPUs, as EPLB does
    redundant_experts: NonNegativeInt = 0  # EPLB's extra copies of the hottest experts (each takes a slot)

    @model_validator(mode="after")
    def _consistent(self):
        if self.redundant_experts and not self.eplb:
            raise ValueError("redundant_experts are EPLB's: set eplb: true")
        if self.counts is not None and sum(self.counts) <= 0:
            raise ValueError("counts: expected some tokens routed")
        return self


class Hardware(Strict):
    gpu: GpuField = DEFAULT_GPU  # a catalog name, or a definition (sim/scenario/gpu_input.py)
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    expert_parallel: bool = False  # MoE: split experts over the TP GPUs instead of their columns
    # Wide EP (sim/pricing/wide_ep.py): attention as dp_attention data-parallel ranks of tp / dp_attention
    # GPUs, each with its own requests' KV cache (SGLang's --enable-dp-attention, TensorRT-LLM's
    # attention DP); experts over all tp GPUs (expert_parallel), tokens dispatched and combined by
    # all-to-all; two_batch_overlap: one half-batch's all-to-all runs while the other computes.
    dp_attention: PositiveInt = 1
    dp_balance: DpBalance = "round-robin"  # which rank takes a request: in turn, or the least loaded
    expert_load: ExpertLoad | None = None  # default: uniform over the experts, placed in order
    two_batch_overlap: bool = False
    memory_utilization: Fraction = 0.9
    activation_reserve_gb: Gigabytes | None = None  # None: estimated from the model
    host_memory_gb: Gigabytes = 64.0  # swap space per replica for preemption by swap
    kv_blocks: PositiveInt | None = None  # fixed KV blocks per replica (overrides the budget)
    price_per_gpu_hour: Annotated[float, Field(gt=0, le=1e6)] | None = None  # USD (default: the GPU's)
    power_cap_w: Annotated[float, Field(gt=0, le=1e5)] | None = None  # per GPU: a speed limit (sim/pricing/power.py)
    # USD per kWh of the GPUs' energy (default: sim/results/energy.py's USD_PER_KWH, with its source)
    energy_usd_per_kwh: Annotated[float, Field(ge=0, le=100)] | None = None
    _asked: str | None = PrivateAttr(default=None)  # the name as written, when it was an ambiguous one

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v):
        return _catalog_name(get_gpu, v) if isinstance(v, str) else v

    @model_validator(mode="wrap")
    @classmethod
    def _remember_name(cls, data, handler):
        hw = handler(data)
        if isinstance(data, dict) and isinstance(data.get("gpu"), str) and resolution(data["gpu"]):
            hw._asked = data["gpu"]
        return hw

    @model_validator(mode="after")
    def _priced(self):
        if not isinstance(self.gpu, str) and self.gpu.base is None and self.price_per_gpu_hour is None:
            raise ValueError("price_per_gpu_hour: a GPU defined without base has no catalog price; "
                             "expected hardware.price_per_gpu_hour (USD)")
        if self.power_cap_w is not None:
            from sim.pricing.power import cap_refusal

            why = cap_refusal(self.gpu_spec, self.power_cap_w)
            if why:
                raise ValueError(f"power_cap_w: {why}")
        return self

    def expert_imbalance(self, model: ModelSpec, seed: int = 0) -> float:
        """The busiest expert-parallel GPU's tokens over the mean GPU's (1: a dense model, or
        experts split by columns)."""
        if not (model.is_moe and self.expert_parallel and self.tp > 1):
            return 1.0
        from sim.pricing.wide_ep import expert_imbalance, expert_shares

        x = self.expert_load or ExpertLoad()
        shares = expert_shares(model.num_experts, x.distribution, x.skew, x.counts, seed)
        return expert_imbalance(shares, self.tp, x.redundant_experts, x.eplb)

    @property
    def redundant_experts(self) -> int:
        return self.expert_load.redundant_experts if self.expert_load is not None else 0

    @property
    def gpu_spec(self) -> GpuSpec:
        """The GPU, with ``price_per_gpu_hour`` where given."""
        spec = get_gpu(self.gpu) if isinstance(self.gpu, str) else self.gpu.spec()
        return with_price(spec, self.price_per_gpu_hour)

    @property
    def gpu_name(self) -> str:
        return self.gpu if isinstance(self.gpu, str) else self.gpu_spec.name

    @property
    def gpu_resolution(self) -> str | None:
        """How an ambiguous GPU name was read ("H100 read as H100-SXM; …"), or None."""
        return resolution(self._asked) if self._asked else None

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def engines(self) -> int:
        """The engines one replica runs in the core: a pipeline's ``pp`` virtual engines, or one per
        attention DP rank (never both: sim/scenario/load.py refuses them together)."""
        return self.pp * self.dp_attention


Rate = Annotated[float, Field(ge=0, lt=1)]
MEAN_LENGTH_TOLERANCE = 0.005  # a reported mean acceptance length, rounded to two decimals


class Speculative(Strict):
    """Speculative decoding: ``num_tokens`` (k) draft tokens per decode row and step, verified by
    the target in one step; the drafts are kept up to the first rejection, plus one token of the
    target's own. ``method``: who drafts — ``draft`` a smaller model (``draft_model``, its own
    roofline), ``mtp`` the model's own next-n prediction layer (one layer and the LM head per
    draft token), ``eagle`` an EAGLE head (one decoder layer of the target's width), ``ngram``
    prompt lookup (no GPU cost).

    How often drafts are kept, in one of four forms (``rates``: the one the run uses):

    - ``acceptance_rates: [p1, …, pk]``: p_i, the probability that draft position i is accepted
      given that positions 1..i-1 were (conditional; SpecBench's and the EAGLE papers' per-step
      rates). Its length is ``num_tokens`` (which it sets when not given).
    - ``accepted_per_position: [a1, …, ak]``: the fraction of verify steps whose position i was
      accepted, as vLLM reports it (``vllm:spec_decode_num_accepted_tokens_per_pos[i]`` /
      ``vllm:spec_decode_num_drafts``, its "per-position acceptance rate"); a_i = p1·…·p_i, so
      it cannot rise with i, and p_i = a_i / a_{i-1}.
    - ``acceptance_rate: a``: every position alike, p_i = a (0.7 when no form is given).
    - ``mean_acceptance_length: m``: the tokens a verify step yields on average, the target's own
      included, as the engines report it: every position alike, at the rate whose
      1 + a + … + a^k is m.

    A verify step then yields 1 + a1 + … + ak tokens on average (``mean_length``). Forms given
    together must agree (rates within 1e-9, a mean length within 0.005: a report's rounding);
    the per-position ones win. ``acceptance_rate`` reads back the one rate when every position
    has the same (None otherwise)."""

    method: Literal["draft", "mtp", "eagle", "ngram"] = "draft"
    draft_model: str | None = None
    num_tokens: PositiveInt = 4
    acceptance_rate: Rate | None = None
    mean_acceptance_length: Annotated[float, Field(ge=1)] | None = None
    acceptance_rates: list[Rate] | None = None
    accepted_per_position: list[Rate] | None = None

    @field_validator("draft_model")
    @classmethod
    def _known_model(cls, v: str | None) -> str | None:
        return None if v is None else _catalog_name(get_model, v)

    @model_validator(mode="after")
    def _method_and_rates(self):
        if (self.method == "draft") != (self.draft_model is not None):
            raise ValueError("draft_model: give it for method draft (a catalog model), and only then")
        given = self.acceptance_rates if self.acceptance_rates is not None else self.accepted_per_position
        if given is not None and "num_tokens" not in self.model_fields_set:
            object.__setattr__(self, "num_tokens", len(given))  # frozen: set once, while validating
        rates = position_rates(self)
        uniform = all(p == rates[0] for p in rates)
        object.__setattr__(self, "acceptance_rate", rates[0] if uniform else None)
        return self

    @cached_property
    def rates(self) -> tuple[float, ...]:
        """p1..pk: each draft position's acceptance given the ones before it were accepted."""
        return position_rates(self)

    @property
    def mean_length(self) -> float:
        """Tokens a verify step yields on average: 1 + p1 + p1·p2 + … + p1·…·pk."""
        return expected_tokens(self.rates)

    @property
    def survival(self) -> tuple[float, ...]:
        """P(at least j drafts accepted), j = 1..k (what the core's draw compares with)."""
        return tuple(survival(self.rates))


def survival(rates) -> list[float]:
    """P(at least j drafts accepted), j = 1..k: p1, p1·p2, …, multiplied in that order (the
    core's draw compares against these very numbers)."""
    out, p = [], 1.0
    for i, r in enumerate(rates):
        p = r if i == 0 else p * r
        out.append(p)
    return out


def expected_tokens(rates) -> float:
    """Tokens a verify step yields on average with per-position rates ``rates``: the target's
    own token plus each position's chance of being reached and accepted."""
    return 1.0 + sum(survival(rates))


def position_rates(sp: Speculative) -> tuple[float, ...]:
    """The conditional per-position rates of ``sp`` from whichever forms it gives (one rule:
    see ``Speculative``); forms that disagree are refused by name."""
    k = sp.num_tokens
    for name in ("acceptance_rates", "accepted_per_position"):
        v = getattr(sp, name)
        if v is not None and len(v) != k:
            raise ValueError(f"{name}: expected {k} values, one per draft token (num_tokens {k}), got {len(v)}")
    rates = None if sp.acceptance_rates is None else tuple(sp.acceptance_rates)
    if sp.accepted_per_position is not None:
        from_counts = _conditional(sp.accepted_per_position)
        if rates is not None and not _close(rates, from_counts, 1e-9):
            raise ValueError("accepted_per_position: disagrees with acceptance_rates (a_i = p1·…·p_i); give one")
        rates = rates or from_counts
    if rates is None:
        a = sp.acceptance_rate
        if a is None:
            a = 0.7 if sp.mean_acceptance_length is None else rate_for_mean_length(sp.mean_acceptance_length, k)
        rates = (a,) * k
    elif sp.acceptance_rate is not None and not _close(rates, (sp.acceptance_rate,) * k, 1e-9):
        raise ValueError(f"acceptance_rate: {sp.acceptance_rate:g} disagrees with the per-position rates "
                         f"{_show(rates)}; give one")
    m = sp.mean_acceptance_length
    if m is not None and abs(expected_tokens(rates) - m) > MEAN_LENGTH_TOLERANCE:
        rate_for_mean_length(m, k)  # a mean k drafts cannot reach is named as such
        raise ValueError(f"mean_acceptance_length: {m:g} disagrees with the rates, whose mean length is "
                         f"{expected_tokens(rates):.4g}; give one")
    return rates


def _conditional(accepted: list[float]) -> tuple[float, ...]:
    """p_i = a_i / a_{i-1} from the unconditional per-position rates a_i (vLLM's)."""
    out = []
    for i, a in enumerate(accepted):
        before = 1.0 if i == 0 else accepted[i - 1]
        if a > before:
            raise ValueError(f"accepted_per_position: position {i + 1} ({a:g}) above position {i} ({before:g}); "
                             "a draft is only accepted after the ones before it, so these cannot rise")
        p = a / before if before > 0.0 else 0.0
        if p >= 1.0:
            raise ValueError(f"accepted_per_position: position {i + 1} equals position {i} ({a:g}): every draft "
                             "that reached it was accepted; expected below (each rate below 1)")
        out.append(p)
    return tuple(out)


def _close(a, b, tol: float) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def _show(rates) -> str:
    return "[" + ", ".join(f"{p:g}" for p in rates) + "]"


def rate_for_mean_length(mean: float, k: int) -> float:
    """The per-token acceptance rate a whose expected tokens per verify step, 1 + a + … + a^k,
    equal ``mean``."""
    if not 1.0 <= mean < k + 1:
        raise ValueError(f"mean_acceptance_length: expected from 1 to below num_tokens + 1 ({k + 1}), got {mean:g}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        lo, hi = (a, hi) if sum(a**i for i in range(k + 1)) < mean else (lo, a)
    return min(lo, 0.999999)


class Scheduler(Strict):
    """How an engine batches (``sim/core/policies.py``). ``slots`` is llama.cpp's server:
    ``max_num_seqs`` slots (``--parallel``), each with its own context of ``slot_context`` tokens
    (its ``/props`` ``n_ctx``: ``-c`` over the slots), all allocated at start; ``chunk_size`` is its
    ``n_batch`` (2048 by default), the tokens one step takes."""

    policy: Policy = "continuous"
    max_num_seqs: PositiveInt = 256
    max_batched_tokens: PositiveInt = 8192  # tokens in one step (continuous batching)
    chunk_size: PositiveInt = 512  # token budget of one step (chunked prefill)
    block_size: PositiveInt = 16
    batch_size: PositiveInt = 32  # static batching
    batch_timeout_s: NonNegativeFloat = 0.1  # static batching: longest wait to fill a batch
    watermark: Annotated[float, Field(ge=0, lt=0.5)] = 0.01  # KV blocks kept free at admission
    # chunked prefill: admit a request only when its whole prompt (and a preempted request's output
    # so far) fits the free KV blocks, not just its first chunk (vLLM V1's scheduler_reserve_full_isl)
    admit_whole_prompt: bool = False
    # admission holds KV blocks for the prompt and the whole output (max_tokens), so a running request
    # never needs more and is never preempted for memory (TensorRT-LLM's GUARANTEED_NO_EVICT)
    reserve_output: bool = False
    # chunked-prefill: a prompt may be split over steps; false: it joins a step (beside the decodes)
    # only whole, when the step's budget has room for all of it (TensorRT-LLM without chunked context)
    split_prompts: bool = True
    preemption: Literal["recompute", "swap"] = "recompute"
    prefix_caching: bool = False
    speculative: Speculative | None = None
    num_scheduler_steps: PositiveInt = 1  # continuous: decode rounds of this many steps (vLLM multi-step)
    slot_context: PositiveInt | None = None  # slots: tokens each slot holds (prompt + output)

    @model_validator(mode="after")
    def _budget_holds_decodes(self):
        if self.policy in CHUNKING and self.chunk_size < self.max_num_seqs:
            raise ValueError(
                f"chunk_size ({self.chunk_size}) must be ≥ max_num_seqs ({self.max_num_seqs}): "
                "every running request decodes one token of the step's budget")
        if not self.split_prompts and self.policy == "slots":
            raise ValueError("split_prompts: false is not with policy slots (llama.cpp takes prompts in n_batch "
                             "pieces)")
        if self.num_scheduler_steps > 1 and self.policy != "continuous":
            raise ValueError("num_scheduler_steps > 1 (multi-step scheduling) needs policy: continuous")
        if self.policy == "static" and (self.prefix_caching or self.preemption == "swap"
                                        or self.speculative):
            raise ValueError("static batching reserves memory whole: prefix_caching, swap "
                             "preemption and speculative decoding need continuous or chunked-prefill")
        if (self.policy == "slots") != (self.slot_context is not None):
            raise ValueError("slot_context: give it with policy slots (the tokens each slot holds), and only then")
        if self.policy == "slots":
            for name, bad, why in (
                    ("prefix_caching", self.prefix_caching, "llama.cpp reuses a slot's own last prompt, which is "
                                                            "not modelled"),
                    ("preemption", self.preemption == "swap", "a slot holds its whole context: nothing is preempted"),
                    ("speculative", self.speculative, "llama.cpp's draft-model speculation is not modelled")):
                if bad:
                    raise ValueError(f"{name}: not with policy slots ({why})")
        return self

    def per_rank(self, ranks: int) -> Scheduler:
        """One of ``ranks`` attention DP ranks' share of the replica's limits: its running requests
        and tokens per step (SGLang divides --max-running-requests and --chunked-prefill-size by the
        DP size; TensorRT-LLM's attention DP sets them per rank)."""
        return self.model_copy(update={"max_num_seqs": max(1, self.max_num_seqs // ranks),
                                       "max_batched_tokens": max(1, self.max_batched_tokens // ranks),
                                       "chunk_size": max(1, self.chunk_size // ranks),
                                       "batch_size": max(1, self.batch_size // ranks)})


class ReplicaGroup(Strict):
    """``count`` identical replicas; fields left out take the scenario's top-level values."""

    count: Replicas = 1
    hardware: Hardware | None = None
    scheduler: Scheduler | None = None


LINKS = {  # type: (bytes/s per GPU, latency s)
    "nvlink": (450e9, 2e-6),
    "infiniband": (50e9, 5e-6),  # 400 Gb/s NDR, one NIC per GPU
    "pcie": (32e9, 10e-6),
    "ethernet": (12.5e9, 30e-6),  # 100 GbE
}


class Link(Strict):
    type: Literal["nvlink", "infiniband", "pcie", "ethernet"] = "infiniband"
    bandwidth_gbps: PositiveFloat | None = None  # GB/s per GPU (default: by type)
    latency_s: NonNegativeFloat | None = None
    layerwise_overlap: bool = False  # send each layer's KV as soon as it is computed

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_gbps * 1e9 if self.bandwidth_gbps else LINKS[self.type][0]

    @property
    def latency(self) -> float:
        return LINKS[self.type][1] if self.latency_s is None else self.latency_s


# A KV tier's defaults when the scenario gives none: a load's latency, and where the bandwidth comes
# from. cpu: each GPU copies its shard over its own host link (the GPU's host_gb_s: PCIe or C2C);
# nvme: one local PCIe 4.0 x4 drive's sequential read (~6-7 GB/s on datasheets of 2023-2025 data
# centre drives, e.g. Samsung PM9A3 6.9 GB/s); shared: a store reached over the GPUs' scale-out NICs
# (Mooncake's transfer engine, LMCache's remote backends). The latencies are a DMA's set-up, an NVMe
# read's and a store's lookup + RDMA read: orders of magnitude, to be set from a measurement.
TIER_LATENCY_S = {"cpu": 10e-6, "nvme": 100e-6, "shared": 500e-6}
NVME_GB_S = 6.0


class KvTier(Strict):
    """A KV tier below the GPU (sim/core/tierstore.py): blocks the GPU's prefix cache gives up
    go down the tiers, least recently used out first; a prompt's blocks found there are loaded
    back instead of recomputed."""

    medium: TierMedium
    capacity_gb: Annotated[float, Field(gt=0, le=1e6)]  # GiB: each replica's (cpu, nvme), or the store's (shared)
    bandwidth_gb_s: PositiveFloat | None = None  # GB/s from the tier to one replica (default: by medium)
    latency_s: NonNegativeFloat | None = None  # a load's fixed latency (default: by medium)

    def bandwidth(self, gpu: GpuSpec, tp: int) -> float:
        """Bytes/s between the tier and a replica of ``tp`` GPUs."""
        from sim.scenario.specs.gpus import LINKS as GPU_LINKS

        if self.bandwidth_gb_s is not None:
            return self.bandwidth_gb_s * 1e9
        if self.medium == "cpu":
            return gpu.host_bandwidth * tp
        if self.medium == "nvme":
            return NVME_GB_S * 1e9
        nic = GPU_LINKS[gpu.scale_out or "eth100"]
        return nic.bandwidth * tp

    @property
    def latency(self) -> float:
        return TIER_LATENCY_S[self.medium] if self.latency_s is None else self.latency_s


class KvTiers(Strict):
    """KV cache tiers below the GPU (vLLM's offloading connector, LMCache, SGLang HiCache,
    Dynamo's KV block manager, Mooncake's store), in order: a block leaves the GPU into the
    first, and a full tier's oldest goes into the next (``write: back``); or every tier stores a
    prompt's blocks as they are computed, each giving up its own oldest (``write: through``).
    ``load``, ``min_load_tokens`` and ``write`` default to the engine's
    (sim/scenario/data/engines.yaml)."""

    tiers: Annotated[list[KvTier], Field(min_length=1, max_length=4)]
    load: TierLoad | None = None  # async: the request waits for its blocks; layerwise: its step overlaps the load
    min_load_tokens: NonNegativeInt | None = None  # a shorter hit in the tiers is recomputed
    write: TierWrite | None = None  # through: a prompt's blocks go to every tier as computed; back: as the GPU evicts

    @model_validator(mode="after")
    def _shared_last(self):
        media = [t.medium for t in self.tiers]
        if "shared" in media and media.index("shared") != len(media) - 1:
            raise ValueError("a shared tier must be the last: blocks go down from a replica's own tiers into it")
        if len(set(media)) != len(media):
            raise ValueError(f"each medium at most once (tiers: {', '.join(media)})")
        return self


class Disaggregation(Strict):
    """Separate prefill and decode pools (DistServe, Splitwise, Mooncake); the KV cache moves
    from a prefill replica to a decode replica over ``link`` after the prompt is processed."""

    prefill: ReplicaGroup = ReplicaGroup()
    decode: ReplicaGroup = ReplicaGroup()
    link: Link = Link()
    # Selective (conditional) disaggregation, as Dynamo's disaggregated router decides: a request
    # goes to a decode replica first, which prefills it itself when the prompt tokens its prefix cache
    # lacks are at most local_prefill_tokens (max_local_prefill_length), or when the prefill pool's
    # queue holds more than max_prefill_queue requests per prefill replica; else a prefill replica
    # prefills it and its KV comes back to that decode replica. None: every request goes to prefill.
    local_prefill_tokens: NonNegativeInt | None = None
    max_prefill_queue: NonNegativeInt | None = None

    @model_validator(mode="after")
    def _queue_needs_selective(self):
        if self.max_prefill_queue is not None and self.local_prefill_tokens is None:
            raise ValueError("max_prefill_queue applies to selective disaggregation: set local_prefill_tokens too")
        return self


# Where a router's load signals come from, and how often (sim/core/router_signals.py).
# least-kv reads KV utilisation from the engines' metrics, as the Gateway API Inference Extension's
# endpoint picker (llm-d's scheduler) does: its kv-cache-utilization scorer scores 1 - the scraped
# KVCacheUsagePercent and its queue scorer the scraped waiting queue, refreshed every
# --refresh-metrics-interval, 50 ms by default (kubernetes-sigs/gateway-api-inference-extension,
# pkg/epp/server/options.go); vLLM production-stack's router scrapes the same gauges
# (vllm:gpu_cache_usage_perc, running and waiting requests) every --engine-stats-interval, 30 s by
# default (src/vllm_router/parsers/parser.py).
# Between samples every request goes where the last sample looked least loaded: a burst within
# one interval herds (100 replicas at 1,000 req/s: TTFT p50 0.24 s sampled every 50 ms, 0.027 s
# on the exact state), unless the router adds what it routed since (add_routed: 0.022 s).
DEFAULT_REFRESH_S = {"least-kv": 0.05}
# The other routers count what they send (exact state, refresh_s 0 by default): least-outstanding
# (production-stack's request stats, JSQ), power-of-two and the balance check of prefix-affinity
# (sgl-router's cache_aware: its own approximate radix tree and its own running counts), and
# round-robin reads nothing. Given refresh_s > 0 they read the engines' reported load instead, as
# sgl-router's and vllm-project/router's power_of_two do (/get_load polled every
# worker_load_check_interval); vllm-project/router's power_of_two adds its own in-flight count to
# the polled load "to avoid thundering herd" (src/policies/power_of_two.rs), and Dynamo's KV
# router adds the blocks of what it routed to the workers' reports (docs: router design, "active
# decoding blocks"), so add_routed defaults to true for power-of-two; the endpoint picker's
# scorers and production-stack read the scrape alone (false).
ADDS_ROUTED = ("power-of-two",)
MIN_REFRESH_S = 0.001  # faster than any real router scrapes; each refresh samples every replica


class Router(Strict):
    policy: RouterPolicy = "round-robin"
    # prefix-affinity: the replica with the longest cached prefix wins unless it has more than
    # this many outstanding requests beyond the least loaded replica
    balance_abs: NonNegativeInt = 16
    # the routers see the replicas' load (KV utilisation, outstanding requests) as sampled this
    # often; 0: the exact state; none: the policy's default (DEFAULT_REFRESH_S, else 0)
    refresh_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    # a sample becomes visible this much later (a scrape's and its propagation's latency)
    delay_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    # between samples, the router adds what it sent each replica since the sample; none: the
    # policy's default (ADDS_ROUTED)
    add_routed: bool | None = None

    @property
    def refresh(self) -> float:
        """How often the load is sampled (0: the routers see the exact state)."""
        return DEFAULT_REFRESH_S.get(self.policy, 0.0) if self.refresh_s is None else self.refresh_s

    @property
    def adds_routed(self) -> bool:
        return self.policy in ADDS_ROUTED if self.add_routed is None else self.add_routed

    # prefix-affinity: where a prompt with no remembered prefix goes: the least loaded replica, or
    # the one with the fewest prompt tokens routed there beyond the prefixes they matched (SGLang's
    # and vLLM's cache_aware routers send a cache miss to their radix tree's smallest tenant)
    no_match: RouterNoMatch = "least-loaded"

    @model_validator(mode="after")
    def _no_match_needs_prefix_affinity(self):
        # a full dump of any scenario names the default: only another rule is refused
        if self.no_match != "least-loaded" and self.policy != "prefix-affinity":
            raise ValueError("no_match applies only to policy: prefix-affinity")
        return self


# A replica's weights stream from storage at this rate per GPU, each GPU its shard: vLLM's
# default safetensors loader, Qwen3-30B-A3B on one H200, 57.4 s at 1.1 GB/s
# (https://docs.vllm.ai/en/latest/models/extensions/instanttensor/, "Benchmarks").
LOAD_BANDWIDTH_GBPS = 1.1
# Defaults of the target each policy holds: waiting requests per active replica (queue), KV
# utilisation (kv), share of the capacity model's sustainable rate (sla).
SCALE_TARGETS = {"queue": 4.0, "kv": 0.8, "sla": 0.8}


class Autoscale(Strict):
    """A fleet that grows and shrinks with its load (sim/core/autoscale.py): every
    ``interval_s`` the policy recommends a replica count, held between ``min_replicas`` and
    ``max_replicas`` and stabilised as Kubernetes' HPA does (the lowest recommendation of the
    last ``scale_up_stabilization_s``, the highest of the last ``scale_down_stabilization_s``).
    A new replica serves after ``provisioning_s`` (a node) plus its cold start (its weights
    loaded: ``cold_start_s``, or the weight bytes per GPU over ``load_bandwidth_gbps``); one
    scaled down drains: it takes no new requests and stops when it holds none."""

    min_replicas: Replicas = 1
    max_replicas: Replicas
    initial_replicas: Replicas | None = None  # serving at the start (default: min_replicas)
    policy: ScalePolicy = "queue"
    # queue: waiting requests per active replica; kv: KV utilisation (0-1]; sla: the share of
    # the capacity model's sustainable rate a replica is planned to carry (0-1]
    target: PositiveFloat | None = None
    forecast: Forecast = "last"  # sla: the next interval's rate is the last one's, or its linear trend
    interval_s: PositiveFloat = 30.0
    provisioning_s: NonNegativeFloat = 0.0  # a node's start (0: the node pool has one ready)
    cold_start_s: NonNegativeFloat | None = None  # loading the weights (default: from the bandwidth)
    load_bandwidth_gbps: PositiveFloat = LOAD_BANDWIDTH_GBPS
    tolerance: Annotated[float, Field(ge=0, lt=1)] = 0.1  # HPA: no change within ±10% of the target
    scale_up_stabilization_s: NonNegativeFloat = 0.0  # HPA's defaults
    scale_down_stabilization_s: NonNegativeFloat = 300.0

    @model_validator(mode="after")
    def _bounds(self):
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) must be ≤ max_replicas ({self.max_replicas})")
        start = self.initial_replicas
        if start is not None and not self.min_replicas <= start <= self.max_replicas:
            raise ValueError(f"initial_replicas ({start}) must lie in [min_replicas, max_replicas] = "
                             f"[{self.min_replicas}, {self.max_replicas}]")
        if self.policy in ("kv", "sla") and self.target is not None and self.target > 1:
            raise ValueError(f"target ({self.target:g}) is a share for policy {self.policy}: expected at most 1")
        return self

    @property
    def start_replicas(self) -> int:
        return self.min_replicas if self.initial_replicas is None else self.initial_replicas

    @property
    def target_value(self) -> float:
        return SCALE_TARGETS[self.policy] if self.target is None else self.target


class Cost(Strict):
    """How steps are priced. The roofline's efficiencies come from the GPU's architecture
    (sim/scenario/data/efficiency.yaml) and its overheads from the engine preset; a number given
    here replaces them for this scenario."""

    model: Literal["roofline", "profile"] = "roofline"
    profile: str | None = None  # a calibration profile (servesim calibrate), for model: profile
    compute_efficiency: Fraction | None = None  # share of peak FLOP/s large matmuls reach (the curve's plateau)
    memory_efficiency: Fraction | None = None  # share of peak HBM bandwidth
    step_overhead_s: NonNegativeFloat | None = None  # scheduling, input preparation and sampling per step

    @model_validator(mode="after")
    def _profile_given(self):
        if self.model == "profile" and not self.profile:
            raise ValueError("model: profile needs profile: FILE (from servesim calibrate)")
        return self


class Engine(Strict):
    """The serving engine whose preset (sim/scenario/data/engines.yaml) supplies the scheduling
    defaults and runtime overheads; the fields given here override the preset's."""

    name: Literal[ENGINE_NAMES] = DEFAULT_ENGINE  # type: ignore[valid-type]
    step_overhead_s: NonNegativeFloat | None = None  # per step: scheduler, input preparation, sampling
    row_overhead_s: NonNegativeFloat | None = None  # per running request per step
    layer_latency_s: NonNegativeFloat | None = None  # kernels' fixed latency per layer and step
    eager_layer_latency_s: NonNegativeFloat | None = None  # more per layer in steps that prefill (no CUDA graph)
    decode_gqa_reread: Annotated[float, Field(ge=0, le=1)] | None = None  # extra KV reads per grouped query head
    allreduce_latency_scale: NonNegativeFloat | None = None  # the engine's all-reduce latency / the link's
    request_overhead_s: NonNegativeFloat | None = None  # per request: the API server's time outside the steps
    stage_latency_s: NonNegativeFloat | None = None  # pp > 1: each stage's fixed time per micro-batch
    memory_of: Literal["total", "free"] | None = None  # what hardware.memory_utilization is a share of
    # where a linear-attention / SSM layer's state per request lives: taken from the KV blocks by
    # each running request (pool) or reserved for max_num_seqs requests (reserved); sim/scenario/memory.py
    state_memory: Literal["pool", "reserved"] | None = None

    @property
    def cost(self) -> EngineCost:
        return engine_cost(self.name, **{f: getattr(self, f) for f in COST_FIELDS})

    @property
    def memory_share_of(self) -> str:
        return self.memory_of or memory_of(self.name)

    @property
    def state_memory_in(self) -> str:
        return self.state_memory or state_memory_of(self.name)


class Simulation(Strict):
    # auto and compiled: the compiled loop (sim/loops/compiled.py; auto falls back to SimPy when
    # numba is missing); simpy: the reference loop. Both give identical results.
    loop: Literal["auto", "simpy", "compiled"] = "auto"


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica, resolved: its role, hardware, scheduler and KV memory."""

    index: int
    role: Role
    hardware: Hardware
    scheduler: Scheduler
    memory: MemoryBudget

    @property
    def gpu(self) -> GpuSpec:
        return self.hardware.gpu_spec


class Scenario(Strict):
    name: str = "scenario"
    seed: Seed = 0
    model: str | HfConfigModel = "llama-3-8b"
    engine: Engine = Engine()
    hardware: Hardware = Hardware()
    quantization: Quantization = Quantization()
    replicas: Replicas = 1
    # heterogeneous replicas (replaces replicas)
    replica_groups: Annotated[list[ReplicaGroup], Field(min_length=1)] | None = None
    disaggregation: Disaggregation | None = None  # prefill/decode pools (replaces replicas)
    router: Router = Router()
    scheduler: Scheduler = Scheduler()
    workload: WorkloadSpec = WorkloadSpec()
    cost: Cost = Cost()
    slo: Slo = Slo()
    simulation: Simulation = Simulation()
    autoscale: Autoscale | None = None  # the fleet follows its load (max_replicas replicas, not replicas)
    kv_tiers: KvTiers | None = None  # KV cache tiers below the GPU's prefix cache

    model_config = ConfigDict(**Strict.model_config, ignored_types=(cached_property,))

    @model_validator(mode="before")
    @classmethod
    def _engine_defaults(cls, data):
        if isinstance(data, dict):
            data = with_engine_defaults(data)
            if isinstance(data.get("engine"), str):
                data["engine"] = {"name": data["engine"]}
        return data

    @field_validator("model")
    @classmethod
    def _known_model(cls, v):
        if isinstance(v, str):
            _catalog_name(get_model, v)
        return v

    @model_validator(mode="after")
    def _one_layout(self):
        if self.replica_groups is not None and self.disaggregation is not None:
            raise ValueError("give replica_groups or disaggregation, not both")
        if self.replica_groups is not None and sum(g.count for g in self.replica_groups) > MAX_REPLICAS:
            raise ValueError(f"replica_groups hold more than {MAX_REPLICAS:,} replicas in all")
        if self.disaggregation is not None:
            for role in ("prefill", "decode"):
                sch = getattr(self.disaggregation, role).scheduler or self.scheduler
                if sch.policy in RESERVING:
                    raise ValueError(f"disaggregated pools need continuous or chunked-prefill scheduling: a "
                                     f"{sch.policy} engine cannot take in requests handed over mid-way (the {role} "
                                     f"pool's is {sch.policy})")
        return self

    def tier_settings(self) -> tuple[str, int, str]:
        """How blocks come back from the KV tiers (``load``), the fewest tokens worth loading,
        and when blocks go there (``write``): the scenario's, else the engine's."""
        base = kv_tiers_of(self.engine.name)
        given = self.kv_tiers.model_dump(exclude_none=True, exclude={"tiers"}) if self.kv_tiers is not None else {}
        x = {**base, **given}
        return x["load"], int(x["min_load_tokens"]), x["write"]

    # Set by the loader, never by the file: ``base_dir`` is where relative paths in the
    # scenario start from; ``source`` names the scenario (its file) in errors.
    base_dir: str = Field(default=".", exclude=True, repr=False)
    source: str = Field(default="", exclude=True, repr=False)

    @cached_property
    def model_spec(self) -> ModelSpec:
        if isinstance(self.model, str):
            return get_model(self.model)
        return model_from_hf_config(self.resolve(self.model.hf_config), self.model.name)

    @cached_property
    def model_notes(self) -> list[str]:
        """What the model's description leaves out or approximates (a vision tower not modelled,
        a freed sliding-window share still found by prefix caching), for the run's warnings."""
        notes = [f"{self.model_spec.name}: {n}" for n in self.model_spec.notes]
        if not engine_fitted(self.engine.name) and self.cost.model != "profile":
            notes.append(f"engine {self.engine.name}: its runtime overheads are not fitted (no published case ran "
                         "on it), so the roofline alone prices its steps; calibrate against the server "
                         "(servesim calibrate --endpoint) for its own costs")
        for r in self.replica_specs:
            notes += [n for n in r.memory.notes if n not in notes]
        if any(r.hardware.dp_attention > 1 for r in self.replica_specs):
            notes.append("dp_attention: each attention rank has its own queue, limits and KV cache and the ranks "
                         "step together (the slowest sets the step); expert routing as steady shares (no "
                         "small-batch noise)")
        return notes

    @cached_property
    def gpu_spec(self) -> GpuSpec:
        return self.hardware.gpu_spec

    def memory_for(self, hw: Hardware, sch: Scheduler) -> MemoryBudget:
        if hw.dp_attention > 1:  # each GPU runs its attention rank's steps: the activations of its share
            sch = sch.per_rank(hw.dp_attention)
        step_tokens = sch.chunk_size if sch.policy in CHUNKING else sch.max_batched_tokens
        act = None if hw.activation_reserve_gb is None else hw.activation_reserve_gb * 1024**3
        slots = sch.max_num_seqs * -(-sch.slot_context // sch.block_size) if sch.policy == "slots" else None
        return memory_budget(
            self.model_spec, hw.gpu_spec, tp=hw.tp, pp=hw.pp,
            utilization=hw.memory_utilization, block_size=sch.block_size,
            max_batched_tokens=step_tokens, max_num_seqs=sch.max_num_seqs,
            activation_bytes=act, weight_dtype=self.quantization.weights,
            kv_dtype=self.quantization.kv_cache, expert_parallel=hw.expert_parallel, dp=hw.dp_attention,
            redundant_experts=hw.redundant_experts,
            fixed_blocks=slots or hw.kv_blocks, share_of=self.engine.memory_share_of,
            draft_weight_bytes=self._draft_head_bytes(sch), prefix_caching=sch.prefix_caching,
            state_memory=self.engine.state_memory_in,
        )

    def _draft_head_bytes(self, sch: Scheduler) -> float:
        """Weights an MTP or EAGLE head adds to the replica (0 for other methods)."""
        sp = sch.speculative
        if sp is None or sp.method not in ("mtp", "eagle"):
            return 0.0
        head = draft_spec(sp.method, self.model_spec)
        shared = head.embedding_params * DTYPE_BYTES[head.dtype]
        return head.weight_bytes(self.quantization.weights) - shared

    @cached_property
    def memory(self) -> MemoryBudget:
        """The first replica's memory (all of them, for homogeneous scenarios)."""
        return self.replica_specs[0].memory

    @cached_property
    def replica_specs(self) -> list[ReplicaSpec]:
        groups: list[tuple[str, ReplicaGroup]]
        if self.disaggregation is not None:
            groups = [("prefill", self.disaggregation.prefill), ("decode", self.disaggregation.decode)]
        elif self.replica_groups is not None:
            groups = [("colocated", g) for g in self.replica_groups]
        else:
            count = self.replicas if self.autoscale is None else self.autoscale.max_replicas
            groups = [("colocated", ReplicaGroup(count=count))]
        specs: list[ReplicaSpec] = []
        for role, g in groups:
            hw, sch = g.hardware or self.hardware, g.scheduler or self.scheduler
            mem = self.memory_for(hw, sch)
            for _ in range(g.count):
                specs.append(ReplicaSpec(len(specs), role, hw, sch, mem))
        return specs

    @property
    def num_gpus(self) -> int:
        return sum(r.hardware.num_gpus for r in self.replica_specs)

    def resolve(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else Path(self.base_dir) / p
