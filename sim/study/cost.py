"""GPUs a configuration holds and what they cost per hour (the GPU's price, overridable)."""

from __future__ import annotations

from collections import Counter

from sim.scenario.specs import get_gpu


def _hardware(scenario) -> list:
    specs = getattr(scenario, "replica_specs", None)
    if specs is not None:
        return [r.hardware for r in specs]
    return [scenario.hardware] * scenario.replicas  # a scenario schema without replica specs: homogeneous


def gpu_inventory(scenario) -> dict[str, int]:
    """GPU name -> count for a validated Scenario: every replica (colocated, replica groups,
    prefill and decode pools) with its own hardware, TP × PP GPUs each."""
    counts: Counter[str] = Counter()
    for hw in _hardware(scenario):
        counts[hw.gpu_name] += hw.tp * hw.pp
    return dict(counts)


def own_prices(scenario) -> dict[str, float]:
    """USD per GPU-hour the scenario itself sets: ``hardware.price_per_gpu_hour``, or the price of
    a GPU it defines."""
    return {hw.gpu_name: hw.gpu_spec.price_per_hour for hw in _hardware(scenario)
            if hw.price_per_gpu_hour is not None or not isinstance(hw.gpu, str)}


def cost_per_hour(inventory: dict[str, int], prices: dict[str, float], own: dict[str, float] | None = None) -> float:
    """USD per hour: the scenario's ``own`` prices, else ``prices`` (a study's, by catalog name),
    else the catalog's price_per_hour."""
    own = own or {}

    def price(name: str) -> float:
        return own[name] if name in own else prices.get(name) or get_gpu(name).price_per_hour

    return sum(n * price(name) for name, n in inventory.items())
