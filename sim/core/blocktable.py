"""A block table: which content-addressed KV blocks an owner (an engine's prefix cache, or a
router's picture of a replica's cache) holds, how many requests use each, and which unused
ones to give up first (least recently used).

Blocks are named by content ids (a hash of the tokens up to and including the block, see
sim/traffic/block_hashes.py), so a block's id pins down its predecessor. Each owner has a fixed
pool of nodes (one per block it may hold) and an open-addressing index from id to node (linear
probing, at most half full, deletions shifting later entries back so no tombstones build up),
each slot holding the node and its id side by side; nodes nobody uses sit on a doubly linked LRU
list, oldest at the head.

Every owner's set is **prefix-closed**: a block is added only after its predecessor, and callers
let go of a prompt's blocks last block first, so a predecessor is always the more recently used
and the LRU list gives up a prompt's tail before its head (as vLLM frees a request's blocks and
a radix tree evicts its leaves). The blocks of a prompt an owner holds are therefore a leading
run, found by bisection, and each held block's predecessor is held too: a node points to it, so
a run's nodes are found from its last one.

For a model with sliding-window layers, a node also counts the requests using it that still
have it within their window (``protect`` / ``unprotect``); a used node within nobody's window is
*loose*: the engines have freed its windowed layers' share (sim/core/kvblocks.py counts that
share free). Its full-attention share stays, and so does its place in the table: a later prompt
still finds it.

The public functions work on a whole run of a prompt's blocks at once: each reads the table's
arrays out of its structure once and loops over plain arrays (every read of a structure's field
costs numba an atomic reference count, which would otherwise dominate). Each block costs O(1),
with no allocation.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.core.jit import HAVE_NUMBA, entry, jit, leaf, struct

EMPTY = -1
KEY, REFS, PREV, NEXT, SLOT, UP, WREFS = range(7)  # node columns (REFS -1: a free node; NEXT also links free nodes)
HEAD, TAIL, FREE, UNUSED, SIZE, LOOSE = range(6)  # owner columns (HEAD/TAIL/FREE -1: none)


class BlockTable(NamedTuple):
    off: np.ndarray  # i8 [T+1, 2]: owner t's nodes are off[t, 0] .. off[t+1, 0]-1, its index slots
    #                   off[t, 1] .. off[t+1, 1]-1 (a power of two of them)
    node: np.ndarray  # i8 [N, 7]: the block's id, the requests using it, LRU neighbours, index slot,
    #                    the node of its predecessor (-1: a prompt's first block), the requests
    #                    using it that have it within their sliding window
    owner: np.ndarray  # i8 [T, 6]: LRU head and tail, first free node, nodes on the LRU list
    #                     (unused: evictable), blocks held, loose blocks (used, but within nobody's
    #                     window: their windowed layers' share is free, sim/core/kvblocks.py)
    idx: np.ndarray  # i8 [I, 2]: each slot's node (or EMPTY) and the id it names


BlockTableType, BlockTableRef = struct("BlockTable", BlockTable._fields, __name__)


@entry
def _new_block_table(*fields):
    return BlockTableRef(*fields)


def block_table_ref(t: BlockTable):
    return _new_block_table(*t) if HAVE_NUMBA else t


def block_table(capacities: list[int]) -> BlockTable:
    """Owners that may hold ``capacities[t]`` blocks each (0: the feature is off there)."""
    caps = np.asarray(capacities, dtype=np.int64)
    slots = np.array([1 << int(2 * c).bit_length() if c else 0 for c in caps], dtype=np.int64)
    off = np.zeros((len(caps) + 1, 2), dtype=np.int64)
    off[1:, 0] = np.cumsum(caps)
    off[1:, 1] = np.cumsum(slots)
    n = int(off[-1, 0])
    node = np.full((n, 7), -1, dtype=np.int64)
    node[:, KEY] = 0
    node[:, WREFS] = 0
    node[:, NEXT] = np.arange(1, n + 1)
    node[off[1:, 0][caps > 0] - 1, NEXT] = -1  # each owner's free list ends at its last node
    owner = np.zeros((len(caps), 6), dtype=np.int64)
    owner[:, HEAD] = owner[:, TAIL] = -1
    owner[:, FREE] = np.where(caps > 0, off[:-1, 0], -1)
    return BlockTable(off, node, owner, np.full((int(off[-1, 1]), 2), EMPTY, dtype=np.int64))


# -- the table's state -----------------------------------------------------------------------
@leaf
def unused(bt, t):
    """Blocks owner t holds that nobody uses (reclaimable)."""
    return bt.owner[t, UNUSED]


@leaf
def loose(bt, t):
    """Blocks owner t holds that requests use, but none within its sliding window."""
    return bt.owner[t, LOOSE]


# -- array-level steps (inlined into the loops below) -----------------------------------------
@leaf
def _hash(key):
    x = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return x ^ (x >> np.uint64(29))


@leaf
def _find(off, idx, t, key):
    lo = off[t, 1]
    if off[t + 1, 1] == lo:
        return -1
    i, mask = _home(off, t, key)
    while True:
        n = idx[lo + i, 0]
        if n == EMPTY:
            return -1
        if idx[lo + i, 1] == key:
            return n
        i = (i + 1) & mask


@leaf
def _home(off, t, key):
    """Owner t's first index slot for ``key`` (relative to its first slot), and its mask."""
    mask = off[t + 1, 1] - off[t, 1] - 1
    return np.int64(_hash(key) & np.uint64(mask)), mask


