"""Request state as a table of numpy columns: one row per request, no object per request.

The scheduling core reads and writes these columns (``arrays()`` hands them over as one typed
tuple); metrics read them afterwards. Token accounting follows vLLM: ``num_tokens`` is the
prompt plus the tokens generated so far, ``num_computed`` how many of them are in the KV
cache. A step processes ``num_tokens - num_computed`` tokens (a whole prompt, a chunk of it,
or 1 for a decode) and, when it catches up, samples a token. Preemption by recompute resets
``num_computed`` to 0: the request later prefills its prompt and its output so far.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import numpy as np

from sim.core.jit import HAVE_NUMBA, entry, struct


class Status(IntEnum):
    PENDING = 0  # not arrived yet
    WAITING = 1  # queued at a replica (waiting, swapped out, or waiting for room for its KV)
    RUNNING = 2  # holds KV blocks, being prefilled or decoded
    FINISHED = 3
    REJECTED = 4
    TRANSFER = 5  # prefilled on a prefill replica, its KV cache on its way to a decode replica


class RejectReason(IntEnum):
    NONE = 0
    EXCEEDS_KV_CAPACITY = 1  # prompt + output can never fit in the replica's KV blocks
    EXCEEDS_MAX_MODEL_LEN = 2
    EXCEEDS_BATCH_TOKENS = 3  # prompt longer than one step may carry (no chunking)

    @property
    def text(self) -> str:
        return _REASON_TEXT[self]


_REASON_TEXT = {
    RejectReason.NONE: "",
    RejectReason.EXCEEDS_KV_CAPACITY: "prompt + output exceed the replica's KV cache capacity",
    RejectReason.EXCEEDS_MAX_MODEL_LEN: ("prompt + output exceed what one sequence may hold (the model's max "
                                         "length; with slots, a slot's context)"),
    RejectReason.EXCEEDS_BATCH_TOKENS: ("prompt exceeds the tokens of one step (max_batched_tokens; chunk_size with "
                                        "split_prompts off) and chunking is off"),
}


class Requests(NamedTuple):
    """The columns, as the core's compiled functions take them."""

    arrival: np.ndarray  # f8: when it arrived (set when the loop submits it)
    prompt_len: np.ndarray  # i8
    output_len: np.ndarray  # i8: max new tokens
    num_tokens: np.ndarray  # i8
    num_computed: np.ndarray  # i8
    num_generated: np.ndarray  # i8
    num_blocks: np.ndarray  # i8: KV blocks held (cached leading blocks included)
    status: np.ndarray  # i1 Status
    reject_reason: np.ndarray  # i1 RejectReason
    replica: np.ndarray  # i4: where it was routed (-1: nowhere yet)
    engine: np.ndarray  # i4: the engine (a replica's, or one of a pipelined replica's) it is at
    source: np.ndarray  # i4: handed over: the prefill engine that keeps its KV until it is sent
    decode_at: np.ndarray  # i4: selective disaggregation: the decode replica it goes back to (-1: routed then)
    preemptions: np.ndarray  # i4
    first_scheduled: np.ndarray  # f8
    first_token: np.ndarray  # f8
    completion: np.ndarray  # f8
    last_token: np.ndarray  # f8: when its latest token came out (inter-token gaps)
    cached_tokens: np.ndarray  # i8: prompt tokens served by the prefix cache
    cache_blocks: np.ndarray  # i8: leading blocks it holds through the prefix cache
    swapped_blocks: np.ndarray  # i8: KV blocks parked in host memory
    held_blocks: np.ndarray  # i8: handed over: blocks its prefill replica keeps until the KV is sent
    held_cached: np.ndarray  # i8: of which shared through the prefix cache
    window_from: np.ndarray  # i8: its first cached block within its sliding window (sim/core/kvblocks.py)
    flight_blocks: np.ndarray  # i8: of its blocks, those its step's tokens in flight take past its window (kvblocks)
    handoff_s: np.ndarray  # f8: handed over: the duration of the step that prefilled it
    loaded_tokens: np.ndarray  # i8: prompt tokens loaded back from the KV tiers (sim/core/kvtiers.py)
    tier_state: np.ndarray  # i1: idle, loading from the KV tiers, or just loaded
    ready_at: np.ndarray  # f8: loading: when its blocks are here
    class_id: np.ndarray  # i2
    level: np.ndarray  # i2: priority level, 0 served first
    prefix_offsets: np.ndarray  # i8 [n+1]: its shareable block ids are prefix_ids[off[i]:off[i+1]]
    prefix_ids: np.ndarray  # i8
    prefix_nodes: np.ndarray  # i4 [len(prefix_ids)]: the cache node of each block it holds
    qnext: np.ndarray  # i8: the next request in the queue it waits in (-1: last)
    qprev: np.ndarray  # i8


