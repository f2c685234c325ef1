"""KV blocks of an engine: counted, not named (each request's count lives in the request table;
the real engine maps counts to physical blocks). With prefix caching, the leading full blocks
of a prompt are shared through the engine's block table (sim/core/blocktable.py): a request
holds them by reference, and unused ones stay cached until free blocks run out, when the
least recently used go first (a prompt's tail before its head).

A block is a block of tokens across all layers. Where sliding-window (or chunked) layers take
``WINDOW_PPM`` parts per million of a block's bytes and keep at most ``WINDOW_BLOCKS`` blocks of
a request (its window, + a block), the engines free their share of the blocks behind the window
(vLLM V1's SlidingWindowManager; TensorRT-LLM's cyclic cache). The rules of that, in one place:

- a request's own (unshared) blocks: ``own_blocks`` — the full-attention share of every block,
  the windowed share of those within its window;
- a cached block it shares is counted whole while some request using it has it within its
  window; once none has (a *loose* block), its windowed share is free memory (``credit``), as the
  engine frees that layer group's block. The block stays in the table: a later prompt still finds
  it, and re-takes the share if the block is within its own window (``pin_cost``);
- every request keeps its window's start (``window_from``): ``slide`` moves it as the request
  grows, ``acquire_prefix`` / ``cache_prefix`` set it, ``drop_prefix`` lets go of it.

Free memory is then ``FREE`` (cached blocks counted whole) plus the loose blocks' windowed share:
``available`` and ``in_use`` say so, and ``allocate`` may take from that share (``FREE`` below 0).
Without windowed layers, or without prefix caching, the share is 0 and every rule reduces to
counting blocks.

Two things a request holds beside its tokens' blocks, both counted in ``own_blocks_in``, the one
rule every caller goes through (admission, growth, preemption, swap, the hand-off, the KV
figures):

- *tokens in flight*: while a step computes a request's new tokens (a prefill chunk, speculative
  drafts), its windowed layers hold the window's last W - 1 tokens and all of those, + a block
  (``window_cap``, vLLM V1's SlidingWindowSpec.max_admission_blocks_per_request); the blocks past
  the resting cap are noted (``flight_blocks``) and given back when the step ends (``settle``);
- *state*: where the engine takes a running request's linear-attention / SSM state from the same
  blocks (vLLM V1's hybrid KV cache manager: MambaManager, one page per state layer padded to the
  attention layers' page), ``STATE_PPM`` millionths of a block per request, held as long as it
  holds KV (sim/scenario/memory.py: ``state_share``). Engines with a pool of their own for it
  reserve it in the memory budget instead, and ``STATE_PPM`` is 0.
"""

from __future__ import annotations

from sim.core import blocktable as bt
from sim.core import tierstore
from sim.core.jit import jit, leaf
from sim.core.state import Counter, Setting

PPM = 1_000_000


