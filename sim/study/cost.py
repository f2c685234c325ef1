"""GPUs a configuration holds and what they cost per hour (catalog prices, overridable)."""

from __future__ import annotations

from collections import Counter

from sim.specs import get_gpu


def gpu_inventory(scenario) -> dict[str, int]:
    """GPU name -> count for a validated Scenario.

    Scenarios that describe their own GPUs (``gpu_inventory()`` or ``num_gpus``, e.g. with
    disaggregated pools) are asked; otherwise it is replicas × TP × PP of ``hardware.gpu``.
    """
    own = getattr(scenario, "gpu_inventory", None)
    if callable(own):
        return dict(own())
    pools = getattr(scenario, "pools", None)
    if pools:
        counts: Counter[str] = Counter()
        for pool in (pools.values() if isinstance(pools, dict) else pools):
            hw = getattr(pool, "hardware", None) or scenario.hardware
            counts[get_gpu(hw.gpu).name] += getattr(pool, "replicas", 1) * hw.tp * hw.pp
        return dict(counts)
    hw = scenario.hardware
    return {get_gpu(hw.gpu).name: scenario.replicas * hw.tp * hw.pp}


def cost_per_hour(inventory: dict[str, int], prices: dict[str, float]) -> float:
    """USD per hour; ``prices`` (catalog names) override the catalog's price_per_hour."""
    return sum(n * prices.get(name, get_gpu(name).price_per_hour) for name, n in inventory.items())