@leaf
def _place(off, node, idx, t, n):
    lo = off[t, 1]
    i, mask = _home(off, t, node[n, KEY])
    while idx[lo + i, 0] >= 0:
        i = (i + 1) & mask
    idx[lo + i, 0] = n
    idx[lo + i, 1] = node[n, KEY]
    node[n, SLOT] = lo + i


@leaf
def _unplace(off, node, idx, t, n):
    """Take node n out of the index: later entries of its run move back into the gap where
    their first slot allows, so every run stays unbroken without tombstones."""
    lo = off[t, 1]
    mask = off[t + 1, 1] - lo - 1
    gap = node[n, SLOT] - lo
    j = gap
    while True:
        j = (j + 1) & mask
        m = idx[lo + j, 0]
        if m == EMPTY:
            break
        home, _ = _home(off, t, idx[lo + j, 1])
        if (gap < home <= j) if gap <= j else (home > gap or home <= j):
            continue  # its first slot lies after the gap (cyclically): it cannot move back
        idx[lo + gap, 0] = m
        idx[lo + gap, 1] = idx[lo + j, 1]
        node[m, SLOT] = lo + gap
        gap = j
    idx[lo + gap, 0] = EMPTY


@leaf
def _unlink(node, owner, t, n):
    p, q = node[n, PREV], node[n, NEXT]
    if p >= 0:
        node[p, NEXT] = q
    else:
        owner[t, HEAD] = q
    if q >= 0:
        node[q, PREV] = p
    else:
        owner[t, TAIL] = p
    owner[t, UNUSED] -= 1


@leaf
def _append(node, owner, t, n):
    """Onto the LRU list's newest end."""
    tail = owner[t, TAIL]
    node[n, PREV] = tail
    node[n, NEXT] = -1
    if tail >= 0:
        node[tail, NEXT] = n
    else:
        owner[t, HEAD] = n
    owner[t, TAIL] = n
    owner[t, UNUSED] += 1


@leaf
def _add(off, node, owner, idx, t, key, up, refs):
    """Hold a new block after the one at node ``up``, with ``refs`` users (not on the LRU list
    yet); needs a free node."""
    n = owner[t, FREE]
    owner[t, FREE] = node[n, NEXT]
    node[n, KEY] = key
    node[n, REFS] = refs
    node[n, PREV] = -1
    node[n, NEXT] = -1
    node[n, UP] = up
    node[n, WREFS] = 0
    _place(off, node, idx, t, n)
    owner[t, SIZE] += 1
    if refs > 0:
        owner[t, LOOSE] += 1  # used, within nobody's window until ``protect``
    return n


@leaf
def _evict_oldest(off, node, owner, idx, t):
    """Give up the least recently used unreferenced block; returns its node (-1: none)."""
    n = owner[t, HEAD]
    if n < 0:
        return -1
    _unlink(node, owner, t, n)
    _unplace(off, node, idx, t, n)
    node[n, REFS] = -1
    node[n, NEXT] = owner[t, FREE]
    owner[t, FREE] = n
    owner[t, SIZE] -= 1
    return n


