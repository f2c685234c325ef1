"""Per-step records, kept in growable numpy columns (no object per step)."""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = {
    "replica": np.int32,
    "start": np.float64,
    "duration": np.float64,
    "num_seqs": np.int32,
    "num_tokens": np.int32,
    "prefill_tokens": np.int32,
    "decode_seqs": np.int32,
    "kv_blocks_used": np.int32,
    "queue_len": np.int32,
}


class StepLog:
    def __init__(self, capacity: int = 4096):
        self.n = 0
        self.cols = {k: np.empty(capacity, dtype=t) for k, t in COLUMNS.items()}
        self._reserve(0)

    def _reserve(self, extra: int) -> None:
        cap = len(self.cols["start"])
        if self.n + extra > cap:
            new_cap = max(2 * cap, self.n + extra)
            for k, col in self.cols.items():
                grown = np.empty(new_cap, dtype=col.dtype)
                grown[: self.n] = col[: self.n]
                self.cols[k] = grown
        self._capacity = len(self.cols["start"])
        self._order = list(self.cols.values())

    def append(self, **values) -> None:
        """One step (scalars) or a run of steps (equal-length arrays)."""
        k = int(np.size(values["start"]))
        self._reserve(k)
        sl = slice(self.n, self.n + k)
        for name, col in self.cols.items():
            col[sl] = values[name]
        self.n += k

    def append_step(self, *row) -> None:
        """One step, its values in COLUMNS order (the hot path of the step loop)."""
        if self.n == self._capacity:
            self._reserve(1)
        i = self.n
        for col, value in zip(self._order, row, strict=True):
            col[i] = value
        self.n = i + 1

    def frame(self) -> pd.DataFrame:
        """All steps, ordered by start time then replica."""
        cols = {k: v[: self.n] for k, v in self.cols.items()}
        order = np.lexsort((cols["replica"], cols["start"]))
        return pd.DataFrame({k: v[order] for k, v in cols.items()})
