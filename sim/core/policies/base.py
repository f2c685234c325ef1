"""What every scheduling policy shares: queues, admission, block growth, preemption, commit.

A policy is pure logic with no clock: ``schedule(now)`` turns the request table and the
queues into a BatchPlan (``now`` only matters for batching timeouts), and ``commit`` applies
the step's outcome. The simulator and the real engine drive the very same objects.
(sim/compiled/kernel.py mirrors continuous batching and chunked prefill for the compiled
loop; tests/sim/test_compiled.py fails if the two ever differ.)
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sim.core.plan import BatchPlan
from sim.core.policies.waitqueue import WaitQueue
from sim.core.requests import RejectReason, RequestTable, Status
from sim.scenario.memory import BlockAllocator

_EMPTY = np.zeros(0, dtype=np.int64)


class Policy:
    name = "base"
    keeps_blocks_until_batch_end = False

    def __init__(self, cfg, table: RequestTable, blocks: BlockAllocator, max_model_len: int, *,
                 rng: np.random.Generator | None = None, host_blocks: int = 0,
                 prefill_only: bool = False):
        self.cfg = cfg
        self.table = table
        self.blocks = blocks
        self.max_model_len = max_model_len
        self.rng = rng or np.random.default_rng(0)
        self.waiting = WaitQueue()
        self.running = _EMPTY  # admission order: the last one is preempted first
        self.wake_at = np.inf  # when scheduling may change with no arrival (batch timeouts)
        self.rejected: list[int] = []
        self._freed: list[int] = []
        self._preempted: list[int] = []
        # Memory pressure by swap: preempted requests park their KV blocks in host memory.
        self.swap = getattr(cfg, "preemption", "recompute") == "swap"
        self.host_free = host_blocks
        self.swapped: deque[int] = deque()
        self._swap_in = 0
        self._swap_out = 0
        # Speculative decoding: decodes verify 1 + k tokens and keep 1..k+1 of them.
        spec = getattr(cfg, "speculative", None)
        self.spec_k = spec.num_tokens if spec else 0
        self.spec_accept = spec.acceptance_rate if spec else 0.0
        # Disaggregation: a prefill replica hands requests over after their first token; a
        # decode replica takes them in once their KV cache has arrived.
        self.prefill_only = prefill_only
        self.handoffs: list[int] = []
        self.held: dict[int, tuple[int, int]] = {}  # handed over: (blocks, of which cached)
        self.remote_waiting: deque[int] = deque()
        self.transferring: set[int] = set()

    # -- queue -------------------------------------------------------------------------------
    def add(self, rid: int) -> None:
        self.table.status[rid] = Status.WAITING
        self.waiting.append(rid, int(self.table.priority[rid]))

    @property
    def has_work(self) -> bool:
        return bool(self.waiting) or self.running.size > 0

    @property
    def queue_len(self) -> int:
        return len(self.waiting) + len(self.swapped) + len(self.remote_waiting)

    def schedule(self, now: float) -> BatchPlan | None:
        raise NotImplementedError

    # -- fast-forward hooks (see sim/fastforward.py) -----------------------------------------
    def can_fast_forward(self, plan: BatchPlan) -> bool:
        """Would this pure-decode plan repeat unchanged until a completion, an arrival that
        may join, or a KV block shortage? True when every running request decodes in it and
        the queues (if any) are blocked by memory or slots, which decodes never free."""
        return (plan.num_seqs == self.running.size and plan.preempted.size == 0
                and not self.prefill_only
                and not self.spec_k and not self.swapped and plan.swap_in_blocks == 0
                and plan.is_pure_decode)

    def completions_change_nothing(self) -> bool:
        """Would a pure-decode batch just lose its finished rows (nobody waits to take their
        place, and cached prefixes stay as they are)?"""
        return not (self.waiting or self.swapped or self.remote_waiting or self.blocks.prefix_caching)

    @property
    def frees_on_finish(self) -> bool:
        return not self.keeps_blocks_until_batch_end

    def arrival_may_join(self) -> bool:
        """Could a request arriving now (or a KV transfer landing) change the next step?"""
        return bool(self.transferring) or (not self.waiting and not self.remote_waiting)

    def jumped_the_queue(self, rid: int) -> bool:
        """Did ``rid``, just added, go ahead of everyone waiting (a higher priority)? Then it
        heads the queue and may fit where the blocked head did not."""
        return len(self.waiting) > 1 and self.waiting[0] == rid

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
        t, blocks = self.table, self.blocks
        step_capacity = token_budget if step_capacity is None else step_capacity
        ids: list[int] = []
        new: list[int] = []
        room = blocks.available - self._watermark_blocks()
        while self.waiting and token_budget > 0 and len(ids) < seq_budget:
            rid = self.waiting[0]
            reason = self._never_fits(rid)
            if reason:
                self.waiting.popleft()
                self._reject(rid, reason)
                continue
            hit = self._prefix_hit(rid)
            computed = hit.size * blocks.block_size
            remaining = int(t.num_tokens[rid]) - computed
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
            need = int(blocks.blocks_for(computed + reserve)) - hit.size
            pinned = blocks.pin_cost(hit) if hit.size else 0
            if need + pinned > room:
                break
            self.waiting.popleft()
            if hit.size:
                blocks.acquire(hit)
                if t.num_generated[rid] == 0:
                    t.cached_tokens[rid] = computed
            blocks.allocate(need)
            room -= need + pinned
            t.num_computed[rid] = computed
            t.num_blocks[rid] = hit.size + need
            t.cache_blocks[rid] = hit.size
            t.status[rid] = Status.RUNNING
            ids.append(rid)
            new.append(n)
            token_budget -= n
        if ids:
            self.running = np.concatenate([self.running, np.asarray(ids, dtype=np.int64)])
        return ids, new

    def _prefix_hit(self, rid: int) -> np.ndarray:
        """The leading cached blocks a request can reuse (at least one token is computed)."""
        if not self.blocks.prefix_caching:
            return _EMPTY
        t = self.table
        usable = (int(t.num_tokens[rid]) - 1) // self.blocks.block_size
        ids = t.prefix_blocks(rid)[:usable]
        return ids[: self.blocks.cached_prefix(ids)]

    def _watermark_blocks(self) -> int:
        return int(getattr(self.cfg, "watermark", 0.0) * self.blocks.num_blocks)

    def _swap_in_waiting(self, seq_room: int) -> list[int]:
        """Bring swapped-out requests back (before any new admission), oldest first."""
        t, blocks = self.table, self.blocks
        back: list[int] = []
        while self.swapped and len(back) < seq_room:
            rid = self.swapped[0]
            n = int(t.swapped_blocks[rid])
            if n + self._watermark_blocks() > blocks.available:
                break
            self.swapped.popleft()
            blocks.allocate(n)
            self.host_free += n
            self._swap_in += n
            t.num_blocks[rid] = n
            t.swapped_blocks[rid] = 0
            t.status[rid] = Status.RUNNING
            back.append(rid)
        if back:
            self.running = np.concatenate([self.running, np.asarray(back, dtype=np.int64)])
        return back

    # -- memory pressure ---------------------------------------------------------------------
    def _grow(self, ids: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Give rows the blocks their new tokens need, preempting the newest running requests
        until everything left fits. Returns the surviving rows."""
        t, blocks = self.table, self.blocks
        ahead = self.spec_k  # speculative decodes write k draft tokens' KV too
        while True:
            held = t.num_blocks[ids]
            need = blocks.blocks_for(t.num_computed[ids] + (new + ahead if ahead else new)) - held
            np.maximum(need, 0, out=need)
            total = sum(need.tolist())
            if total <= blocks.available or self.running.size == 0:
                break
            victim = int(self.running[-1])
            self._preempt(victim)
            keep = ids != victim
            ids, new = ids[keep], new[keep]
        if total:
            blocks.allocate(total)
            t.num_blocks[ids] = held + need
        return ids, new

    def _preempt(self, rid: int) -> None:
        """Free a running request's blocks: park them in host memory (swap) if there is room,
        or drop them and recompute the request later."""
        t = self.table
        self.running = self.running[self.running != rid]
        self._preempted.append(rid)
        t.preemptions[rid] += 1
        t.status[rid] = Status.WAITING
        n = int(t.num_blocks[rid])
        if self.swap and n <= self.host_free:
            self._drop_cache_refs(rid)
            self.blocks.release(n)
            self.host_free -= n
            self._swap_out += n
            t.swapped_blocks[rid] = n
            t.num_blocks[rid] = 0
            self.swapped.append(rid)
            return
        self._free_blocks(rid)
        t.num_computed[rid] = 0
        self.waiting.appendleft(rid, int(t.priority[rid]))

    def _drop_cache_refs(self, rid: int) -> None:
        t = self.table
        k = int(t.cache_blocks[rid])
        if k:
            self.blocks.drop(t.prefix_blocks(rid)[:k].tolist())
            t.num_blocks[rid] -= k
            t.cache_blocks[rid] = 0

    def _free_blocks(self, rid: int) -> None:
        self._drop_cache_refs(rid)
        t = self.table
        self.blocks.release(int(t.num_blocks[rid]))
        t.num_blocks[rid] = 0

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
            spec_tokens=self.spec_k,
            swap_in_blocks=self._swap_in,
            swap_out_blocks=self._swap_out,
            block_size=self.blocks.block_size,
        )
        self._freed = []
        self._preempted = []
        self._swap_in = self._swap_out = 0
        return plan

    def commit(self, plan: BatchPlan, stopped: np.ndarray | None = None) -> np.ndarray:
        """Apply a finished step: tokens computed, tokens sampled, requests finished.

        ``stopped`` marks rows whose sampled token was an end-of-sequence (real engine only).
        Returns the ids that finished (for a prefill replica: the ids handed over).
        """
        t = self.table
        ids = plan.req_ids
        t.num_computed[ids] = plan.num_computed + plan.num_new_tokens
        sampled = ids[plan.samples]
        gained = self._speculate(plan, sampled) if self.spec_k else 1
        generated = t.num_generated[sampled] + gained
        t.num_generated[sampled] = generated
        t.num_tokens[sampled] += gained
        if self.blocks.prefix_caching:
            self._cache_prefixes(sampled[generated == gained])
        limit = 1 if self.prefill_only else t.output_len[sampled]
        done_mask = generated >= limit
        if stopped is not None:
            done_mask |= np.asarray(stopped, dtype=bool)[plan.samples]
        if not np.count_nonzero(done_mask):
            return _EMPTY
        done = sampled[done_mask]
        self._finish(done)
        return done

    def _speculate(self, plan: BatchPlan, sampled: np.ndarray) -> np.ndarray:
        """Tokens each sampling row keeps: a decode keeps its accepted drafts (each accepted
        with probability α until the first rejection) plus one token of the target's own."""
        t = self.table
        decode = plan.is_decode[plan.samples]
        accepted = np.minimum(self.rng.geometric(1 - self.spec_accept, sampled.size) - 1, self.spec_k)
        gained = np.where(decode, accepted + 1, 1)
        gained = np.minimum(gained, t.output_len[sampled] - t.num_generated[sampled])
        t.num_computed[sampled] += gained - 1  # the kept drafts' KV entries are valid
        return gained

    def _cache_prefixes(self, ids: np.ndarray) -> None:
        """Requests that just finished their prompt share its full blocks from now on."""
        t = self.table
        for rid in ids.tolist():
            start = int(t.cache_blocks[rid])
            full = min(int(t.num_computed[rid]) // self.blocks.block_size,
                       int(t.prefix_offsets[rid + 1] - t.prefix_offsets[rid]))
            if full > start:
                t.cache_blocks[rid] += self.blocks.insert(t.prefix_blocks(rid)[start:full].tolist())

    def _finish(self, done: np.ndarray) -> None:
        t = self.table
        if self.prefill_only:
            handoff = done[t.output_len[done] > 1]
            done = done[t.output_len[done] <= 1]
            t.status[handoff] = Status.TRANSFER
            for rid in handoff.tolist():  # this replica keeps the KV until it has been sent
                self.held[rid] = (int(t.num_blocks[rid]), int(t.cache_blocks[rid]))
            t.num_blocks[handoff] = 0
            t.cache_blocks[handoff] = 0
            self.handoffs.extend(handoff.tolist())
        t.status[done] = Status.FINISHED
        if not self.keeps_blocks_until_batch_end:
            self._release(done)
        self.running = self.running[t.status[self.running] == Status.RUNNING]

    def _release(self, ids: np.ndarray) -> None:
        t = self.table
        if self.blocks.prefix_caching:
            for rid in ids.tolist():
                self._free_blocks(rid)
        else:
            self.blocks.release(int(t.num_blocks[ids].sum()))
            t.num_blocks[ids] = 0
        self._freed.extend(ids.tolist())

    # -- disaggregation ----------------------------------------------------------------------
    def release_handoff(self, rid: int) -> None:
        """A prefill replica's copy of a handed-over request's KV cache is no longer needed."""
        blocks, cached = self.held.pop(rid)
        if cached:
            self.blocks.drop(self.table.prefix_blocks(rid)[:cached].tolist())
        self.blocks.release(blocks - cached)
        self._freed.append(rid)

    def add_remote(self, rid: int) -> None:
        """A request prefilled elsewhere, waiting for room to receive its KV cache."""
        self.remote_waiting.append(rid)

    def admit_remote(self) -> tuple[list[int], list[int]]:
        """Reserve blocks for prefilled requests (oldest first) so their KV can be sent.
        Returns (admitted, rejected)."""
        t, blocks = self.table, self.blocks
        admitted: list[int] = []
        rejected: list[int] = []
        room = blocks.available - self._watermark_blocks()
        seats = self.cfg.max_num_seqs - self.running.size - len(self.transferring)
        while self.remote_waiting and seats > 0:
            rid = self.remote_waiting[0]
            reason = self._never_fits(rid)
            if reason:
                self.remote_waiting.popleft()
                self._reject(rid, reason)
                rejected.append(rid)
                continue
            need = int(blocks.blocks_for(int(t.num_computed[rid]) + 1 + self.spec_k))
            if need > room:
                break
            self.remote_waiting.popleft()
            blocks.allocate(need)
            room -= need
            seats -= 1
            t.num_blocks[rid] = need
            self.transferring.add(rid)
            admitted.append(rid)
        return admitted, rejected

    def kv_arrived(self, rid: int) -> None:
        self.transferring.discard(rid)
        self.table.status[rid] = Status.RUNNING
        self.running = np.append(self.running, rid)
