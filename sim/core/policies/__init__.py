"""Scheduling policies: pure logic from request state to a BatchPlan, shared by the simulator
and the real engine."""

from __future__ import annotations

from sim.core.policies.base import Policy
from sim.core.policies.chunked import ChunkedPrefill
from sim.core.policies.continuous import ContinuousBatching
from sim.core.policies.static import StaticBatching
from sim.core.requests import RequestTable
from sim.scenario.memory import BlockAllocator

POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (StaticBatching, ContinuousBatching, ChunkedPrefill)
}


def make_policy(cfg, table: RequestTable, blocks: BlockAllocator, max_model_len: int,
                **options) -> Policy:
    """Build the policy ``cfg.policy`` names (``cfg`` is a scenario's ``scheduler`` section).
    ``options``: rng (speculative decoding's draws), host_blocks (swap space), prefill_only."""
    return POLICIES[cfg.policy](cfg, table, blocks, max_model_len, **options)


__all__ = ["POLICIES", "ChunkedPrefill", "ContinuousBatching", "Policy", "StaticBatching",
           "make_policy"]
