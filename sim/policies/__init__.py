"""Scheduling policies: pure logic from request state to a BatchPlan, shared by the simulator
and the real engine."""

from __future__ import annotations

from sim.memory import BlockAllocator
from sim.policies.base import Policy
from sim.policies.chunked import ChunkedPrefill
from sim.policies.continuous import ContinuousBatching
from sim.policies.static import StaticBatching
from sim.requests import RequestTable

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
