"""Trace readers. The Azure LLM inference format: ``TIMESTAMP,ContextTokens,GeneratedTokens``
with absolute timestamps (sub-second digits), one request per row."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import TraceError

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class Trace:
    arrival: np.ndarray  # seconds from the first request, sorted
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival)


def read_azure_trace(path: str | Path, field: str = "workload.trace.path") -> Trace:
    """Read and check an Azure-format trace; errors name the file and what was expected."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise TraceError(source, field, "trace file not found")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise TraceError(source, field, f"not a readable CSV: {e}") from None
    missing = [c for c in AZURE_COLUMNS if c not in df.columns]
    if missing:
        raise TraceError(source, field,
                         f"missing column(s) {missing}; expected a header {','.join(AZURE_COLUMNS)}")
    if df.empty:
        raise TraceError(source, field, "the trace has no requests")
    ts = pd.to_datetime(df["TIMESTAMP"], errors="coerce", format="mixed")
    bad = ts.isna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0]) + 2  # +1 header, +1 one-based
        raise TraceError(source, f"TIMESTAMP (line {row})",
                         f"expected a datetime like 2023-11-16 18:15:46.68, got {df['TIMESTAMP'].iloc[row - 2]!r}")
    lengths = {}
    for col in AZURE_COLUMNS[1:]:
        vals = pd.to_numeric(df[col], errors="coerce")
        bad = vals.isna() | (vals < 1) | (vals != np.floor(vals))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise TraceError(source, f"{col} (line {row})",
                             f"expected a positive whole number of tokens, got {df[col].iloc[row - 2]!r}")
        lengths[col] = vals.to_numpy(dtype=np.int64)
    seconds = (ts - ts.min()).dt.total_seconds().to_numpy()
    order = np.argsort(seconds, kind="stable")
    return Trace(seconds[order], lengths["ContextTokens"][order], lengths["GeneratedTokens"][order])


def rescale_times(arrival: np.ndarray, time_scale: float = 1.0, rate: float | None = None) -> np.ndarray:
    """Stretch time by ``time_scale``, or rescale to a target mean ``rate`` (requests/s)."""
    t = (arrival - arrival[0]) * time_scale
    if rate is not None and len(t) > 1 and t[-1] > 0:
        t = t * ((len(t) - 1) / t[-1]) / rate
    return t
