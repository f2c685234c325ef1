"""KV blocks of an engine: counted, not named (each request's count lives in the request table;
the real engine maps counts to physical blocks). With prefix caching, the leading full blocks
of a prompt are shared through the engine's block table (sim/core/blocktable.py): a request
holds them by reference, and unused ones stay cached until free blocks run out, when the
least recently used go first (a prompt's tail before its head)."""

from __future__ import annotations

from sim.core import blocktable as bt
from sim.core.jit import jit, leaf
from sim.core.state import Counter, Setting


@leaf
def token_blocks(tokens, block_size):
    return -(-tokens // block_size)


@leaf
def blocks_for(c, e, tokens):
    """Blocks a request of ``tokens`` tokens holds on engine e. A block is a block of tokens
    across all layers; where sliding-window layers (``WINDOW_PPM`` parts per million of a
    block's bytes) keep at most ``WINDOW_BLOCKS`` of them, as the engines free what leaves the
    window, a long request holds that share only for its window."""
    n = token_blocks(tokens, c.settings[e, Setting.BLOCK_SIZE])
    ppm = c.settings[e, Setting.WINDOW_PPM]
    w = c.settings[e, Setting.WINDOW_BLOCKS]
    if ppm == 0 or n <= w:
        return n
    return -(-((1_000_000 - ppm) * n + ppm * w) // 1_000_000)


@leaf
def available(c, e):
    """Blocks free, or cached but unused (reclaimable)."""
    return c.counters[e, Counter.FREE] + bt.unused(c.cache, e)


@jit
def allocate(c, e, n):
    short = n - c.counters[e, Counter.FREE]
    if short > 0:
        c.counters[e, Counter.FREE] += bt.evict(c.cache, e, short)
    if n > c.counters[e, Counter.FREE]:
        raise RuntimeError("allocating more KV blocks than are free")
    c.counters[e, Counter.FREE] -= n


@leaf
def release(c, e, n):
    c.counters[e, Counter.FREE] += n


@leaf
def _ids(c, rid):
    return c.req.prefix_offsets[rid], c.req.prefix_offsets[rid + 1]


@jit
def prefix_hit(c, e, rid):
    """Leading cached blocks a request can reuse (leaving at least one token to compute)."""
    if not c.settings[e, Setting.PREFIX]:
        return 0
    lo, hi = _ids(c, rid)
    usable = (c.req.num_tokens[rid] - 1) // c.settings[e, Setting.BLOCK_SIZE]
    return bt.leading_hits(c.cache, e, c.req.prefix_ids, lo, min(hi, lo + usable))


@jit
def pin_cost(c, e, rid, k):
    """Blocks that taking its first ``k`` cached blocks would take out of the reclaimable ones.
    Notes each block's node for ``acquire_prefix``."""
    lo, _ = _ids(c, rid)
    return bt.locate(c.cache, e, c.req.prefix_ids, c.req.prefix_nodes, lo, lo + k)


@jit
def acquire_prefix(c, e, rid, k):
    """Hold the first ``k`` cached blocks, at the nodes ``pin_cost`` just noted."""
    lo, _ = _ids(c, rid)
    bt.acquire(c.cache, e, c.req.prefix_nodes, lo, lo + k)


@jit
def drop_prefix(c, e, rid, k):
    """Let go of the first ``k`` blocks (last first, see sim/core/blocktable.py)."""
    lo, _ = _ids(c, rid)
    bt.drop(c.cache, e, c.req.prefix_nodes, lo, lo + k)


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
    """A request that just finished its prompt shares its full prompt blocks from now on, unless
    someone else cached the first of them meanwhile (its copies then stay private)."""
    r = c.req
    lo, hi = _ids(c, rid)
    start = r.cache_blocks[rid]
    full = min(r.num_computed[rid] // c.settings[e, Setting.BLOCK_SIZE], hi - lo)
    if start >= full or bt.find(c.cache, e, r.prefix_ids[lo + start]) >= 0:
        return
    # The cache is prefix-closed and holds none past this block: the rest are new too.
    up = r.prefix_nodes[lo + start - 1] if start else -1
    bt.add_run(c.cache, e, r.prefix_ids, r.prefix_nodes, lo + start, lo + full, up)
    r.cache_blocks[rid] = full
