"""GPUs a configuration holds and what they cost per hour (catalog prices, overridable)."""

from __future__ import annotations

from collections import Counter

from sim.scenario.specs import get_gpu


def gpu_inventory(scenario) -> dict[str, int]:
    """GPU name -> count for a validated Scenario: every replica (colocated, replica groups,
    prefill and decode pools) with its own hardware, TP × PP GPUs each."""
    specs = getattr(scenario, "replica_specs", None)
    if specs is not None:
        counts: Counter[str] = Counter()
        for r in specs:
            counts[get_gpu(r.hardware.gpu).name] += r.hardware.tp * r.hardware.pp
        return dict(counts)
    hw = scenario.hardware  # a scenario schema without replica specs: homogeneous replicas
    return {get_gpu(hw.gpu).name: scenario.replicas * hw.tp * hw.pp}


def cost_per_hour(inventory: dict[str, int], prices: dict[str, float]) -> float:
    """USD per hour; ``prices`` (catalog names) override the catalog's price_per_hour."""
    return sum(n * prices.get(name, get_gpu(name).price_per_hour) for name, n in inventory.items())