@leaf
def token_blocks(tokens, block_size):
    return -(-tokens // block_size)


@leaf
def window_cap(c, e, flight):
    """The most blocks a windowed layer holds of a request while a step computes ``flight`` of
    its tokens: the window's last W - 1 tokens and those in flight, + a block (vLLM V1's
    SlidingWindowSpec.max_admission_blocks_per_request; a chunked layer's chunk alike); at rest
    or decoding one token, ``WINDOW_BLOCKS``."""
    if flight <= 1:
        return c.settings[e, Setting.WINDOW_BLOCKS]
    return token_blocks(c.settings[e, Setting.WINDOW] - 1 + flight, c.settings[e, Setting.BLOCK_SIZE]) + 1


@leaf
def state_blocks(c, e):
    """Whole blocks a request's state adds to its tokens' blocks (without windowed layers)."""
    return -(-c.settings[e, Setting.STATE_PPM] // PPM)


@leaf
def own_blocks_in(c, e, tokens, k, flight):
    """Blocks of its own a request of ``tokens`` tokens holds when its first ``k`` blocks are
    shared through the prefix cache and a step computes ``flight`` of its tokens: its other
    blocks, their windowed share only for those within the window (``window_cap``), and its
    state where the engine takes it from the blocks (``STATE_PPM``)."""
    m = token_blocks(tokens, c.settings[e, Setting.BLOCK_SIZE]) - k
    ppm = c.settings[e, Setting.WINDOW_PPM]
    s = c.settings[e, Setting.STATE_PPM]
    w = window_cap(c, e, flight) if ppm else 0
    if ppm == 0 or m <= w:
        return m if s == 0 else m + state_blocks(c, e)
    return -(-((PPM - ppm) * m + ppm * w + s) // PPM)


@leaf
def own_blocks(c, e, tokens, k):
    """``own_blocks_in`` at rest (or decoding one token)."""
    return own_blocks_in(c, e, tokens, k, 1)


@leaf
def token_room(c, e, blocks):
    """Tokens surely held by a request holding ``blocks`` blocks (its state's aside): a request
    of no more tokens needs no more blocks, whatever its window, state or tokens in flight."""
    return (blocks - state_blocks(c, e)) * c.settings[e, Setting.BLOCK_SIZE]


@leaf
def blocks_for(c, e, tokens):
    """Blocks a request of ``tokens`` tokens holds on engine e, sharing none."""
    return own_blocks(c, e, tokens, 0)


@leaf
def short(c, e, rid, tokens, flight):
    """Blocks ``rid`` still needs to hold ``tokens`` tokens, ``flight`` of them computed by the
    coming step (0 or less: it holds enough)."""
    k = c.req.cache_blocks[rid]
    return k + own_blocks_in(c, e, tokens, k, flight) - c.req.num_blocks[rid]


@leaf
def peak_blocks(c, e, tokens, step):
    """The most blocks a request of ``tokens`` tokens holds alone, computed ``step`` tokens at a
    time: whether it can ever run."""
    return own_blocks_in(c, e, tokens, 0, min(tokens, step))


@leaf
def note_flight(c, e, rid, tokens):
    """``rid`` now holds its blocks for ``tokens`` tokens, some in flight: those past what it
    holds at rest go back when the step ends (``settle``)."""
    if c.settings[e, Setting.WINDOW_PPM]:
        r = c.req
        k = r.cache_blocks[rid]
        r.flight_blocks[rid] = max(r.num_blocks[rid] - k - own_blocks(c, e, tokens, k), 0)


@leaf
def settle(c, e, rid):
    """The step that computed ``rid``'s tokens in flight is over: its windowed layers' blocks
    behind the window go back (vLLM frees them as it next schedules the request)."""
    r = c.req
    n = r.flight_blocks[rid]
    if n:
        r.num_blocks[rid] -= n
        r.flight_blocks[rid] = 0
        release(c, e, n)


@leaf
def windowed_cache(c, e):
    """Whether engine e shares cached blocks of a model with windowed layers."""
    return c.settings[e, Setting.PREFIX] != 0 and c.settings[e, Setting.WINDOW_PPM] != 0


@leaf
def window_start(c, e, tokens):
    """The first block within the window of a request of ``tokens`` tokens."""
    return max(token_blocks(tokens, c.settings[e, Setting.BLOCK_SIZE]) - c.settings[e, Setting.WINDOW_BLOCKS], 0)


@leaf
def _credit_of(ppm, loose):
    return ppm * loose // PPM


@leaf
def credit(c, e):
    """Whole blocks' worth of memory the loose cached blocks' windowed share leaves free."""
    return _credit_of(c.settings[e, Setting.WINDOW_PPM], bt.loose(c.cache, e))


@leaf
def available(c, e):
    """Blocks free, or cached but unused (reclaimable)."""
    return c.counters[e, Counter.FREE] + bt.unused(c.cache, e) + credit(c, e)


@leaf
def in_use(c, e):
    """Blocks the requests hold (cached blocks they share counted once)."""
    return c.settings[e, Setting.NUM_BLOCKS] - available(c, e)


@jit
def allocate(c, e, n):
    free = c.counters[e, Counter.FREE] + credit(c, e)
    if n > free:
        c.counters[e, Counter.FREE] += tierstore.evict(c, e, n - free)  # down into the KV tiers
        free = c.counters[e, Counter.FREE] + credit(c, e)
    if n > 0 and n > free:
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
    """Leading cached blocks a request can reuse (leaving at least one token to compute). Every
    cached block keeps its full-attention share and, loose or not, its place in the table, so
    the windowed layers find the window before the hit too: the hit every group agrees on is
    the full-attention layers'."""
    if not c.settings[e, Setting.PREFIX]:
        return 0
    lo, hi = _ids(c, rid)
    usable = (c.req.num_tokens[rid] - 1) // c.settings[e, Setting.BLOCK_SIZE]
    return bt.leading_hits(c.cache, e, c.req.prefix_ids, lo, min(hi, lo + usable))


@jit
def pin_cost(c, e, rid, k, tokens):
    """Blocks that taking its first ``k`` cached blocks, as a request of ``tokens`` tokens, would
    take out of the available ones: the unused ones, less the windowed share of those behind its
    window (they become loose), plus the windowed share of the loose ones within it. Notes each
    block's node for ``acquire_prefix``."""
    lo, _ = _ids(c, rid)
    taken = bt.locate(c.cache, e, c.req.prefix_ids, c.req.prefix_nodes, lo, lo + k)
    if not windowed_cache(c, e):
        return taken
    split = lo + min(window_start(c, e, tokens), k)
    d = bt.loosened(c.cache, c.req.prefix_nodes, lo, split, lo + k)
    ppm, loose = c.settings[e, Setting.WINDOW_PPM], bt.loose(c.cache, e)
    return taken - (_credit_of(ppm, loose + d) - _credit_of(ppm, loose))


@jit
def acquire_prefix(c, e, rid, k, tokens):
    """Hold the first ``k`` cached blocks, at the nodes ``pin_cost`` just noted, as a request of
    ``tokens`` tokens (those within its window, with their windowed share)."""
    lo, _ = _ids(c, rid)
    bt.acquire(c.cache, e, c.req.prefix_nodes, lo, lo + k)
    if windowed_cache(c, e):
        start = window_start(c, e, tokens)
        c.req.window_from[rid] = start
        if start < k:
            bt.protect(c.cache, e, c.req.prefix_nodes, lo + start, lo + k)


@jit
def slide(c, e, rid, tokens):
    """``rid`` now holds ``tokens`` tokens: the cached blocks its window has left are no longer
    within it (they may become loose)."""
    if not windowed_cache(c, e):
        return
    r = c.req
    k = r.cache_blocks[rid]
    old = r.window_from[rid]
    new = window_start(c, e, tokens)
    if k == 0 or new <= old:
        return
    if old < k:
        lo, _ = _ids(c, rid)
        bt.unprotect(c.cache, e, r.prefix_nodes, lo + old, lo + min(new, k))
    r.window_from[rid] = new


@jit
def take(c, e, rid, n, tokens):
    """``rid`` takes ``n`` more blocks (allocated) to hold ``tokens`` tokens, some of them in
    flight; its window moves."""
    c.req.num_blocks[rid] += n
    note_flight(c, e, rid, tokens)
    slide(c, e, rid, tokens)


@jit
def drop_prefix(c, e, rid, k):
    """Let go of the first ``k`` blocks (last first, see sim/core/blocktable.py), and of the
    window within them."""
    lo, _ = _ids(c, rid)
    if windowed_cache(c, e) and c.req.window_from[rid] < k:
        bt.unprotect(c.cache, e, c.req.prefix_nodes, lo + c.req.window_from[rid], lo + k)
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
    give_back(c, e, rid)


@leaf
def give_back(c, e, rid):
    """``rid``'s own blocks (none shared any more) go back to the free ones."""
    release(c, e, c.req.num_blocks[rid])
    c.req.num_blocks[rid] = 0
    c.req.flight_blocks[rid] = 0


@leaf
def swap_size(c, e, rid):
    """Blocks ``rid``'s KV cache takes once it holds all of it itself (swapped to host memory):
    what it holds, or, sharing cached blocks of a windowed model, its computed tokens' blocks."""
    r = c.req
    if r.cache_blocks[rid] and windowed_cache(c, e):
        return min(r.num_blocks[rid], blocks_for(c, e, r.num_computed[rid]))
    return r.num_blocks[rid]


@jit
def cache_prefix(c, e, rid):
    """A request that just finished its prompt shares its full prompt blocks from now on, unless
    someone else cached the first of them meanwhile (its copies then stay private). With
    windowed layers those behind its window are loose at once, and its own blocks are counted
    anew (the memory it frees or takes goes to or from ``FREE``)."""
    r = c.req
    lo, hi = _ids(c, rid)
    start = r.cache_blocks[rid]
    full = min(r.num_computed[rid] // c.settings[e, Setting.BLOCK_SIZE], hi - lo)
    if start >= full or bt.find(c.cache, e, r.prefix_ids[lo + start]) >= 0:
        return
    windowed = windowed_cache(c, e)
    tokens = r.num_computed[rid]
    if windowed and start:
        slide(c, e, rid, tokens)  # over the blocks it shares already
    # The cache is prefix-closed and holds none past this block: the rest are new too.
    up = r.prefix_nodes[lo + start - 1] if start else -1
    bt.add_run(c.cache, e, r.prefix_ids, r.prefix_nodes, lo + start, lo + full, up)
    tierstore.store(c, e, r.prefix_ids, lo + start, lo + full)  # written through to the KV tiers
    r.cache_blocks[rid] = full
    if not windowed:
        return
    if start == 0:
        r.window_from[rid] = window_start(c, e, tokens)
    first = max(r.window_from[rid], start)
    if first < full:
        bt.protect(c.cache, e, r.prefix_nodes, lo + first, lo + full)
    held = full + own_blocks(c, e, tokens, full)
    release(c, e, r.num_blocks[rid] - held)
    r.num_blocks[rid] = held
