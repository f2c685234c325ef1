"""The step log: one row per engine step, gathered from the core's log chunks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.core.state import G_LOG_N, LOG_INT_COLUMNS, Core

COLUMNS = {
    "replica": np.int32,
    "engine": np.int32,  # a pipelined replica's virtual engine (else the replica's one engine)
    "start": np.float64,
    "duration": np.float64,
    "num_seqs": np.int32,
    "num_tokens": np.int32,
    "prefill_tokens": np.int32,
    "decode_seqs": np.int32,
    "kv_blocks_used": np.int32,  # held by requests when the step started
    "kv_blocks_cached": np.int32,  # cached prefixes nobody uses (reclaimable)
    "queue_len": np.int32,
}
FLOAT_COLUMNS = ("start", "duration")


class StepLog:
    """Takes the core's log chunks as they fill (copying each column out) and makes one frame."""

    def __init__(self) -> None:
        self.chunks: dict[str, list[np.ndarray]] = {name: [] for name in COLUMNS}

    def take(self, core: Core) -> None:
        n = int(core.g[G_LOG_N])
        if n:
            for i, name in enumerate(FLOAT_COLUMNS):
                self.chunks[name].append(core.log_f[i, :n].copy())
            for i, name in enumerate(LOG_INT_COLUMNS):
                self.chunks[name].append(core.log_i[i, :n].copy())
        core.g[G_LOG_N] = 0

    def frame(self, core: Core) -> pd.DataFrame:
        """Every step, ordered by start time then engine; hands its memory over."""
        self.take(core)
        cols = {}
        for name, dtype in COLUMNS.items():  # one column at a time, dropping its chunks as we go
            parts = self.chunks[name]
            cols[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
            parts.clear()
        return ordered_frame(cols)


def ordered_frame(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """The step columns as a frame ordered by start time, then engine (steps are logged as
    they end, so engines interleave); no copy when they are in order already."""
    start, engine = cols["start"], cols["engine"]
    ordered = bool(np.all((start[1:] > start[:-1]) | ((start[1:] == start[:-1]) & (engine[1:] >= engine[:-1]))))
    if not ordered:
        order = np.lexsort((engine, start))
        for name in COLUMNS:
            cols[name] = cols[name][order]
    return pd.DataFrame(cols, copy=False)
