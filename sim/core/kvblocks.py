"""KV blocks of an engine: counted, not named (each request's count lives in the request table;
the real engine maps counts to physical blocks). With prefix caching, the leading full blocks
of a prompt are shared through the engine's block table (sim/core/blocktable.py): a request
holds them by reference, and unused ones stay cached until free blocks run out, when the
least recently used go first."""

from __future__ import annotations

from sim.core import blocktable as bt
from sim.core.jit import jit, leaf
from sim.core.state import P_BLOCK_SIZE, P_PREFIX, S_FREE


@leaf
def blocks_for(tokens, block_size):
    return -(-tokens // block_size)


@leaf
def available(c, e):
    """Blocks free, or cached but unused (reclaimable)."""
    return c.es[e, S_FREE] + c.cache.unused[e]


@jit
def allocate(c, e, n):
    while n > c.es[e, S_FREE] and bt.evict_oldest(c.cache, e) >= 0:
        c.es[e, S_FREE] += 1
    if n > c.es[e, S_FREE]:
        raise RuntimeError("allocating more KV blocks than are free")
    c.es[e, S_FREE] -= n


@leaf
def release(c, e, n):
    c.es[e, S_FREE] += n


@leaf
def _ids(c, rid):
    return c.req.prefix_offsets[rid], c.req.prefix_offsets[rid + 1]


@jit
def prefix_hit(c, e, rid):
    """Leading cached blocks a request can reuse (leaving at least one token to compute)."""
    if not c.ep[e, P_PREFIX]:
        return 0
    lo, hi = _ids(c, rid)
    usable = (c.req.num_tokens[rid] - 1) // c.ep[e, P_BLOCK_SIZE]
    return bt.leading_hits(c.cache, e, c.req.prefix_ids, lo, min(hi, lo + usable))


@jit
def pin_cost(c, e, rid, k):
    """Blocks that taking its first ``k`` cached blocks would take out of the reclaimable ones."""
    lo, _ = _ids(c, rid)
    n = 0
    for i in range(lo, lo + k):
        if c.cache.refs[bt.find(c.cache, e, c.req.prefix_ids[i])] == 0:
            n += 1
    return n


@jit
def acquire_prefix(c, e, rid, k):
    lo, _ = _ids(c, rid)
    for i in range(lo, lo + k):
        bt.acquire(c.cache, e, bt.find(c.cache, e, c.req.prefix_ids[i]))


@jit
def drop_prefix(c, e, rid, k):
    lo, _ = _ids(c, rid)
    for i in range(lo, lo + k):
        bt.drop(c.cache, e, bt.find(c.cache, e, c.req.prefix_ids[i]))


@jit
def drop_cache_refs(c, e, rid):
    """Let go of the cached blocks ``rid`` holds by reference (they stay cached)."""
    r = c.req
    k = r.cache_blocks[rid]
    if k:
        drop_prefix(c, e, rid, k)
        r.num_blocks[rid] -= k
        r.cache_blocks[rid] = 0


@jit
def free_blocks(c, e, rid):
    """Give back every block ``rid`` holds."""
    drop_cache_refs(c, e, rid)
    release(c, e, c.req.num_blocks[rid])
    c.req.num_blocks[rid] = 0


@jit
def cache_prefix(c, e, rid):
    """A request that just finished its prompt shares its full prompt blocks from now on. Stops
    at the first block someone else cached already (that copy stays private)."""
    r = c.req
    lo, hi = _ids(c, rid)
    start = r.cache_blocks[rid]
    full = min(r.num_computed[rid] // c.ep[e, P_BLOCK_SIZE], hi - lo)
    for i in range(lo + start, lo + full):
        if bt.find(c.cache, e, r.prefix_ids[i]) >= 0:
            break
        bt.add(c.cache, e, r.prefix_ids[i], 1)
        r.cache_blocks[rid] += 1
