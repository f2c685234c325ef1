"""What the KV tiers below the GPU did in a run (sim/core/tierstore.py): per tier, the prompt
tokens loaded back from it, the loads, the bytes moved each way, and what it held that was
recomputed instead; and how much of the served prompts each level of the cache gave."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.core.state import Setting, TierStat


def block_bytes(scenario) -> np.ndarray:
    """Bytes of one KV block of each engine (every GPU's shard of it)."""
    out = []
    for spec in scenario.replica_specs:
        mem = spec.memory
        out += [mem.kv_bytes_per_token * mem.block_size * spec.hardware.tp] * spec.hardware.engines
    return np.asarray(out, dtype=np.float64)


def tier_summary(scenario, core, requests: pd.DataFrame) -> dict:
    """The ``kv_tiers`` part of a run's summary."""
    served = max(int(requests.loc[requests["status"] != "rejected", "prompt_tokens"].sum()), 1)
    bs = core.settings[:, Setting.BLOCK_SIZE].astype(np.float64)
    nbytes = block_bytes(scenario)
    load, least, write = scenario.tier_settings()
    tiers = {}
    for k, t in enumerate(scenario.kv_tiers.tiers):
        n = core.tier_n[:, k, :].astype(np.float64)
        loaded = float((n[:, TierStat.LOADED] * bs).sum())
        tiers[t.medium] = {
            "hit_tokens": int(loaded),
            "hit_rate": loaded / served,
            "loads": int(n[:, TierStat.LOADS].sum()),
            "loaded_bytes": float((n[:, TierStat.LOADED] * nbytes).sum()),
            "stored_bytes": float((n[:, TierStat.STORED] * nbytes).sum()),
            "recomputed_tokens": int((n[:, TierStat.SKIPPED] * bs).sum()),
        }
    from_tiers = sum(x["hit_tokens"] for x in tiers.values())
    cached = int(requests["cached_tokens"].sum())
    return {"load": load, "min_load_tokens": least, "write": write,
            "gpu_hit_rate": max(cached - from_tiers, 0) / served, "tiers": tiers}
