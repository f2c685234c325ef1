"""Small builders for simulator tests."""

from __future__ import annotations

from sim.scenario import scenario_from_dict


def scenario(**fields):
    """A small scenario: tiny traffic on Llama-3-8B / H100, overridable per field."""
    base = {
        "name": "test",
        "model": "llama-3-8b",
        "workload": {
            "num_requests": 200,
            "arrival": {"process": "poisson", "rate": 20},
            "prompt_len": {"dist": "uniform", "min": 16, "max": 600},
            "output_len": {"dist": "uniform", "min": 1, "max": 120},
        },
    }
    for key, value in fields.items():
        node = base
        *parents, last = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return scenario_from_dict(base, "<test>")