# -- what the core asks of a table ------------------------------------------------------------
@jit
def find(bt, t, key):
    """The node holding ``key`` at owner ``t``, or -1."""
    return _find(bt.off, bt.idx, t, key)


@jit
def leading_hits(bt, t, ids, lo, hi):
    """How many of the chained ids ids[lo:hi], from the first, owner t holds (a leading run,
    the set being prefix-closed: O(log n) lookups)."""
    off, idx = bt.off, bt.idx
    n, m = 0, hi - lo  # ids[lo:lo+n] held, ids[lo+m] not (or the end)
    while n < m:
        mid = (n + m + 1) // 2
        if _find(off, idx, t, ids[lo + mid - 1]) >= 0:
            n = mid
        else:
            m = mid - 1
    return n


@jit
def locate(bt, t, ids, nodes, lo, hi):
    """Note in nodes[lo:hi] the nodes of the held blocks ids[lo:hi] (a prompt's first ones);
    returns how many of them nobody uses (taking them would take them out of the reclaimable
    ones)."""
    node = bt.node
    n = _find(bt.off, bt.idx, t, ids[hi - 1]) if hi > lo else -1
    free = 0
    for i in range(hi - 1, lo - 1, -1):
        nodes[i] = n
        if node[n, REFS] == 0:
            free += 1
        n = node[n, UP]
    return free


@jit
def acquire(bt, t, nodes, lo, hi):
    """One more request uses each of nodes[lo:hi] (off the LRU list if they were unused)."""
    node, owner = bt.node, bt.owner
    for i in range(lo, hi):
        n = nodes[i]
        if node[n, REFS] == 0:
            _unlink(node, owner, t, n)
            if node[n, WREFS] == 0:
                owner[t, LOOSE] += 1
        node[n, REFS] += 1


@jit
def drop(bt, t, nodes, lo, hi):
    """One request fewer uses each of nodes[lo:hi], last first; the unused go to the LRU list's
    newest end (a prompt's head newer than its tail)."""
    node, owner = bt.node, bt.owner
    for i in range(hi - 1, lo - 1, -1):
        n = nodes[i]
        node[n, REFS] -= 1
        if node[n, REFS] == 0:
            _append(node, owner, t, n)
            if node[n, WREFS] == 0:
                owner[t, LOOSE] -= 1


@jit
def protect(bt, t, nodes, lo, hi):
    """One more request using each of nodes[lo:hi] has it within its sliding window."""
    node, owner = bt.node, bt.owner
    for i in range(lo, hi):
        n = nodes[i]
        if node[n, WREFS] == 0:
            owner[t, LOOSE] -= 1
        node[n, WREFS] += 1


@jit
def unprotect(bt, t, nodes, lo, hi):
    """Each of nodes[lo:hi] (still used) has left one request's sliding window."""
    node, owner = bt.node, bt.owner
    for i in range(lo, hi):
        n = nodes[i]
        node[n, WREFS] -= 1
        if node[n, WREFS] == 0:
            owner[t, LOOSE] += 1


@jit
def loosened(bt, nodes, lo, split, hi):
    """How many more loose blocks there would be if one more request used nodes[lo:hi] (just
    located), with nodes[split:hi] within its window: the unused before ``split`` become loose,
    the loose from ``split`` on stop being so."""
    node = bt.node
    d = 0
    for i in range(lo, hi):
        n = nodes[i]
        if i < split:
            if node[n, REFS] == 0:
                d += 1
        elif node[n, REFS] > 0 and node[n, WREFS] == 0:
            d -= 1
    return d


@jit
def add_run(bt, t, ids, nodes, lo, hi, up):
    """Hold the new blocks ids[lo:hi], each used by one request, after the one at node ``up``
    (the owner holds none of them, and has a free node for each); notes their nodes."""
    off, node, owner, idx = bt.off, bt.node, bt.owner, bt.idx
    for i in range(lo, hi):
        up = _add(off, node, owner, idx, t, ids[i], up, 1)
        nodes[i] = up


