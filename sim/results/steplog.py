"""The step log: one row per engine step, gathered from the core's log chunks, engine by engine."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.core.state import LOG_INT_COLUMNS, LOG_ROWS, Core, LogColumn, RunCounter

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

    Steps are logged as they end, so engines interleave in a chunk. Each chunk's rows are copied
    straight into their engine's columns, which double as they fill (their spare room untouched,
    so not resident); the frame then joins the engines' columns one column at a time,
    freeing each engine's copy as it goes, and with one engine it takes them as they are. So a
    step is copied at most twice and the log never holds a second copy of the whole table."""

    def __init__(self) -> None:
        self.columns: dict[int, list[np.ndarray]] = {}  # engine -> a buffer per column (COLUMNS order)
        self.rows: dict[int, int] = {}  # engine -> rows filled
        self.grown = False  # a buffer moved since the heap was last trimmed

    def _room(self, e: int, more: int) -> list[np.ndarray]:
        """Engine e's buffers, with room for ``more`` rows."""
        if e not in self.columns:
            self.columns[e] = [np.empty(max(more, LOG_ROWS), dtype=d) for d in COLUMNS.values()]
            self.rows[e] = 0
        bufs = self.columns[e]
        need = self.rows[e] + more
        if need > len(bufs[0]):
            # a new buffer, not ndarray.resize, which zero-fills (touches) the spare room
            size, filled = max(need, 2 * len(bufs[0])), self.rows[e]
            for j, b in enumerate(bufs):
                bufs[j] = np.empty(size, dtype=b.dtype)
                bufs[j][:filled] = b[:filled]
            self.grown = True
        return bufs

    def take(self, core: Core) -> None:
        n = int(core.run_counters[RunCounter.LOG_N])
        if n:
            chunk = {name: core.log_f[i, :n] for i, name in enumerate(FLOAT_COLUMNS)}
            chunk |= {name: core.log_i[i, :n] for i, name in enumerate(LOG_INT_COLUMNS)}
            sources = [chunk[name] for name in COLUMNS]
            engine = core.log_i[LogColumn.ENGINE, :n]
            first = int(engine[0])
            if bool(np.all(engine == first)):
                bufs, at = self._room(first, n), self.rows[first]
                for buf, src in zip(bufs, sources, strict=True):
                    buf[at:at + n] = src
                self.rows[first] = at + n
            else:
                order = np.argsort(engine, kind="stable")  # each engine's steps together, still in time order
                engines, cuts = np.unique(engine[order], return_index=True)
                ends = [*cuts[1:].tolist(), n]
                for e, a, b in zip(engines.tolist(), cuts.tolist(), ends, strict=True):
                    bufs, at, rows = self._room(e, b - a), self.rows[e], order[a:b]
                    for buf, src in zip(bufs, sources, strict=True):
                        np.take(src, rows, out=buf[at:at + b - a], mode="clip")  # "raise" would buffer
                    self.rows[e] = at + b - a
        core.run_counters[RunCounter.LOG_N] = 0
        if self.grown:  # a grown buffer left its old room free in the C heap: give it back
            self.grown = False
            release_freed()

    def frame(self, core: Core) -> pd.DataFrame:
        """Every step, ordered by engine, then start time; hands its memory over."""
        self.take(core)
        engines = sorted(self.columns)
        cols = {}
        for j, (name, dtype) in enumerate(COLUMNS.items()):  # one column at a time, freeing as we go
            if len(engines) == 1:
                col = self.columns[engines[0]][j]
                col.resize(self.rows[engines[0]], refcheck=False)  # gives back the spare room
            else:
                parts = [self.columns[e][j][:self.rows[e]] for e in engines]
                col = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
                del parts
            for e in engines:
                self.columns[e][j] = None
            release_freed()  # else each column is held twice: freed buffers stay in the C heap
            cols[name] = col
        self.columns.clear()
        self.rows.clear()
        return ordered_frame(cols)


def release_freed() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).
    The engines' buffers of a large run are freed a column at a time while the joined columns
    are made: without this, their memory stays resident and the log is held twice at its peak
    (a 1M-request run over 100 replicas: 0.43 GB more, 4 GB at 10M)."""
    global _trim
    if _trim is None:
        import ctypes
        import ctypes.util

        try:
            _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):  # not glibc: its allocator decides
            _trim = False
    if _trim:
        _trim(0)


_trim = None


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
    first = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1  # where each engine's rows begin (no sort)
    starts, ends = [0, *first.tolist()], [*first.tolist(), len(grouped)]
    return order, {int(grouped[a]): slice(a, b) for a, b in zip(starts, ends, strict=True)}
