"""Small builders for simulator tests."""

from __future__ import annotations

from sim.scenario.load import scenario_from_dict


def scenario(**fields):
    """A small scenario: tiny traffic on Llama-3-8B / H100, overridable per field. Its engine is
    vLLM V0's preset (continuous batching, whole prompts: what the core's tests are written on)
    with no API server's time per request; a test of the presets or of that overhead sets ``engine``."""
    base = {
        "name": "test",
        "model": "llama-3-8b",
        "engine": {"name": "vllm-v0", "request_overhead_s": 0.0},
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


def write_profile(path, *, mode: str = "ops", tp: int = 1, tables=("linear", "other", "lm_head", "allreduce"),
                  fits=("attn_prefill", "attn_decode"), reach: int = 512) -> str:
    """A synthetic calibration profile of Llama-3-8B whose tables and fit ranges end at
    ``reach`` tokens (bigger steps extrapolate). ``mode``: which model ProfiledCost uses."""
    import json

    xs = [1.0, 8.0, 64.0, 200.0, float(reach)]
    table = lambda xs, per_x, fixed: {"x": xs, "seconds": [fixed + per_x * x for x in xs]}  # noqa: E731
    ops = {"linear": table(xs, 4e-6, 1.5e-3), "other": table(xs, 5e-7, 1e-4),
           "lm_head": table([1.0, 4.0, reach / 32], 2e-6, 3e-4),
           "allreduce": table([1e3, 1e5, reach * 4000.0], 6e-11, 1e-5),
           "attn_prefill": {"features": ["const", "prefill_rows", "prefill_attn"], "coef": [2e-4, 1e-5, 3e-10],
                            "r2": 0.99,
                            "ranges": {"prefill_rows": [1, max(8, reach // 64)], "prefill_attn": [1, reach * 300.0]}},
           "attn_decode": {"features": ["decode_context", "const", "decode_rows"], "coef": [4e-9, 1e-4, 2e-6],
                           "r2": 0.98, "ranges": {"decode_rows": [1, reach / 32], "decode_context": [1, reach * 10.0]}}}
    step = {"features": ["const", "num_tokens", "decode_context", "num_seqs", "num_sampled", "prefill_attn"],
            "coef": [3e-3, 5e-6, 4e-9, -1e-6, 3e-6, 2e-10], "r2": 0.97,
            "ranges": {"num_tokens": [1, reach], "decode_context": [1, reach * 40.0], "num_seqs": [1, 64]}}
    profile = {"schema_version": 1, "source": "test", "created": "2026-01-01",
               "device": {"name": "synthetic", "type": "cuda"},  # no catalog GPU: priced on any
               "model": "llama-3-8b", "model_shape": {"num_layers": 32}, "dtype": "bf16", "tp": tp,
               "ops": {name: ops[name] for name in ("linear", *tables, *fits) if name in ops},
               "step": step if mode == "step" else None, "prefer": mode, "overhead_s": 1.5e-3}
    with open(path, "w") as f:
        json.dump(profile, f)
    return str(path)
