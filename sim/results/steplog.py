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
    """Steps in fixed-size chunks of numpy columns: appending never copies what is there, so
    a million-request run does not briefly hold its log twice."""

    def __init__(self, chunk_rows: int = 1 << 18):
        self.n = 0
        self.chunk_rows = chunk_rows
        self._full: list[dict[str, np.ndarray]] = []
        self._new_chunk()

    def _new_chunk(self) -> None:
        self.cols = {k: np.empty(self.chunk_rows, dtype=t) for k, t in COLUMNS.items()}
        self._order = list(self.cols.values())
        self._i = 0  # rows used in the current chunk

    def append(self, **values) -> None:
        """One step (scalars) or a run of steps (equal-length arrays)."""
        k = int(np.size(values["start"]))
        done = 0
        while done < k:
            if self._i == self.chunk_rows:
                self._full.append(self.cols)
                self._new_chunk()
            take = min(k - done, self.chunk_rows - self._i)
            dst = slice(self._i, self._i + take)
            for name, col in self.cols.items():
                v = values[name]
                col[dst] = v[done:done + take] if np.ndim(v) else v
            self._i += take
            done += take
        self.n += k

    def append_step(self, *row) -> None:
        """One step, its values in COLUMNS order (the hot path of the step loop)."""
        if self._i == self.chunk_rows:
            self._full.append(self.cols)
            self._new_chunk()
        i = self._i
        for col, value in zip(self._order, row, strict=True):
            col[i] = value
        self._i = i + 1
        self.n += 1

    def frame(self) -> pd.DataFrame:
        """All steps, ordered by start time then replica. Hands its memory over: the log is
        empty afterwards."""
        chunks = [*self._full, {k: v[: self._i] for k, v in self.cols.items()}]
        self._full = []
        self._new_chunk()
        self.n = 0
        cols = {}
        for name in COLUMNS:  # one column at a time, dropping the chunks' copies as we go
            cols[name] = np.concatenate([c.pop(name) for c in chunks])
        return ordered_frame(cols)


def ordered_frame(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """The step columns as a frame ordered by start time, then replica (steps are logged as
    they end, so replicas interleave); no copy when they are in order already."""
    start, replica = cols["start"], cols["replica"]
    ordered = bool(np.all((start[1:] > start[:-1])
                          | ((start[1:] == start[:-1]) & (replica[1:] >= replica[:-1]))))
    if not ordered:
        order = np.lexsort((replica, start))
        for name in COLUMNS:
            cols[name] = cols[name][order]
    return pd.DataFrame(cols, copy=False)
