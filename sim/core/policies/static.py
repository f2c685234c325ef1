"""Static batching: gather up to N requests (or wait at most a timeout), then run the batch
until its longest member finishes. Nobody joins mid-batch, and KV memory for each member's
full prompt + output is reserved up front, as engines without paging do."""

from __future__ import annotations

import numpy as np

from sim.core.plan import BatchPlan
from sim.core.policies.base import Policy
from sim.core.requests import Status

_EMPTY = np.zeros(0, dtype=np.int64)


class StaticBatching(Policy):
    name = "static"
    keeps_blocks_until_batch_end = True

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.batch = _EMPTY

    def _watermark_blocks(self) -> int:
        return 0  # memory is reserved whole, so no headroom is needed

    def completions_change_nothing(self) -> bool:
        return not self.blocks.prefix_caching  # the batch runs on until its last member is done

    def arrival_may_join(self) -> bool:
        return False  # nobody joins a running batch

    def jumped_the_queue(self, rid: int) -> bool:
        return False  # it waits for the batch to end, whatever its priority

    def schedule(self, now: float) -> BatchPlan | None:
        t = self.table
        if self.batch.size:
            live = self.batch[t.status[self.batch] == Status.RUNNING]
            if live.size:
                return self._plan(live, t.num_tokens[live] - t.num_computed[live])
            self._release(self.batch)  # the batch is over: its memory comes back
            self.batch = _EMPTY
        return self._form_batch(now)

    def _form_batch(self, now: float) -> BatchPlan | None:
        t, cfg = self.table, self.cfg
        self.wake_at = np.inf
        if not self.waiting:
            return None
        deadline = t.arrival[self.waiting[0]] + cfg.batch_timeout_s
        if len(self.waiting) < cfg.batch_size and now < deadline:
            self.wake_at = deadline
            return None
        ids, new = self._admit_waiting(
            token_budget=np.iinfo(np.int64).max,
            seq_budget=cfg.batch_size,
            chunked=False,
            reserve_tokens=lambda rid: int(t.prompt_len[rid] + t.output_len[rid]),
        )
        if not ids:
            return None  # everything queued was rejected
        self.batch = np.asarray(ids, dtype=np.int64)
        return self._plan(ids, new)
