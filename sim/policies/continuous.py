"""Continuous (iteration-level) batching, as in Orca and vLLM.

Every step, waiting requests join as soon as there is room (sequence slots, batched tokens,
KV blocks). A step that admits requests prefills them whole; otherwise all running requests
decode one token. When decodes run out of KV blocks, the newest request is preempted and
later recomputed.
"""

from __future__ import annotations

import numpy as np

from sim.plan import BatchPlan
from sim.policies.base import Policy


class ContinuousBatching(Policy):
    name = "continuous"

    def schedule(self, now: float) -> BatchPlan | None:
        cfg = self.cfg
        seq_room = cfg.max_num_seqs - self.running.size
        if self.waiting and seq_room > 0 and not self._preempted:
            ids, new = self._admit_waiting(cfg.max_batched_tokens, seq_room, chunked=False)
            if ids:
                return self._plan(ids, new)
        if self.running.size == 0:
            return None
        ids = self.running.copy()
        ids, new = self._grow(ids, np.ones(ids.size, dtype=np.int64))
        return self._plan(ids, new) if ids.size else None
