"""Readers for BurstGPT, Mooncake and generic CSV/JSONL traces, and ``read_trace``, which
picks the reader a scenario's trace spec names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sim.errors import TraceError
from sim.traffic.ragged import offsets_from_counts
from sim.traffic.traces import (
    READ_ERRORS,
    Trace,
    check_file,
    csv_lines,
    open_text,
    read_azure_trace,
    read_bytes,
    read_csv,
    seconds_from_datetimes,
    seconds_from_numbers,
    token_counts,
    unreadable,
)

BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def read_trace(spec, path: str | Path, field: str = "workload.trace.path") -> Trace:
    """Read the trace a :class:`~sim.traffic.schema.TraceFile` spec describes.
    ``field`` is the scenario path of ``spec.path``, named in errors."""
    fmt = spec.format
    if fmt == "azure":
        return read_azure_trace(path, field)
    if fmt == "burstgpt":
        return read_burstgpt_trace(path, field, model=spec.model)
    if fmt == "mooncake":
        return read_mooncake_trace(path, field, getattr(spec, "hash_block_size", None))
    cols = spec.columns
    columns = (cols.arrival, cols.prompt_len, cols.output_len)
    return read_mapped_trace(path, field, fmt, columns, time_unit=spec.time_unit,
                             datetime=spec.datetime)


# -- BurstGPT --------------------------------------------------------------------------------
def read_burstgpt_trace(path: str | Path, field: str = "workload.trace.path",
                        model: str | None = None) -> Trace:
    """BurstGPT CSV: ``Timestamp`` (seconds), ``Model``, ``Request tokens``, ``Response
    tokens``, … Failed requests (0 response tokens) and empty prompts are dropped and
    counted in ``Trace.notes``; ``model`` keeps one model's rows."""
    path = check_file(path, field)
    source = str(path)
    df = read_csv(path, field, BURSTGPT_COLUMNS)
    lines = csv_lines(len(df))
    if model is not None:
        keep = (df["Model"].astype(str) == model).to_numpy()
        if not keep.any():
            found = sorted(df["Model"].astype(str).unique())[:10]
            raise TraceError(source, field.rsplit(".", 1)[0] + ".model",
                             f"no requests for model {model!r}; the trace has {found}")
        df, lines = df[keep], lines[keep]
    seconds = seconds_from_numbers(df["Timestamp"].to_numpy(), 1.0, source, "Timestamp", lines)
    prompt = token_counts(df["Request tokens"].to_numpy(), source, "Request tokens", lines,
                          allow_zero=True)
    output = token_counts(df["Response tokens"].to_numpy(), source, "Response tokens", lines,
                          allow_zero=True)
    failed = output == 0
    empty = ~failed & (prompt == 0)
    notes = []
    if failed.any():
        notes.append(f"{source}: dropped {int(failed.sum())} failed request(s) (0 response tokens)")
    if empty.any():
        notes.append(f"{source}: dropped {int(empty.sum())} request(s) with 0 request tokens")
    keep = ~(failed | empty)
    if not keep.any():
        raise TraceError(source, field, "no requests left after dropping failures")
    return Trace(seconds[keep], prompt[keep], output[keep], notes=tuple(notes)).sorted()


# -- JSON lines ------------------------------------------------------------------------------
def read_jsonl(path: Path, keys: tuple[str, ...], field: str
               ) -> tuple[dict[str, list], np.ndarray]:
    """The values of ``keys`` in every non-blank line, and those lines' numbers."""
    source = str(path)
    values: dict[str, list] = {k: [] for k in keys}
    lines: list[int] = []
    try:
        with open_text(path) as f:
            for number, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as e:
                    raise TraceError(source, f"line {number}, column {e.colno}",
                                     f"not valid JSON: {e.msg}") from None
                except RecursionError:
                    raise TraceError(source, f"line {number}", "not valid JSON: nested too deeply") from None
                if not isinstance(record, dict):
                    raise TraceError(source, f"line {number}",
                                     f"expected a JSON object, got {type(record).__name__}")
                for k in keys:
                    if k not in record:
                        raise TraceError(source, f"{k} (line {number})",
                                         f"missing; expected keys {list(keys)}")
                    values[k].append(record[k])
                lines.append(number)
    except UnicodeDecodeError as e:
        raise TraceError(source, field, f"not UTF-8 text: {e}") from None
    except READ_ERRORS as e:
        raise TraceError(source, field, unreadable(path, e)) from None
    if not lines:
        raise TraceError(source, field, "the trace has no requests")
    return values, np.asarray(lines)


