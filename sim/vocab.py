"""The names a scenario chooses among, each list written once: the schema accepts them
(``Literal``s) and the core's codes are derived from them (a name's code is its place), so a
name cannot be accepted without a code, nor a code exist without a name
(tests/sim/core/test_vocab.py checks that every name also has its branch in the core)."""

from __future__ import annotations

from typing import Literal, get_args

Policy = Literal["static", "continuous", "chunked-prefill", "slots"]  # how an engine batches
# policies whose step budget is chunk_size (prompts in chunks, decodes first)
CHUNKING: tuple[Policy, ...] = ("chunked-prefill", "slots")
# policies that hold a request's memory whole: no watermark, nothing preempted, nothing handed over
RESERVING: tuple[Policy, ...] = ("static", "slots")
RouterPolicy = Literal["round-robin", "least-outstanding", "least-kv", "power-of-two", "prefix-affinity"]
Role = Literal["colocated", "prefill", "decode"]  # what a replica's engines do (disaggregation)
# which attention DP rank of a replica takes a request (SGLang's --load-balance-method): in turn, or
# the one with the fewest requests waiting and running
DpBalance = Literal["round-robin", "shortest-queue"]
# prefix-affinity: where a prompt with no remembered prefix goes
RouterNoMatch = Literal["least-loaded", "smallest-record"]
ScalePolicy = Literal["queue", "kv", "sla"]  # what an autoscaler sizes the fleet by (sim/core/autoscale.py)
Forecast = Literal["last", "trend"]  # the SLA planner's next-interval arrival rate
# how blocks come back from the KV tiers (sim/core/kvtiers.py): the request waits for them, or
# the step overlaps their load layer by layer
TierLoad = Literal["async", "layerwise"]
TierMedium = Literal["cpu", "nvme", "shared"]  # where a KV tier keeps its blocks
# when blocks reach the KV tiers: as a prompt's blocks are computed (every tier), or as the GPU gives
# them up (into the first, whose oldest go into the next)
TierWrite = Literal["back", "through"]


def codes(names) -> dict[str, int]:
    """Each name of a ``Literal`` and its code: its place in the list."""
    return {name: code for code, name in enumerate(get_args(names))}


def constant(name: str) -> str:
    """The name of a code's constant in the core: ``chunked-prefill`` → ``CHUNKED_PREFILL``."""
    return name.upper().replace("-", "_")


POLICIES = codes(Policy)
ROUTERS = codes(RouterPolicy)
ROLES = codes(Role)
DP_BALANCES = codes(DpBalance)
NO_MATCH = codes(RouterNoMatch)
SCALE_POLICIES = codes(ScalePolicy)
FORECASTS = codes(Forecast)
TIER_LOADS = codes(TierLoad)
TIER_WRITES = codes(TierWrite)
