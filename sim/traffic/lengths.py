"""Prompt and output length distributions, sampled as integer arrays."""

from __future__ import annotations

import numpy as np

from sim.traffic.schema import MAX_COUNT


def sample_lengths(spec, n: int, rng: np.random.Generator, empirical: np.ndarray | None = None
                   ) -> np.ndarray:
    """Draw ``n`` token counts (≥ 1) from a length spec of the scenario schema."""
    kind = spec.dist
    if kind == "fixed":
        return np.full(n, spec.value, dtype=np.int64)
    if kind == "uniform":
        return rng.integers(spec.min, spec.max + 1, n, dtype=np.int64)
    if kind == "normal":
        x = rng.normal(spec.mean, spec.std, n)
    elif kind == "lognormal":
        mu = np.log(spec.mean) - spec.sigma**2 / 2  # so that the mean is spec.mean
        x = rng.lognormal(mu, spec.sigma, n)
    elif kind == "empirical":
        return rng.choice(empirical, n, replace=True).astype(np.int64)
    else:
        raise ValueError(f"unknown length distribution {kind!r}")
    hi = spec.max if spec.max is not None else MAX_COUNT  # a far tail would overflow int64
    return np.clip(np.rint(x), spec.min, hi).astype(np.int64)
