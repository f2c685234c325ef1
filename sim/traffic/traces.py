"""The trace table, the Azure reader, and checks shared by all trace readers.

The Azure LLM inference format: ``TIMESTAMP,ContextTokens,GeneratedTokens`` with absolute
timestamps (sub-second digits), one request per row. Other formats live in
``trace_formats``; every reader returns a :class:`Trace` sorted by arrival, times in seconds
from the first request, and raises :class:`TraceError` naming the file, the line and the
column of the first bad value. A trace whose name ends in ``.gz`` is read through gzip.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from sim import inputs
from sim.errors import InputError, TraceError
from sim.traffic.ragged import take_rows

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MAX_TOKENS = 2**31 - 1  # the schema's bound on token counts


@dataclass(frozen=True)
class Trace:
    arrival: np.ndarray  # seconds from the first request, sorted
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    # Mooncake: request i's prompt blocks are hash_ids[hash_offsets[i]:hash_offsets[i+1]]
    hash_offsets: np.ndarray | None = None
    hash_ids: np.ndarray | None = None
    notes: tuple[str, ...] = field(default=())  # what the reader dropped, for the user

    def __len__(self) -> int:
        return len(self.arrival)

    def take(self, rows: np.ndarray) -> Trace:
        """The requests at ``rows`` (indices or a boolean mask), in that order."""
        rows = np.flatnonzero(rows) if rows.dtype == bool else rows
        offsets, ids = self.hash_offsets, self.hash_ids
        if offsets is not None:
            offsets, ids = take_rows(offsets, ids, rows)
        return Trace(self.arrival[rows], self.prompt_len[rows], self.output_len[rows],
                     offsets, ids, self.notes)

    def sorted(self) -> Trace:
        """Sorted by arrival (stable), times made relative to the first request."""
        out = self.take(np.argsort(self.arrival, kind="stable"))
        return replace(out, arrival=out.arrival - out.arrival[0])


# -- checks shared by the readers ------------------------------------------------------------
def check_file(path: str | Path, field: str) -> Path:
    """The trace file, if it is one (not a folder, not a Git LFS pointer)."""
    return inputs.check_file(path, field, TraceError, "trace file")


def gzipped(path: Path) -> bool:
    return path.suffix.lower() == ".gz"


def open_text(path: Path) -> IO[str]:
    """The file as UTF-8 text (decompressed, for ``.gz``)."""
    return gzip.open(path, "rt", encoding="utf-8") if gzipped(path) else path.open(encoding="utf-8")


# What reading a file may raise beyond its content's own errors: I/O, and a broken gzip stream.
READ_ERRORS = (OSError, EOFError, zlib.error)


def unreadable(path: Path, e: Exception) -> str:
    return f"{'not a readable gzip file' if gzipped(path) else 'cannot read the file'}: {e}"


def read_bytes(path: Path, field: str | None) -> bytes:
    """The file's bytes (decompressed, for ``.gz``)."""
    try:
        return gzip.decompress(path.read_bytes()) if gzipped(path) else path.read_bytes()
    except READ_ERRORS as e:
        raise TraceError(str(path), field, unreadable(path, e)) from None


def read_csv(path: Path, field: str | None, required: tuple[str, ...] | list[str], *,
             error: type[InputError] = TraceError, empty: str = "the trace has no requests"
             ) -> pd.DataFrame:
    """A CSV with a header holding the ``required`` columns and at least one row; problems
    raise ``error`` naming the file and ``field``."""
    try:
        df = pd.read_csv(path)
    except UnicodeDecodeError as e:
        if gzipped(path):
            raise error(str(path), field, f"not UTF-8 text: {e}") from None
        inputs.read_text(path, field, error, "CSV file")  # says where the bad byte is
        raise
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise error(str(path), field, f"not a readable CSV: {e}") from None
    except READ_ERRORS as e:
        raise error(str(path), field, unreadable(path, e)) from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise error(str(path), field,
                         f"missing column(s) {missing}; expected a header with "
                         f"{','.join(required)} (found {','.join(map(str, df.columns))})")
    if df.empty:
        raise error(str(path), field, empty)
    return df