@jit
def remember(bt, t, ids, lo, hi, known):
    """Mark a prompt's blocks ids[lo:hi] as just used by owner t, which holds the first
    ``known`` of them (and so none of the rest); nobody holds them by reference. The prompt's
    tail is the older, its head the most recently used; the oldest unused blocks make room
    (those of this prompt among them are then new again). An owner smaller than the prompt
    keeps its head."""
    off, node, owner, idx = bt.off, bt.node, bt.owner, bt.idx
    hi = min(hi, lo + off[t + 1, 0] - off[t, 0])
    known = min(known, hi - lo)
    last = _find(off, idx, t, ids[lo + known - 1]) if known else -1  # its deepest held block
    while owner[t, SIZE] + (hi - lo - known) > off[t + 1, 0] - off[t, 0]:
        if owner[t, HEAD] == last:
            last = node[last, UP]
            known -= 1
        _evict_oldest(off, node, owner, idx, t)
    n = last
    for i in range(lo + known, hi):  # the new blocks, each after the one before
        n = _add(off, node, owner, idx, t, ids[i], n, 0)
    while n != last:  # then the LRU list: the new blocks, last first ...
        _append(node, owner, t, n)
        n = node[n, UP]
    while n >= 0:  # ... then the held ones, up to the first
        _unlink(node, owner, t, n)
        _append(node, owner, t, n)
        n = node[n, UP]


@jit
def evict(bt, t, k):
    """Give up to ``k`` of the least recently used unreferenced blocks; returns how many went."""
    off, node, owner, idx = bt.off, bt.node, bt.owner, bt.idx
    gone = 0
    while gone < k and _evict_oldest(off, node, owner, idx, t) >= 0:
        gone += 1
    return gone


# -- lower tiers (sim/core/kvtiers.py): tables without users, not prefix-closed ----------------
@jit
def evict_into(bt, t, k, keys):
    """``evict`` up to ``k`` blocks, noting each one's id in keys[0:gone]; returns how many went."""
    off, node, owner, idx = bt.off, bt.node, bt.owner, bt.idx
    gone = 0
    while gone < k:
        n = _evict_oldest(off, node, owner, idx, t)
        if n < 0:
            break
        keys[gone] = node[n, KEY]
        gone += 1
    return gone


@jit
def stash(bt, t, key):
    """Owner t (a lower tier: nobody uses its blocks) holds ``key`` as its most recently used
    block, giving up its least recently used one if full. Returns (whether a block was given
    up, its id, whether ``key`` is new here)."""
    off, node, owner, idx = bt.off, bt.node, bt.owner, bt.idx
    n = _find(off, idx, t, key)
    if n >= 0:
        _unlink(node, owner, t, n)
        _append(node, owner, t, n)
        return False, np.int64(0), False
    out, out_key = False, np.int64(0)
    if owner[t, FREE] < 0:
        m = _evict_oldest(off, node, owner, idx, t)
        out, out_key = True, node[m, KEY]
    n = _add(off, node, owner, idx, t, key, -1, 0)
    _append(node, owner, t, n)
    return out, out_key, True


@jit
def touch(bt, t, key):
    """Owner t's block ``key`` (held, unused) becomes its most recently used."""
    n = _find(bt.off, bt.idx, t, key)
    if n >= 0:
        _unlink(bt.node, bt.owner, t, n)
        _append(bt.node, bt.owner, t, n)


@jit
def add_unused(bt, t, ids, nodes, lo, hi, up):
    """Hold the new blocks ids[lo:hi], used by nobody, after the one at node ``up`` (the owner
    holds none of them and has a free node for each); notes their nodes. On the LRU list the
    run's tail is the oldest (as ``drop`` leaves a prompt)."""
    off, node, owner, idx = bt.off, bt.node, bt.owner, bt.idx
    for i in range(lo, hi):
        up = _add(off, node, owner, idx, t, ids[i], up, 0)
        nodes[i] = up
    for i in range(hi - 1, lo - 1, -1):
        _append(node, owner, t, nodes[i])


@leaf
def capacity(bt, t):
    """Blocks owner t may hold."""
    return bt.off[t + 1, 0] - bt.off[t, 0]
