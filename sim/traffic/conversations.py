"""Multi-turn conversations, open loop: each session's turns arrive a think time apart,
counted from the previous turn's *arrival* (not its completion, which the workload cannot
know), and turn t's prompt is the whole previous context plus a new user message."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.traffic.lengths import sample_lengths
from sim.traffic.ragged import offsets_from_counts, row_of_each_value
from sim.traffic.schema import MAX_REQUESTS


class TooManyTurns(Exception):
    """The sessions drawn would hold more turns than one run can take."""

    def __init__(self, turns: int):
        super().__init__(f"the sessions would hold {turns:,} turns; at most {MAX_REQUESTS:,} "
                         "requests fit in one run")


def sample_durations(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` non-negative durations in seconds from a duration spec of the schema."""
    kind = spec.dist
    if kind == "fixed":
        return np.full(n, float(spec.value))
    if kind == "uniform":
        return rng.uniform(spec.min, spec.max, n)
    if kind == "exponential":
        return rng.exponential(spec.mean, n)
    if kind == "lognormal":
        mu = np.log(spec.mean) - spec.sigma**2 / 2  # so that the mean is spec.mean
        return rng.lognormal(mu, spec.sigma, n)
    raise ValueError(f"unknown duration distribution {kind!r}")


def segment_cumsum(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Inclusive running sums that restart at every row of a ragged layout."""
    total = np.cumsum(x)
    before_row = total[offsets[:-1]] - x[offsets[:-1]] if len(x) else total[:0]
    return total - np.repeat(before_row, np.diff(offsets))


@dataclass(frozen=True)
class Turns:
    """All turns of a set of sessions, session-major (session 0's turns first)."""

    session: np.ndarray  # int64, the session each turn belongs to
    arrival: np.ndarray  # float64 seconds
    prompt_len: np.ndarray  # int64, system prompt + previous context + new message
    output_len: np.ndarray  # int64


def conversation_turns(spec, session_start: np.ndarray, system_len: np.ndarray, *,
                       prompt_spec, output_spec, turns_rng: np.random.Generator,
                       think_rng: np.random.Generator, prompt_rng: np.random.Generator,
                       output_rng: np.random.Generator, empirical=None) -> Turns:
    """Turns of sessions starting at ``session_start`` whose first prompt begins with
    ``system_len`` tokens (0 for none). ``empirical`` maps a length spec's field name
    (``prompt_len``/``output_len``) to the trace values it draws from, if any.
    With ``spec.max_context``, a session ends before its first turn whose prompt plus output
    would exceed it (prompts only grow, so the dropped turns are the session's last ones)."""
    empirical = empirical or {}
    turns = sample_lengths(spec.turns, len(session_start), turns_rng,
                           empirical.get("turns"))
    if int(turns.sum()) > MAX_REQUESTS:
        raise TooManyTurns(int(turns.sum()))
    offsets = offsets_from_counts(turns)
    session = row_of_each_value(offsets)
    n = int(offsets[-1])
    think = sample_durations(spec.think_time_s, n, think_rng)
    think[offsets[:-1][turns > 0]] = 0.0  # the first turn arrives when the session starts
    arrival = session_start[session] + segment_cumsum(think, offsets)
    message = sample_lengths(prompt_spec, n, prompt_rng, empirical.get("prompt_len"))
    output = sample_lengths(output_spec, n, output_rng, empirical.get("output_len"))
    prompt = system_len[session] + segment_cumsum(message, offsets) \
        + segment_cumsum(output, offsets) - output
    keep = np.ones(n, dtype=bool) if spec.max_context is None \
        else prompt + output <= spec.max_context
    return Turns(session[keep], arrival[keep], prompt[keep], output[keep])
