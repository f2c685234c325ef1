"""What every scheduling policy shares: queues, admission checks, block growth, commit.

A policy is pure logic with no clock: ``schedule(now)`` turns the request table and the
queues into a BatchPlan (``now`` only matters for batching timeouts), and ``commit`` applies
the step's outcome. The simulator and the real engine drive the very same objects.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sim.memory import BlockAllocator
from sim.plan import BatchPlan
from sim.requests import RejectReason, RequestTable, Status

_EMPTY = np.zeros(0, dtype=np.int64)


class Policy:
    name = "base"
    keeps_blocks_until_batch_end = False

    def __init__(self, cfg, table: RequestTable, blocks: BlockAllocator, max_model_len: int):
        self.cfg = cfg
        self.table = table
        self.blocks = blocks
        self.max_model_len = max_model_len
        self.waiting: deque[int] = deque()
        self.running = _EMPTY  # admission order: the last one is preempted first
        self.wake_at = np.inf  # when scheduling may change with no arrival (batch timeouts)
        self._freed: list[int] = []
        self._preempted: list[int] = []
        self.rejected: list[int] = []

    # -- queue -------------------------------------------------------------------------------
    def add(self, rid: int) -> None:
        self.table.status[rid] = Status.WAITING
        self.waiting.append(rid)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting) or self.running.size > 0

    @property
    def queue_len(self) -> int:
        return len(self.waiting)

    def schedule(self, now: float) -> BatchPlan | None:
        raise NotImplementedError

    # -- fast-forward hooks (see sim/fastforward.py) -----------------------------------------
    def can_fast_forward(self, plan: BatchPlan) -> bool:
        """Would this pure-decode plan repeat unchanged until a completion, an arrival that
        may join, or a KV block shortage? True when every running request decodes in it and
        the queue (if any) is blocked by memory or slots, which decodes never free."""
        return (plan.num_seqs == self.running.size and plan.preempted.size == 0
                and bool(plan.samples.all())
                and bool(plan.is_decode.all()))

    def arrival_may_join(self) -> bool:
        """Could a request arriving now join the batch at the next step?"""
        return not self.waiting

    # -- admission -------------------------------------------------------------------------
    def _never_fits(self, rid: int) -> RejectReason:
        t = self.table
        total = int(t.prompt_len[rid] + t.output_len[rid])
        if total > self.max_model_len:
            return RejectReason.EXCEEDS_MAX_MODEL_LEN
        if self.blocks.blocks_for(total) > self.blocks.num_blocks:
            return RejectReason.EXCEEDS_KV_CAPACITY
        return RejectReason.NONE

    def _reject(self, rid: int, reason: RejectReason) -> None:
        self.table.status[rid] = Status.REJECTED
        self.table.reject_reason[rid] = reason
        self.rejected.append(rid)

    def _admit_waiting(self, token_budget: int, seq_budget: int, *, chunked: bool,
                       step_capacity: int | None = None, reserve_tokens=None
                       ) -> tuple[list[int], list[int]]:
        """Move requests from the head of the queue into ``running`` while they fit.

        Returns the admitted ids and the tokens each processes this step. ``reserve_tokens``
        (rid -> tokens) reserves blocks for more than this step's tokens (static batching).
        ``step_capacity`` is the most tokens any one step may carry (default: the budget).
        """
        step_capacity = token_budget if step_capacity is None else step_capacity
        t, blocks = self.table, self.blocks
        ids: list[int] = []
        new: list[int] = []
        free = blocks.free - self._watermark_blocks()
        while self.waiting and token_budget > 0 and len(ids) < seq_budget:
            rid = self.waiting[0]
            reason = self._never_fits(rid)
            if reason:
                self.waiting.popleft()
                self._reject(rid, reason)
                continue
            remaining = int(t.num_tokens[rid] - t.num_computed[rid])
            n = min(remaining, token_budget) if chunked else remaining
            if n > token_budget:
                oversized = n > step_capacity
                if oversized and t.num_generated[rid] == 0:
                    # A whole prompt larger than any step: it can never be scheduled.
                    self.waiting.popleft()
                    self._reject(rid, RejectReason.EXCEEDS_BATCH_TOKENS)
                    continue
                if not (oversized and not ids):
                    break  # wait for the next step's budget
                # A preempted request whose prompt + output so far outgrew a step runs alone.
            reserve = n if reserve_tokens is None else reserve_tokens(rid)
            need = int(blocks.blocks_for(int(t.num_computed[rid]) + reserve)) - int(t.num_blocks[rid])
            if need > free:
                break
            self.waiting.popleft()
            blocks.allocate(need)
            free -= need
            t.num_blocks[rid] += need
            t.status[rid] = Status.RUNNING
            ids.append(rid)
            new.append(n)
            token_budget -= n
        if ids:
            self.running = np.concatenate([self.running, np.asarray(ids, dtype=np.int64)])
        return ids, new

    def _watermark_blocks(self) -> int:
        return int(getattr(self.cfg, "watermark", 0.0) * self.blocks.num_blocks)

    # -- memory pressure ---------------------------------------------------------------------
    def _grow(self, ids: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Give rows the blocks their new tokens need, preempting the newest running requests
        (by recompute) until everything left fits. Returns the surviving rows."""
        t, blocks = self.table, self.blocks
        while True:
            need = np.maximum(blocks.blocks_for(t.num_computed[ids] + new) - t.num_blocks[ids], 0)
            total = int(need.sum())
            if total <= blocks.free or self.running.size == 0:
                break
            victim = int(self.running[-1])
            self._preempt(victim)
            keep = ids != victim
            ids, new = ids[keep], new[keep]
        blocks.allocate(total)
        t.num_blocks[ids] += need
        return ids, new

    def _preempt(self, rid: int) -> None:
        t = self.table
        self.blocks.release(int(t.num_blocks[rid]))
        t.num_blocks[rid] = 0
        t.num_computed[rid] = 0
        t.status[rid] = Status.WAITING
        t.preemptions[rid] += 1
        self.running = self.running[self.running != rid]
        self.waiting.appendleft(rid)
        self._preempted.append(rid)

    # -- plans and commits -------------------------------------------------------------------
    def _plan(self, ids, new) -> BatchPlan:
        t = self.table
        ids = np.asarray(ids, dtype=np.int64)
        new = np.asarray(new, dtype=np.int64)
        computed = t.num_computed[ids]
        plan = BatchPlan(
            req_ids=ids,
            num_new_tokens=new,
            num_computed=computed,
            samples=computed + new == t.num_tokens[ids],
            num_blocks=t.num_blocks[ids],
            freed=np.asarray(self._freed, dtype=np.int64) if self._freed else _EMPTY,
            preempted=np.asarray(self._preempted, dtype=np.int64) if self._preempted else _EMPTY,
        )
        self._freed = []
        self._preempted = []
        return plan

    def commit(self, plan: BatchPlan, stopped: np.ndarray | None = None) -> np.ndarray:
        """Apply a finished step: tokens computed, tokens sampled, requests finished.

        ``stopped`` marks rows whose sampled token was an end-of-sequence (real engine only).
        Returns the ids that finished.
        """
        t = self.table
        ids = plan.req_ids
        t.num_computed[ids] += plan.num_new_tokens
        sampled = ids[plan.samples]
        t.num_generated[sampled] += 1
        t.num_tokens[sampled] += 1
        done_mask = t.num_generated[sampled] >= t.output_len[sampled]
        if stopped is not None:
            done_mask |= np.asarray(stopped, dtype=bool)[plan.samples]
        done = sampled[done_mask]
        if done.size:
            self._finish(done)
        return done

    def _finish(self, done: np.ndarray) -> None:
        t = self.table
        t.status[done] = Status.FINISHED
        if not self.keeps_blocks_until_batch_end:
            self._release(done)
        self.running = self.running[t.status[self.running] == Status.RUNNING]

    def _release(self, ids: np.ndarray) -> None:
        t = self.table
        self.blocks.release(int(t.num_blocks[ids].sum()))
        t.num_blocks[ids] = 0
        self._freed.extend(ids.tolist())
