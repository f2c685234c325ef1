"""Counter-based random draws: a draw is a pure function of (seed, stream, a, b).

The simulator's random choices inside the core (speculative acceptance, power-of-two
routing) are keyed by what they are about — a request and its token count, a request id —
not by the order in which they happen, so every loop, and any batching, draws the same.
"""

from __future__ import annotations

import numpy as np

from sim.core.jit import jit, leaf

SPECULATIVE, ROUTER = 1, 2  # streams


@leaf
def _mix(x):
    """splitmix64's finaliser on a uint64."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@jit
def bits(seed, stream, a, b):
    """64 random bits for the key (seed, stream, a, b)."""
    x = _mix(np.uint64(seed) + np.uint64(0x9E3779B97F4A7C15) * np.uint64(stream + 1))
    x = _mix(x ^ (np.uint64(a) * np.uint64(0xD6E8FEB86659FD93)))
    return _mix(x ^ (np.uint64(b) * np.uint64(0xA0761D6478BD642F)))


@leaf
def uniform(seed, stream, a, b):
    """A float in [0, 1) with 53 random bits."""
    return float(bits(seed, stream, a, b) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@jit
def accepted_drafts(seed, rid, generated, k, survival):
    """Speculative decoding: how many of ``k`` drafts the target accepts, up to the first
    rejection. ``survival[j - 1]``: the probability that at least j are (p1·…·pj, for the
    per-position rates p); one uniform draw u accepts the j with u < survival[j - 1]. With every
    p_i = a this is the geometric draw P(accept ≥ j) = a^j, capped at k."""
    if k == 0 or survival[0] <= 0.0:
        return 0
    u = uniform(seed, SPECULATIVE, rid, generated)
    n = 0
    while n < k and u < survival[n]:
        n += 1
    return n
