"""Ragged arrays: one flat ``values`` array cut into rows by ``offsets`` (length rows + 1)."""

from __future__ import annotations

import numpy as np


def offsets_from_counts(counts: np.ndarray) -> np.ndarray:
    """``[0, c0, c0+c1, …]`` as int64."""
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def row_of_each_value(offsets: np.ndarray) -> np.ndarray:
    """For every value, the index of the row that holds it."""
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))


def position_in_row(offsets: np.ndarray) -> np.ndarray:
    """For every value, its index within its row (0, 1, … restarting at each row)."""
    counts = np.diff(offsets)
    return np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], counts)


def take_rows(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``rows`` (indices, any order, repeats allowed) as a new ragged array."""
    counts = np.diff(offsets)[rows]
    new_offsets = offsets_from_counts(counts)
    src = np.repeat(offsets[:-1][rows] - new_offsets[:-1], counts) + np.arange(new_offsets[-1])
    return new_offsets, values[src]


def concat_rows(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Stack ragged arrays one after another (their rows in order)."""
    counts = np.concatenate([np.diff(o) for o, _ in parts])
    values = np.concatenate([v for _, v in parts])
    return offsets_from_counts(counts), values


def take_row_prefixes(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray,
                      counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each i, the first ``counts[i]`` values of row ``rows[i]`` (which must hold that
    many), as a new ragged array: one gather, no Python loop."""
    new_offsets = offsets_from_counts(counts)
    src = np.repeat(offsets[:-1][rows] - new_offsets[:-1], counts)
    src += np.arange(new_offsets[-1], dtype=np.int64)
    return new_offsets, values[src]