def csv_lines(n: int) -> np.ndarray:
    """File line numbers of a headed CSV's rows (line 1 is the header)."""
    return np.arange(2, n + 2)


def _first_bad(bad: np.ndarray, raw, lines: np.ndarray) -> tuple[int, object]:
    i = int(np.flatnonzero(bad)[0])
    return int(lines[i]), raw[i]


def _numbers(raw) -> tuple[np.ndarray, np.ndarray]:
    """Values as float64 (NaN where not a number) and the raw values as objects. JSON's
    ``true``/``false`` are not numbers (numpy would read them as 1 and 0)."""
    is_bool = [isinstance(x, bool) for x in raw] if isinstance(raw, list) else None
    raw = np.asarray(raw, dtype=object)
    vals = pd.to_numeric(pd.Series(raw), errors="coerce").to_numpy(dtype=np.float64)
    if is_bool is not None and any(is_bool):
        vals[np.asarray(is_bool)] = np.nan
    return vals, raw


def token_counts(raw, source: str, column: str, lines: np.ndarray, *, allow_zero: bool = False
                 ) -> np.ndarray:
    """Whole token counts (≥ 1, or ≥ 0 with ``allow_zero``) as int64."""
    vals, raw = _numbers(raw)
    lo = 0 if allow_zero else 1
    bad = ~np.isfinite(vals) | (vals < lo) | (vals != np.floor(vals)) | (vals > MAX_TOKENS)
    if bad.any():
        line, got = _first_bad(bad, raw, lines)
        what = "non-negative" if allow_zero else "positive"
        raise TraceError(source, f"{column} (line {line})",
                         f"expected a {what} whole number of tokens (below 2**31), got {got!r}")
    return vals.astype(np.int64)


def seconds_from_numbers(raw, scale: float, source: str, column: str, lines: np.ndarray
                         ) -> np.ndarray:
    """Numeric timestamps times ``scale`` (e.g. 1e-3 for milliseconds) as float64 seconds."""
    vals, raw = _numbers(raw)
    bad = ~np.isfinite(vals)
    if bad.any():
        line, got = _first_bad(bad, raw, lines)
        raise TraceError(source, f"{column} (line {line})", f"expected a number, got {got!r}")
    return vals * scale


def seconds_from_datetimes(raw, source: str, column: str, lines: np.ndarray,
                           example: str = "2023-11-16 18:15:46.68") -> np.ndarray:
    """Datetime strings as float64 seconds since the earliest one."""
    raw = np.asarray(raw, dtype=object)
    ts = pd.to_datetime(pd.Series(raw), errors="coerce", format="mixed")
    bad = ts.isna().to_numpy()
    if bad.any():
        line, got = _first_bad(bad, raw, lines)
        raise TraceError(source, f"{column} (line {line})",
                         f"expected a datetime like {example}, got {got!r}")
    return (ts - ts.min()).dt.total_seconds().to_numpy()


# -- Azure -----------------------------------------------------------------------------------
def read_azure_trace(path: str | Path, field: str = "workload.trace.path") -> Trace:
    """Read and check an Azure-format trace; errors name the file and what was expected."""
    path = check_file(path, field)
    source = str(path)
    df = read_csv(path, field, AZURE_COLUMNS)
    lines = csv_lines(len(df))
    seconds = seconds_from_datetimes(df["TIMESTAMP"].to_numpy(), source, "TIMESTAMP", lines)
    prompt = token_counts(df["ContextTokens"].to_numpy(), source, "ContextTokens", lines)
    output = token_counts(df["GeneratedTokens"].to_numpy(), source, "GeneratedTokens", lines)
    return Trace(seconds, prompt, output).sorted()


def rescale_times(arrival: np.ndarray, time_scale: float = 1.0, rate: float | None = None) -> np.ndarray:
    """Stretch time by ``time_scale``, or rescale to a target mean ``rate`` (requests/s)."""
    t = (arrival - arrival[0]) * time_scale
    if rate is not None and len(t) > 1 and t[-1] > 0:
        t = t * ((len(t) - 1) / t[-1]) / rate
    return t
