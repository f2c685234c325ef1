"""The step log: one row per engine step, gathered from the core's log chunks, engine by engine."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from sim.core.state import G_LOG_N, L_ENGINE, LOG_INT_COLUMNS, Core

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
    """Takes the core's log chunks as they fill and makes one frame, ordered by engine, then start.

    Steps are logged as they end, so engines interleave in a chunk; each chunk is split by engine
    as it is taken (one copy), so the frame needs one concatenation and no global sort."""

    def __init__(self) -> None:
        self.parts: dict[int, dict[str, list[np.ndarray]]] = defaultdict(lambda: {n: [] for n in COLUMNS})

    def take(self, core: Core) -> None:
        n = int(core.g[G_LOG_N])
        if n:
            engine = core.log_i[L_ENGINE, :n]
            order = np.argsort(engine, kind="stable")  # each engine's steps together, still in time order
            engines, cuts = np.unique(engine[order], return_index=True)
            cuts = cuts[1:]
            columns = [(name, core.log_f[i, :n]) for i, name in enumerate(FLOAT_COLUMNS)]
            columns += [(name, core.log_i[i, :n]) for i, name in enumerate(LOG_INT_COLUMNS)]
            for name, col in columns:
                for e, piece in zip(engines.tolist(), np.split(col[order], cuts), strict=True):
                    self.parts[e][name].append(piece)
        core.g[G_LOG_N] = 0

    def frame(self, core: Core) -> pd.DataFrame:
        """Every step, ordered by engine, then start time; hands its memory over."""
        self.take(core)
        engines = sorted(self.parts)
        cols = {}
        for name, dtype in COLUMNS.items():  # one column at a time, dropping its pieces as we go
            pieces = [p for e in engines for p in self.parts[e][name]]
            cols[name] = np.concatenate(pieces).astype(dtype, copy=False) if pieces else np.zeros(0, dtype=dtype)
            for e in engines:
                self.parts[e][name].clear()
        self.parts.clear()
        return ordered_frame(cols)


def ordered_frame(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """The step columns as a frame ordered by engine, then start time; no copy when they are in
    that order already (as the step log makes them: one engine's steps never overlap)."""
    start, engine = cols["start"], cols["engine"]
    ordered = bool(np.all((engine[1:] > engine[:-1]) | ((engine[1:] == engine[:-1]) & (start[1:] >= start[:-1]))))
    if not ordered:
        order = np.lexsort((start, engine))
        for name in COLUMNS:
            cols[name] = cols[name][order]
    return pd.DataFrame(cols, copy=False)


def engine_rows(engine: np.ndarray) -> tuple[np.ndarray | None, dict[int, slice]]:
    """Where each engine's steps are: ``(order, {engine: slice})`` with rows ``order[slice]``,
    or ``order`` None where the rows are grouped by engine already (as ``frame`` makes them),
    so each engine's steps are a plain slice: no sort, no copy."""
    engine = np.asarray(engine)
    if not len(engine):
        return None, {}
    order = None if len(engine) < 2 or bool(np.all(engine[1:] >= engine[:-1])) else np.argsort(engine, kind="stable")
    grouped = engine if order is None else engine[order]
    ids, first = np.unique(grouped, return_index=True)
    ends = [*first[1:].tolist(), len(grouped)]
    return order, {int(e): slice(int(a), int(b)) for e, a, b in zip(ids, first, ends, strict=True)}

