"""Loading a prompt's blocks back from the KV tiers (sim/core/tierstore.py) instead of
recomputing them, as the engines decide.

At admission, the blocks of a prompt that follow its GPU prefix hit are looked up in the tiers.
A run shorter than ``MIN_LOAD`` blocks is recomputed (SGLang HiCache's load-back threshold; 0
for vLLM's offloading connector, which loads any hit). A longer one is loaded:

- ``async`` (vLLM's offloading connector, LMCache without layer-wise transfer): the request
  leaves the queue holding its GPU hit and room for the blocks to load (``start_load``); the
  others go on being scheduled; when the load is done (a LOADED event, sim/core/handlers.py)
  the loaded blocks join the GPU's prefix cache (``finish_load``) and the request is first in
  its queue again, to be admitted with them as a prefix hit;
- ``layerwise`` (SGLang HiCache, LMCache's layer-wise mode): the blocks join the GPU's prefix
  cache at once and the request is admitted in the same step, which cannot end before the load
  does (``Clock.LOAD_UNTIL``, read by ``handlers.start_step``): loading overlaps computing.

Either way a load costs what ``tierstore.load_done`` says, and the tiers keep their copies.
"""

from __future__ import annotations

from sim.core import blocktable as bt
from sim.core import kvblocks as kv
from sim.core import queues, tierstore
from sim.core.jit import jit, leaf
from sim.core.outbox import emit
from sim.core.state import ASYNC, LOAD_KV, Clock, Counter, Setting

IDLE, LOADING, JUST_LOADED = 0, 1, 2  # a request's tier_state


@jit
def lookup(c, e, rid, hit):
    """Blocks of ``rid``'s prompt after its ``hit`` GPU blocks that engine e's tiers hold (a
    leading run, leaving a token to compute); 0 right after it loaded (it is admitted with what
    it loaded, or recomputes what it lost since)."""
    r = c.req
    if r.tier_state[rid] == JUST_LOADED:
        return 0
    lo, hi = kv._ids(c, rid)
    usable = (r.num_tokens[rid] - 1) // c.settings[e, Setting.BLOCK_SIZE]
    end = min(hi, lo + usable)
    if lo + hit >= end:
        return 0
    return tierstore.lower_run(c, e, r.prefix_ids, lo + hit, end)


@leaf
def worth_loading(c, e, found):
    return found > 0 and found >= c.settings[e, Setting.MIN_LOAD]


@leaf
def waits(c, e):
    """Whether a request waits out of its queue for its blocks (async), rather than its step."""
    return c.settings[e, Setting.LOAD_MODE] == ASYNC


@jit
def load_cost(c, e, rid, hit, found):
    """Blocks a load takes out of the available ones: the GPU hit it pins and room for the
    blocks it loads (notes the hit's nodes, as ``kv.pin_cost`` does)."""
    pinned = kv.pin_cost(c, e, rid, hit, c.req.num_tokens[rid]) if hit else 0
    return pinned + found


@jit
def _start(c, e, rid, hit, found, now):
    """Pin the GPU hit, take the found blocks back from the tiers, make room for them; returns
    when they are loaded."""
    r = c.req
    lo, _ = kv._ids(c, rid)
    if hit:
        kv.acquire_prefix(c, e, rid, hit, r.num_tokens[rid])
    tierstore.take_back(c, e, r.prefix_ids, lo + hit, lo + hit + found)
    done = tierstore.load_done(c, e, now)
    kv.allocate(c, e, found)
    r.cache_blocks[rid] = hit
    r.num_blocks[rid] = hit + found
    r.loaded_tokens[rid] += found * c.settings[e, Setting.BLOCK_SIZE]
    return done


@jit
def finish_load(c, e, rid):
    """``rid``'s loaded blocks join engine e's prefix cache (those somebody cached meanwhile are
    given back), and it lets go of everything it held: it is admitted anew."""
    r = c.req
    lo, _ = kv._ids(c, rid)
    hit = r.cache_blocks[rid]
    end = r.num_blocks[rid]
    held = bt.leading_hits(c.cache, e, r.prefix_ids, lo, lo + end)  # its pinned hit, and any since
    if held < end:
        up = bt.find(c.cache, e, r.prefix_ids[lo + held - 1]) if held else -1
        bt.add_unused(c.cache, e, r.prefix_ids, r.prefix_nodes, lo + held, lo + end, up)
    kv.release(c, e, held - hit)
    r.num_blocks[rid] = hit
    kv.drop_cache_refs(c, e, rid)
    r.tier_state[rid] = JUST_LOADED


@jit
def start_load(c, e, rid, hit, found):
    """Load ``found`` blocks for ``rid`` (just taken off its queue): async, it is back in the
    queue when they are here (the outbox's LOAD_KV); layer by layer, they are in the GPU's
    prefix cache now and the coming step ends no earlier than the load."""
    now = c.clocks[e, Clock.TURN_AT]
    done = _start(c, e, rid, hit, found, now)
    if waits(c, e):
        r = c.req
        r.tier_state[rid] = LOADING
        r.ready_at[rid] = done
        c.counters[e, Counter.NLOAD] += 1
        emit(c, rid, LOAD_KV)
        return
    finish_load(c, e, rid)
    if done > c.clocks[e, Clock.LOAD_UNTIL]:
        c.clocks[e, Clock.LOAD_UNTIL] = done


@jit
def loaded(c, e, rid):
    """``rid``'s async load is done: its blocks are cached here; it waits first in its queue."""
    finish_load(c, e, rid)
    c.counters[e, Counter.NLOAD] -= 1
    queues.push_front(c, e, c.req.level[rid], rid)