RequestsType, RequestsRef = struct("Requests", Requests._fields, __name__)


@entry
def _new_requests(*fields):
    return RequestsRef(*fields)


def requests_ref(cols: Requests):
    """The columns as the compiled core takes them (the same arrays)."""
    return _new_requests(*cols) if HAVE_NUMBA else cols


class RequestTable:
    """The columns of every request of a run, in arrival order."""

    def __init__(self, arrival: np.ndarray, prompt_len: np.ndarray, output_len: np.ndarray):
        n = len(arrival)
        if not (len(prompt_len) == len(output_len) == n):
            raise ValueError("arrival, prompt_len and output_len must have the same length")
        self.n = n
        self.class_names: tuple[str, ...] = ("default",)
        self.priority = np.zeros(n, dtype=np.int16)
        i8 = lambda: np.zeros(n, dtype=np.int64)  # noqa: E731
        nan = lambda: np.full(n, np.nan)  # noqa: E731
        self.cols = Requests(
            arrival=np.array(arrival, dtype=np.float64), prompt_len=np.array(prompt_len, dtype=np.int64),
            output_len=np.array(output_len, dtype=np.int64), num_tokens=np.array(prompt_len, dtype=np.int64),
            num_computed=i8(), num_generated=i8(), num_blocks=i8(), status=np.zeros(n, dtype=np.int8),
            reject_reason=np.zeros(n, dtype=np.int8), replica=np.full(n, -1, dtype=np.int32),
            engine=np.full(n, -1, dtype=np.int32), source=np.full(n, -1, dtype=np.int32),
            decode_at=np.full(n, -1, dtype=np.int32),
            preemptions=np.zeros(n, dtype=np.int32),
            first_scheduled=nan(), first_token=nan(), completion=nan(), last_token=nan(),
            cached_tokens=i8(), cache_blocks=i8(), swapped_blocks=i8(), held_blocks=i8(), held_cached=i8(),
            window_from=i8(), flight_blocks=i8(),
            handoff_s=np.zeros(n), loaded_tokens=i8(), tier_state=np.zeros(n, dtype=np.int8),
            ready_at=np.zeros(n), class_id=np.zeros(n, dtype=np.int16), level=np.zeros(n, dtype=np.int16),
            prefix_offsets=np.zeros(n + 1, dtype=np.int64), prefix_ids=np.zeros(0, dtype=np.int64),
            prefix_nodes=np.zeros(0, dtype=np.int32),
            qnext=np.full(n, -1, dtype=np.int64), qprev=np.full(n, -1, dtype=np.int64))

    @classmethod
    def from_workload(cls, w) -> RequestTable:
        t = cls(w.arrival, w.prompt_len, w.output_len)
        if w.class_id is not None:
            t.class_id[:] = w.class_id
            t.class_names = tuple(w.class_names)
        if w.priority is not None:
            t.set_priority(w.priority)
        if w.prefix_offsets is not None:
            t.set_prefix_ids(w.prefix_offsets, w.prefix_hashes)
        return t

    def set_prefix_ids(self, offsets: np.ndarray, ids: np.ndarray) -> None:
        """Request i's shareable prompt blocks are ids[offsets[i]:offsets[i+1]] (content ids)."""
        ids = np.asarray(ids, dtype=np.int64)
        self.cols = self.cols._replace(prefix_offsets=np.asarray(offsets, dtype=np.int64), prefix_ids=ids,
                                       prefix_nodes=np.empty(len(ids), dtype=np.int32))

    def set_priority(self, priority: np.ndarray) -> None:
        """Priorities (lower first) and the levels the core queues by (0 = the lowest value)."""
        self.priority = np.asarray(priority, dtype=np.int16)
        self.level[:] = np.searchsorted(np.unique(self.priority), self.priority)

    @property
    def num_levels(self) -> int:
        return int(self.level.max(initial=0)) + 1

    def arrays(self) -> Requests:
        return self.cols

    def prefix_blocks(self, rid: int) -> np.ndarray:
        off = self.prefix_offsets
        return self.prefix_ids[off[rid]:off[rid + 1]]

    def __len__(self) -> int:
        return self.n

    def __getattr__(self, name: str):  # table.status, table.first_token, ...: the columns
        cols = self.__dict__.get("cols")
        if cols is not None and name in Requests._fields:
            return getattr(cols, name)
        raise AttributeError(name)
