"""KV cache tiers below the GPU (``kv_tiers``): CPU memory, local NVMe, a store shared by the
replicas (vLLM's offloading connector and LMCache, SGLang's HiCache, Dynamo's KV block
manager, Mooncake's store).

Each tier is an owner of the ``tiers`` block table (sim/core/blocktable.py) holding content ids
nobody uses, least recently used first: engine e's k-th tier is owner ``tier_of[e, k]``, one
per engine for a replica's own memory, one for all for a shared store. Written *back*, a block
the GPU's prefix cache gives up goes down to the first tier (``evict``), a block a full tier
gives up goes to the next, and out of the last; written *through* (the engines' default), every
tier stores a prompt's blocks as they are computed (``store``) and gives up its own oldest.
A prompt's blocks past its GPU hit are looked up in the tiers in order (``lower_run``); loading
them back costs each tier's latency and its blocks at its bandwidth, one load after another on
a tier's link (``load_done``). Loads leave a copy behind, as the engines keep theirs.

What this module holds: the tables, what they were asked (``tier_n``: blocks loaded, loads,
blocks stored, blocks found but recomputed) and each link's next free time. When a request
loads and what it then holds is sim/core/kvtiers.py's.
"""

from __future__ import annotations

from sim.core import blocktable as bt
from sim.core.jit import jit, leaf
from sim.core.state import THROUGH, Setting, TierCost, TierStat


@leaf
def has_tiers(c, e):
    return c.settings[e, Setting.TIERS] > 0


@jit
def demote(c, e, key):
    """The GPU of engine e gave up block ``key``: it goes into e's first tier, which may push
    its oldest down to the next, and so on."""
    for k in range(c.settings[e, Setting.TIERS]):
        o = c.tier_of[e, k]
        out, out_key, new = bt.stash(c.tiers, o, key)
        if new:
            c.tier_n[e, k, TierStat.STORED] += 1
        if not out:
            return
        key = out_key


@jit
def store(c, e, ids, lo, hi):
    """Written through: engine e just computed the blocks ids[lo:hi]; every tier stores them,
    each as its most recently used (a prompt's head the newest)."""
    if not has_tiers(c, e) or c.settings[e, Setting.WRITE] != THROUGH:
        return
    for k in range(c.settings[e, Setting.TIERS]):
        o = c.tier_of[e, k]
        for i in range(hi - 1, lo - 1, -1):
            _, _, new = bt.stash(c.tiers, o, ids[i])
            if new:
                c.tier_n[e, k, TierStat.STORED] += 1


@jit
def evict(c, e, k):
    """Engine e's prefix cache gives up its ``k`` least recently used unused blocks (fewer if it
    has fewer), each down into its tiers when written back; returns how many went."""
    if not has_tiers(c, e) or c.settings[e, Setting.WRITE] == THROUGH:
        return bt.evict(c.cache, e, k)
    keys = c.tier_keys
    gone = bt.evict_into(c.cache, e, k, keys)
    for i in range(gone):
        demote(c, e, keys[i])
    return gone


@jit
def lower_run(c, e, ids, lo, hi):
    """How many of the chained ids ids[lo:hi], from the first, engine e's tiers hold (each in
    the first tier that has it); each tier's share is noted in ``tier_hit``."""
    K = c.settings[e, Setting.TIERS]
    for k in range(K):
        c.tier_hit[k] = 0
    n = 0
    for i in range(lo, hi):
        found = -1
        for k in range(K):
            if bt.find(c.tiers, c.tier_of[e, k], ids[i]) >= 0:
                found = k
                break
        if found < 0:
            break
        c.tier_hit[found] += 1
        n += 1
    return n


@jit
def take_back(c, e, ids, lo, hi):
    """ids[lo:hi] (just found by ``lower_run``) are loaded: each becomes its tier's most recently
    used block, and the tiers count the load."""
    K = c.settings[e, Setting.TIERS]
    for i in range(lo, hi):
        for k in range(K):
            if bt.find(c.tiers, c.tier_of[e, k], ids[i]) >= 0:
                bt.touch(c.tiers, c.tier_of[e, k], ids[i])
                break
    for k in range(K):
        if c.tier_hit[k]:
            c.tier_n[e, k, TierStat.LOADED] += c.tier_hit[k]
            c.tier_n[e, k, TierStat.LOADS] += 1


@leaf
def skipped(c, e):
    """The blocks ``lower_run`` found are recomputed instead (too few to load)."""
    for k in range(c.settings[e, Setting.TIERS]):
        c.tier_n[e, k, TierStat.SKIPPED] += c.tier_hit[k]


@jit
def load_done(c, e, now):
    """When the blocks ``lower_run`` found have reached engine e's GPU, loaded from ``now``:
    from each tier after the loads queued on its link before, at its bandwidth, plus its
    latency; the tiers load side by side."""
    done = now
    for k in range(c.settings[e, Setting.TIERS]):
        n = c.tier_hit[k]
        if n == 0:
            continue
        start = max(now, c.tier_free[e, k])
        busy = n * c.tier_cost[e, k, TierCost.BLOCK_S]
        c.tier_free[e, k] = start + busy
        done = max(done, start + busy + c.tier_cost[e, k, TierCost.LATENCY])
    return done


@jit
def forget(c, e):
    """Engine e's replica stopped: its own tiers' contents are gone (a shared store keeps its)."""
    for k in range(c.settings[e, Setting.TIERS]):
        if c.tier_cost[e, k, TierCost.SHARED] == 0.0:
            o = c.tier_of[e, k]
            bt.evict(c.tiers, o, bt.unused(c.tiers, o))
