"""A block table: which content-addressed KV blocks an owner (an engine's prefix cache, or a
router's picture of a replica's cache) holds, how many requests use each, and which unused
ones to give up first (least recently used).

Blocks are named by content ids (a hash of the tokens up to and including the block, see
sim/traffic/block_hashes.py). Each owner has a fixed pool of nodes (one per block it may
hold) and an open-addressing index from id to node; nodes nobody uses sit on a doubly linked
LRU list, oldest at the head. Every operation is O(1) per block, with no allocation.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.core.jit import HAVE_NUMBA, entry, jit, leaf, struct

EMPTY, TOMB = -1, -2


class BlockTable(NamedTuple):
    node_off: np.ndarray  # i8 [T+1]: owner t's nodes are node_off[t] .. node_off[t+1]-1
    idx_off: np.ndarray  # i8 [T+1]: owner t's index slots (a power of two of them)
    key: np.ndarray  # i8 [N] the block's content id
    refs: np.ndarray  # i8 [N] requests using it (-1: a free node)
    prev: np.ndarray  # i8 [N] LRU neighbours (nodes with refs == 0)
    next: np.ndarray  # i8 [N] LRU neighbour, or the next free node
    idx: np.ndarray  # i8 [I] node of each slot, EMPTY or TOMB
    head: np.ndarray  # i8 [T] least recently used unreferenced node (-1: none)
    tail: np.ndarray  # i8 [T] most recently used unreferenced node
    free: np.ndarray  # i8 [T] first free node (-1: none)
    unused: np.ndarray  # i8 [T] nodes on the LRU list (evictable)
    size: np.ndarray  # i8 [T] blocks held
    tombs: np.ndarray  # i8 [T] deleted slots not yet reused
    slot: np.ndarray  # i8 [N] the index slot that names the node (so evicting needs no probe)


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
    node_off = np.zeros(len(caps) + 1, dtype=np.int64)
    node_off[1:] = np.cumsum(caps)
    idx_off = np.zeros(len(caps) + 1, dtype=np.int64)
    idx_off[1:] = np.cumsum(slots)
    n = int(node_off[-1])
    nxt = np.arange(1, n + 1, dtype=np.int64)
    nxt[node_off[1:][caps > 0] - 1] = -1  # each owner's free list ends at its last node
    free = np.where(caps > 0, node_off[:-1], -1)
    T = len(caps)
    return BlockTable(node_off, idx_off, np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64),
                      np.full(n, -1, dtype=np.int64), nxt, np.full(int(idx_off[-1]), EMPTY, dtype=np.int64),
                      np.full(T, -1, dtype=np.int64), np.full(T, -1, dtype=np.int64), free,
                      np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64),
                      np.full(n, -1, dtype=np.int64))


@leaf
def _hash(key):
    x = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return x ^ (x >> np.uint64(29))


@jit
def find(bt, t, key):
    """The node holding ``key`` at owner ``t``, or -1."""
    lo = bt.idx_off[t]
    mask = bt.idx_off[t + 1] - lo - 1
    if mask < 0:
        return -1
    i = np.int64(_hash(key) & np.uint64(mask))
    while True:
        node = bt.idx[lo + i]
        if node == EMPTY:
            return -1
        if node >= 0 and bt.key[node] == key:
            return node
        i = (i + 1) & mask


@leaf
def _place(bt, t, node):
    lo = bt.idx_off[t]
    mask = bt.idx_off[t + 1] - lo - 1
    i = np.int64(_hash(bt.key[node]) & np.uint64(mask))
    while bt.idx[lo + i] >= 0:
        i = (i + 1) & mask
    if bt.idx[lo + i] == TOMB:
        bt.tombs[t] -= 1
    bt.idx[lo + i] = node
    bt.slot[node] = lo + i


@jit
def _rehash(bt, t):
    """Rebuild owner t's index without its tombstones."""
    bt.idx[bt.idx_off[t]:bt.idx_off[t + 1]] = EMPTY
    bt.tombs[t] = 0
    for node in range(bt.node_off[t], bt.node_off[t + 1]):
        if bt.refs[node] >= 0:
            _place(bt, t, node)


@leaf
def _lru_unlink(bt, t, node):
    p, n = bt.prev[node], bt.next[node]
    if p >= 0:
        bt.next[p] = n
    else:
        bt.head[t] = n
    if n >= 0:
        bt.prev[n] = p
    else:
        bt.tail[t] = p
    bt.unused[t] -= 1


@leaf
def _lru_append(bt, t, node):
    bt.prev[node] = bt.tail[t]
    bt.next[node] = -1
    if bt.tail[t] >= 0:
        bt.next[bt.tail[t]] = node
    else:
        bt.head[t] = node
    bt.tail[t] = node
    bt.unused[t] += 1


@jit
def add(bt, t, key, refs):
    """Hold a new block ``key`` with ``refs`` users (0: straight onto the LRU list). The owner
    must have a free node (evict first)."""
    node = bt.free[t]
    bt.free[t] = bt.next[node]
    bt.key[node] = key
    bt.refs[node] = refs
    bt.prev[node] = -1
    bt.next[node] = -1
    if refs == 0:
        _lru_append(bt, t, node)
    _place(bt, t, node)
    bt.size[t] += 1
    return node


@jit
def evict_oldest(bt, t):
    """Give up the least recently used unreferenced block; returns its node (-1: none)."""
    node = bt.head[t]
    if node < 0:
        return -1
    _lru_unlink(bt, t, node)
    bt.idx[bt.slot[node]] = TOMB
    bt.tombs[t] += 1
    bt.refs[node] = -1
    bt.next[node] = bt.free[t]
    bt.free[t] = node
    bt.size[t] -= 1
    if 4 * bt.tombs[t] > bt.idx_off[t + 1] - bt.idx_off[t]:
        _rehash(bt, t)
    return node


@jit
def acquire(bt, t, node):
    """One more request uses ``node`` (off the LRU list if it was unused)."""
    if bt.refs[node] == 0:
        _lru_unlink(bt, t, node)
    bt.refs[node] += 1


@jit
def drop(bt, t, node):
    """One request fewer uses ``node``; unused, it goes to the LRU list's newest end."""
    bt.refs[node] -= 1
    if bt.refs[node] == 0:
        _lru_append(bt, t, node)


@leaf
def touch(bt, t, node):
    """Mark an unreferenced node as just used."""
    _lru_unlink(bt, t, node)
    _lru_append(bt, t, node)


@jit
def leading_hits(bt, t, ids, lo, hi):
    """How many of ids[lo:hi], from the first, owner t holds."""
    n = 0
    for i in range(lo, hi):
        if find(bt, t, ids[i]) < 0:
            break
        n += 1
    return n


@leaf
def capacity(bt, t):
    return bt.node_off[t + 1] - bt.node_off[t]
