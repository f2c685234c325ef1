"""Chunked prefill (Sarathi-Serve, Dynamic SplitFuse).

Each step has a token budget. Running decodes go first, one token each; the rest of the budget
goes to prefill chunks, first of requests already part-way through their prompt, then of new
requests from the queue. Long prompts no longer stall everybody's decodes.
"""

from __future__ import annotations

import numpy as np

from sim.core.plan import BatchPlan
from sim.core.policies.base import Policy


class ChunkedPrefill(Policy):
    name = "chunked-prefill"

    def schedule(self, now: float) -> BatchPlan | None:
        t, cfg = self.table, self.cfg
        budget = cfg.chunk_size
        if self.swapped:
            self._swap_in_waiting(cfg.max_num_seqs - self.running.size)
        running = self.running
        computed = t.num_computed[running]
        left = t.num_tokens[running] - computed
        decoding = (left == 1) & (computed > 0)
        n_decoding = int(np.count_nonzero(decoding))
        prefilling = n_decoding < running.size
        ids, new = self._grow(running[decoding] if prefilling else running, np.ones(n_decoding, dtype=np.int64))
        budget -= ids.size
        ids_l, new_l = ids.tolist(), new.tolist()

        # Continue part-done prefills (preemption above may have removed some).
        if prefilling:
            running = self.running
            computed = t.num_computed[running]
            left = t.num_tokens[running] - computed
            part = (left > 1) | (computed == 0)
            for rid, done, rest in zip(*(a[part].tolist() for a in (running, computed, left)), strict=True):
                if budget <= 0:
                    break
                n = min(rest, budget)
                need = int(self.blocks.blocks_for(done + n) - t.num_blocks[rid])
                if need > self.blocks.available:
                    break
                self.blocks.allocate(need)
                t.num_blocks[rid] += need
                ids_l.append(rid)
                new_l.append(n)
                budget -= n

        seq_room = cfg.max_num_seqs - self.running.size
        if budget > 0 and seq_room > 0 and self.waiting and not self._preempted and not self.swapped:
            admitted, chunks = self._admit_waiting(budget, seq_room, chunked=True)
            ids_l += admitted
            new_l += chunks
        return self._plan(ids_l, new_l) if ids_l else None
