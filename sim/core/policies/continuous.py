"""Continuous (iteration-level) batching, as in Orca and vLLM.

Every step, waiting requests join as soon as there is room (sequence slots, batched tokens,
KV blocks). A step that admits requests prefills them whole; otherwise all running requests
decode one token. When decodes run out of KV blocks, the newest request is preempted (its
KV dropped and recomputed later, or swapped to host memory and back).
"""

from __future__ import annotations

from sim.core.plan import BatchPlan
from sim.core.policies.base import Policy


class ContinuousBatching(Policy):
    name = "continuous"

    def schedule(self, now: float) -> BatchPlan | None:
        cfg = self.cfg
        if self.swapped:
            self._swap_in_waiting(cfg.max_num_seqs - self.running.size)
        seq_room = cfg.max_num_seqs - self.running.size
        if self.waiting and seq_room > 0 and not self.swapped:
            ids, new = self._admit_waiting(cfg.max_batched_tokens, seq_room, chunked=False)
            if ids:
                return self._plan(ids, new)
        if self.running.size == 0:
            return None
        ids = self.running.copy()
        remaining = self.table.num_tokens[ids] - self.table.num_computed[ids]
        ids, new = self._grow(ids, remaining)
        return self._plan(ids, new) if ids.size else None