# -- Mooncake --------------------------------------------------------------------------------
def read_mooncake_trace(path: str | Path, field: str = "workload.trace.path",
                        hash_block_size: int | None = None) -> Trace:
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length`` and
    ``hash_ids``, one id per hash block of the prompt (512 tokens in the published traces).
    With ``hash_block_size``, every line must list ceil(input_length / hash_block_size) ids."""
    path = check_file(path, field)
    source = str(path)
    fast = _mooncake_columns(path)
    if fast is not None:
        v, counts, hash_ids = fast
        lines = np.arange(1, len(counts) + 1)
    else:
        v, lines = read_jsonl(path, MOONCAKE_KEYS, field)
    seconds = seconds_from_numbers(v["timestamp"], 1e-3, source, "timestamp", lines)
    prompt = token_counts(v["input_length"], source, "input_length", lines)
    output = token_counts(v["output_length"], source, "output_length", lines)
    if fast is None:
        counts, hash_ids = _hash_id_lists(v["hash_ids"], source, lines)
    if hash_block_size is not None:
        _check_coverage(counts, prompt, hash_block_size, source, field, lines)
    return Trace(seconds, prompt, output, offsets_from_counts(counts), hash_ids).sorted()


def _mooncake_columns(path: Path) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray] | None:
    """A Mooncake trace's columns, each id list's length and the ids, read by pyarrow's JSON
    reader (a large trace in a fraction of the time), or None where the file needs the
    line-by-line reader, which names the line and field of any problem: a line pyarrow cannot
    read, a blank line (line numbers would shift), a missing value or one of another type."""
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        table = pj.read_json(str(path))  # (a .gz name is decompressed)
    except (pa.ArrowException, ValueError, OSError):  # (OSError: a broken gzip stream)
        return None
    want = {"timestamp": pa.int64(), "input_length": pa.int64(), "output_length": pa.int64(),
            "hash_ids": pa.list_(pa.int64())}
    for name, kind in want.items():
        if name not in table.column_names or table[name].type != kind or table[name].null_count:
            return None
    data = read_bytes(path, None)
    if table.num_rows != data.count(b"\n") + (not data.endswith(b"\n")):
        return None
    ids = table["hash_ids"].combine_chunks()
    if ids.values.null_count:
        return None
    columns = {k: table[k].to_numpy() for k in MOONCAKE_KEYS[:3]}
    counts = np.diff(ids.offsets.to_numpy()).astype(np.int64)
    return columns, counts, ids.flatten().to_numpy()


def _hash_id_lists(lists: list, source: str, lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each line's number of hash ids, and all the ids in one array."""
    for ids, line in zip(lists, lines, strict=True):
        if not isinstance(ids, list) or not all(type(x) is int for x in ids):
            raise TraceError(source, f"hash_ids (line {line})",
                             f"expected a list of whole numbers, got {ids!r}")
    counts = np.fromiter((len(ids) for ids in lists), dtype=np.int64, count=len(lines))
    try:
        return counts, np.asarray([x for ids in lists for x in ids], dtype=np.int64)
    except OverflowError:
        raise TraceError(source, "hash_ids", "ids must fit in 64 bits") from None


def _check_coverage(counts: np.ndarray, prompt: np.ndarray, block: int, source: str, field: str,
                    lines: np.ndarray) -> None:
    """Each line's hash ids cover its prompt exactly: one id per ``block`` tokens, the last
    block possibly partial."""
    expected = -(-prompt // block)
    bad = counts != expected
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        size_field = field.rsplit(".", 1)[0] + ".hash_block_size"
        raise TraceError(source, f"hash_ids (line {lines[i]})",
                         f"{counts[i]} id(s) for input_length {prompt[i]}; expected "
                         f"{expected[i]} (one per {block} tokens, {size_field}: {block}); "
                         f"{int(bad.sum())} line(s) disagree")


# -- generic CSV / JSONL ---------------------------------------------------------------------
def read_mapped_trace(path: str | Path, field: str, fmt: str, columns: tuple[str, str, str], *,
                      time_unit: str = "s", datetime: bool = False) -> Trace:
    """A CSV or JSONL trace whose ``columns`` (arrival, prompt length, output length) are named
    by the scenario. Arrivals are numbers in ``time_unit`` or, with ``datetime``, datetimes."""
    path = check_file(path, field)
    source = str(path)
    if fmt == "csv":
        df = read_csv(path, field, list(dict.fromkeys(columns)))
        raw = [df[c].to_numpy() for c in columns]
        lines = csv_lines(len(df))
    else:
        v, lines = read_jsonl(path, tuple(dict.fromkeys(columns)), field)
        raw = [v[c] for c in columns]
    t_col, p_col, o_col = columns
    if datetime:
        seconds = seconds_from_datetimes(raw[0], source, t_col, lines)
    else:
        seconds = seconds_from_numbers(raw[0], TIME_UNITS[time_unit], source, t_col, lines)
    prompt = token_counts(raw[1], source, p_col, lines)
    output = token_counts(raw[2], source, o_col, lines)
    return Trace(seconds, prompt, output).sorted()
