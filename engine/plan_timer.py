"""Synthetic BatchPlans timed on the engine: each plan on fresh requests, wall seconds.

A plan is a list of :class:`Row` (tokens already cached, new tokens, whether it samples).
Cached tokens are a stand-in: their KV blocks are allocated but hold whatever the cache
holds, which costs the same to read. Rows with cached tokens are registered with the engine
beforehand (as a running request would be); fresh prefills draw their ids inside the step,
as they do in ``servesim execute``. Every run starts from an empty engine, so the
executor's block manager and request state never leak from one measurement to the next.

Calibration (``calibration.measure``), its speed probe and ``engine.bench`` all time plans
with :class:`PlanTimer`. No torch here: the timer drives whatever executor it is given.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.core.plan import BatchPlan, StepShape
from sim.core.requests import RequestTable


@dataclass(frozen=True)
class Row:
    computed: int  # tokens already in the KV cache
    new: int  # tokens this step processes (1: a decode when computed > 0)
    sample: bool = True


def decode_rows(batch: int, context: int | Sequence[int]) -> list[Row]:
    """``batch`` decodes; ``context`` is each row's cached length (one value or one per row)."""
    ctx = np.broadcast_to(np.asarray(context, dtype=np.int64), (batch,))
    return [Row(int(max(c, 1)), 1) for c in ctx]


def build(rows: Sequence[Row], block_size: int) -> tuple[BatchPlan, RequestTable]:
    """The plan and a request table it is valid against (request ``i`` is row ``i``)."""
    n = len(rows)
    done = np.array([r.computed for r in rows], dtype=np.int64)
    new = np.array([r.new for r in rows], dtype=np.int64)
    samples = np.array([r.sample for r in rows], dtype=bool)
    table = RequestTable(np.zeros(n), done + new, np.full(n, 2, dtype=np.int64))
    table.num_computed[:] = done
    plan = BatchPlan(req_ids=np.arange(n, dtype=np.int64), num_new_tokens=new, num_computed=done,
                     samples=samples, num_blocks=-(-(done + new) // block_size),
                     block_size=block_size)
    return plan, table


def shape_of(rows: Sequence[Row], block_size: int = 16) -> StepShape:
    return build(rows, block_size)[0].shape()


class PlanTimer:
    """Times plans on an :class:`engine.executor.EngineExecutor` (or anything with its
    ``run``, ``reset``, ``add_request``, ``blocks``, ``num_blocks``, ``block_size``, ``spec``
    and ``timer``)."""

    def __init__(self, executor):
        self.executor = executor
        self.block_size = executor.block_size
        self.capacity = executor.num_blocks * executor.block_size
        vocab = executor.spec.vocab_size
        self._ids = np.random.default_rng(0).integers(0, vocab, self.capacity, dtype=np.int64)

    def fits(self, rows: Sequence[Row]) -> bool:
        """The rows' KV fits the cache and each row the model's length."""
        bs = self.block_size
        return (all(r.computed + r.new <= self.executor.spec.max_model_len for r in rows)
                and sum(-(-(r.computed + r.new) // bs) for r in rows) <= self.executor.num_blocks)

    def run(self, rows: Sequence[Row], timer=None) -> float:
        """Wall seconds of ``executor.run`` on ``rows`` (with ``timer`` hooked in, if given).

        The free list is put back in order first, so a plan lands on the same KV blocks every
        time it runs, as a running request's steps do (and a warm-up run warms them)."""
        ex = self.executor
        ex.reset()
        ex.blocks.free_ids = deque(range(ex.num_blocks))
        plan, table = build(rows, self.block_size)
        for i, r in enumerate(rows):
            if r.computed:  # a running request: the engine already holds its ids
                ex.add_request(i, self._ids[: r.computed + r.new])
        ex.timer = timer
        try:
            return ex.run(plan, table).duration
        finally:
            ex.timer = None
            ex.reset()

    def median(self, rows: Sequence[Row], repeats: int) -> float:
        """Median seconds of ``repeats`` runs, after one untimed run of the shape."""
        self.run(rows)
        return statistics.median(self.run(rows) for _ in range(repeats))
