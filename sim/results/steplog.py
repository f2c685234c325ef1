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


class StepLog:
    """Takes the core's log chunks as they fill (copying them out) and makes one frame."""

    def __init__(self) -> None:
        self.ints: list[np.ndarray] = []
        self.floats: list[np.ndarray] = []

    def take(self, core: Core) -> None:
        n = int(core.g[G_LOG_N])
        if n:
            self.ints.append(core.log_i[:n].copy())
            self.floats.append(core.log_f[:n].copy())
        core.g[G_LOG_N] = 0

    @property
    def rows(self) -> int:
        return sum(len(a) for a in self.ints)

    def frame(self, core: Core) -> pd.DataFrame:
        """Every step, ordered by start time then replica; hands its memory over."""
        self.take(core)
        ints = np.concatenate(self.ints) if self.ints else np.zeros((0, len(LOG_INT_COLUMNS)), dtype=np.int32)
        floats = np.concatenate(self.floats) if self.floats else np.zeros((0, 2))
        self.ints, self.floats = [], []
        cols = {}
        for name, dtype in COLUMNS.items():
            if name in ("start", "duration"):
                cols[name] = np.ascontiguousarray(floats[:, 0 if name == "start" else 1])
            else:
                cols[name] = np.ascontiguousarray(ints[:, LOG_INT_COLUMNS.index(name)]).astype(dtype, copy=False)
        del ints, floats
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
