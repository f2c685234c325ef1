"""What an engine's turn leaves for the loop that runs it: requests that are done (a closed-loop
user may send its next one), handed over to a decode replica, or whose KV cache may now be
sent — in the order they happened, so every loop acts on them alike."""

from __future__ import annotations

from sim.core.jit import leaf
from sim.core.state import RunCounter


@leaf
def emit(c, rid, kind):
    n = c.run_counters[RunCounter.OUT_N]
    c.out[n] = rid * 8 + kind
    c.run_counters[RunCounter.OUT_N] = n + 1


def drain(c) -> list[tuple[int, int]]:
    """(rid, kind) pairs emitted since the last drain (Python side)."""
    n = int(c.run_counters[RunCounter.OUT_N])
    if not n:
        return []
    items = c.out[:n]
    c.run_counters[RunCounter.OUT_N] = 0
    return list(zip((items >> 3).tolist(), (items & 7).tolist(), strict=True))


__all__ = ["drain", "emit"]
