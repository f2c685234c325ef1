"""Ids of shareable KV blocks, computed as vectorised 64-bit hashes.

Two blocks get the same id exactly when their tokens and every token before them are the same
(the hash-chain rule of prefix caching). Each helper hashes a key that pins down the whole
prefix up to the end of the block: a system prompt and a block index, a conversation and a
block index, or a chain of Mooncake hash ids and an offset.
"""

from __future__ import annotations

import numpy as np

from sim.traffic.ragged import (
    offsets_from_counts,
    position_in_row,
    row_of_each_value,
    take_row_prefixes,
)

_U = np.uint64
# Distinct tags so that keys of different kinds never collide by construction.
SYSTEM_PROMPT, CONVERSATION, MOONCAKE = 1, 2, 3


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on uint64 with good avalanche."""
    x = x + _U(0x9E3779B97F4A7C15)
    x = (x ^ (x >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U(27))) * _U(0x94D049BB133111EB)
    return x ^ (x >> _U(31))


def _u64(x) -> np.ndarray:
    """As a uint64 array of at least one dimension (numpy scalars warn on overflow)."""
    a = np.atleast_1d(np.asarray(x))
    if a.dtype == np.uint64:
        return a
    return np.asarray(a, dtype=np.int64).view(np.uint64)


def hash_keys(*parts) -> np.ndarray:
    """Hash tuples of integers (arrays broadcast together) to int64 ids.
    ``hash_keys(a, b, c) == extend(hash_keys(a, b), c)``."""
    arrays = np.broadcast_arrays(*(np.asarray(p) for p in parts))
    shape = arrays[0].shape
    h = np.zeros(int(np.prod(shape)), dtype=np.int64)
    for a in arrays:
        h = extend(h, a.reshape(-1))
    return h.reshape(shape)


def extend(h: np.ndarray, part) -> np.ndarray:
    """The hash of a key ``h`` stands for, with one more integer ``part`` appended."""
    return _join(h, _mix(_u64(part)))


def _join(h: np.ndarray, mixed_part: np.ndarray) -> np.ndarray:
    """``extend`` with the part already mixed (parts that repeat are mixed once)."""
    return _mix(_u64(h) ^ mixed_part).view(np.int64)


def system_prompt_blocks(class_index: int, prompt: np.ndarray, num_blocks: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Ids of the ``num_blocks`` full blocks of each request's system prompt ``prompt[i]``:
    block j of prompt p has id hash(SYSTEM_PROMPT, class, p, j). Only the prompts in use are
    hashed (there may be many more system prompts than requests)."""
    used, row = np.unique(prompt, return_inverse=True)
    head = hash_keys(SYSTEM_PROMPT, class_index, used)
    table = extend(np.repeat(head, num_blocks), np.tile(np.arange(num_blocks), len(used)))
    table_offsets = np.arange(len(used) + 1, dtype=np.int64) * num_blocks
    return take_row_prefixes(table_offsets, table, row.reshape(-1),
                             np.full(len(prompt), num_blocks, dtype=np.int64))


def conversation_blocks(class_index: int, session: np.ndarray, system_prompt: np.ndarray,
                        system_blocks: int, num_blocks: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Ids of the first ``num_blocks[i]`` blocks of conversation turn i of ``session[i]``.
    The first ``system_blocks`` blocks lie wholly in the session's system prompt
    (``system_prompt[i]``, or -1 for none) and share its ids; later blocks belong to the
    session alone: hash(CONVERSATION, class, session, j). Each session's ids are hashed once
    and every turn gathers its prefix of them."""
    sessions, turn_session = np.unique(session, return_inverse=True)
    longest = np.zeros(len(sessions), dtype=np.int64)
    np.maximum.at(longest, turn_session, num_blocks)
    system = np.empty(len(sessions), dtype=np.int64)
    system[turn_session] = system_prompt  # the same for every turn of a session
    offsets = offsets_from_counts(longest)
    rows = row_of_each_value(offsets)
    j = position_in_row(offsets)
    table = extend(hash_keys(CONVERSATION, class_index, sessions)[rows], j)
    in_system = (j < system_blocks) & (system[rows] >= 0)
    sys_rows = rows[in_system]
    table[in_system] = hash_keys(SYSTEM_PROMPT, class_index, system[sys_rows], j[in_system])
    return take_row_prefixes(offsets, table, turn_session, num_blocks)


def mooncake_blocks(hash_offsets: np.ndarray, hash_ids: np.ndarray, prompt_len: np.ndarray,
                    hash_block_size: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Expand Mooncake hash ids (one per ``hash_block_size`` tokens) to ids of our full
    ``block_size`` blocks.

    The hash ids are first chained (chain[k] = hash(chain[k-1], hash_ids[k])) so that equal
    chains mean equal prefixes. Our block b ends at token e = (b+1)·block_size - 1, inside
    hash block k = e // hash_block_size; its id is hash(chain[k], e % hash_block_size). A
    block is listed only when it is full and its hash block is in the list.
    """
    counts = np.diff(hash_offsets)
    chain = _chained(hash_offsets, hash_ids, counts)
    num_blocks = np.minimum(prompt_len, counts * hash_block_size) // block_size
    offsets = offsets_from_counts(num_blocks)
    offset_mixed = _mix(_u64(np.arange(hash_block_size)))  # extend(chain[k], offset), each offset mixed once
    if hash_block_size % block_size:
        rows = row_of_each_value(offsets)
        end = (position_in_row(offsets) + 1) * block_size - 1
        k = hash_offsets[:-1][rows] + end // hash_block_size
        return offsets, _join(chain[k], offset_mixed[end % hash_block_size])
    return offsets, _whole_hash_blocks(hash_offsets, chain, num_blocks, int(offsets[-1]),
                                       offset_mixed[block_size - 1::block_size])


# Hash blocks expanded per pass: a few MB of temporaries, reused, where one pass over a large
# trace's tens of millions of ids would touch gigabytes of fresh memory.
_CHUNK = 1 << 15


def _whole_hash_blocks(hash_offsets: np.ndarray, chain: np.ndarray, num_blocks: np.ndarray,
                       total: int, ends_mixed: np.ndarray) -> np.ndarray:
    """``mooncake_blocks``' ids when each hash block holds ``len(ends_mixed)`` of our blocks:
    hash block k's are hash(chain[k], each block's last offset), as many as fall in the prompt."""
    per = len(ends_mixed)
    rows = row_of_each_value(hash_offsets)
    taken = np.clip(num_blocks[rows] - position_in_row(hash_offsets) * per, 0, per)
    start = offsets_from_counts(taken)
    out = np.empty(total, dtype=np.int64)
    column = np.arange(per)
    for a in range(0, len(chain), _CHUNK):
        b = min(a + _CHUNK, len(chain))
        ids = _join(chain[a:b, None], ends_mixed[None, :])
        out[start[a]:start[b]] = ids[column[None, :] < taken[a:b, None]]
    return out


def _chained(hash_offsets: np.ndarray, hash_ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """chain[k] = hash(chain[k-1], hash_ids[k]) within each row (the first from MOONCAKE):
    all rows' k-th ids in one vector operation."""
    pos = position_in_row(hash_offsets)
    order = np.argsort(pos, kind="stable")
    starts = np.searchsorted(pos[order], np.arange(int(counts.max(initial=0)) + 1))
    chain = np.empty(len(hash_ids), dtype=np.int64)
    for k in range(len(starts) - 1):
        at = order[starts[k]:starts[k + 1]]
        prev = hash_keys(MOONCAKE) if k == 0 else chain[at - 1]
        chain[at] = extend(prev, hash_ids[at])
    return chain
