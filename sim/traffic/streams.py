"""Build the requests of one stream (the single-class workload, or one class): arrivals,
lengths, and the ids of the prompt blocks it may share with other requests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import ScenarioError
from sim.traffic import block_hashes
from sim.traffic.arrivals import arrival_times
from sim.traffic.conversations import conversation_turns
from sim.traffic.lengths import sample_lengths
from sim.traffic.ragged import take_rows
from sim.traffic.trace_formats import read_trace
from sim.traffic.traces import Trace, rescale_times

# Independent random streams of one traffic stream, by purpose. The first three match the
# original single-class layout, so its draws are unchanged; new purposes go at the end.
ARRIVALS, PROMPTS, OUTPUTS, SYSTEM_PROMPTS, TURNS, THINK_TIMES = range(6)
MAX_DOUBLINGS = 8  # of the sessions generated for num_requests, when max_context drops many


@dataclass(frozen=True)
class StreamContext:
    """What building a stream needs from the scenario around it."""

    source: str  # the scenario, as errors name it
    seed: int
    key: tuple[int, ...]  # spawn key of this stream's seeds: () single class, (k,) class k
    class_index: int  # mixed into block ids, so classes never share system prompts by accident
    field: str  # where the stream sits in the scenario, for error messages
    resolve: Callable[[str], Path]
    block_size: int
    num_requests: int | None  # bounds on the stream (None: unbounded by that measure)
    duration_s: float | None

    def rng(self, purpose: int) -> np.random.Generator:
        seq = np.random.SeedSequence(self.seed, spawn_key=(*self.key, purpose))
        return np.random.default_rng(seq)


@dataclass(frozen=True)
class StreamTraffic:
    """One stream's requests, sorted by arrival."""

    arrival: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    prefix_offsets: np.ndarray | None = None
    prefix_hashes: np.ndarray | None = None
    session: np.ndarray | None = None  # this stream's own session numbers, -1 for none
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.arrival)

    def take(self, rows: np.ndarray) -> StreamTraffic:
        """The requests at ``rows``, in that order."""
        offsets, hashes = self.prefix_offsets, self.prefix_hashes
        if offsets is not None:
            offsets, hashes = take_rows(offsets, hashes, rows)
        session = None if self.session is None else self.session[rows]
        return StreamTraffic(self.arrival[rows], self.prompt_len[rows], self.output_len[rows],
                             offsets, hashes, session, self.notes)


def build_stream(s, ctx: StreamContext) -> StreamTraffic:
    """The requests of stream ``s`` (a schema ``Stream``)."""
    if s.trace is not None:
        return _replayed(s, ctx)
    if s.conversations is not None:
        return _conversations(s, ctx)
    return _generated(s, ctx)


# -- sources ---------------------------------------------------------------------------------
def _replayed(s, ctx: StreamContext) -> StreamTraffic:
    spec = s.trace
    tr = read_trace(spec, ctx.resolve(spec.path), f"{ctx.field}.trace.path")
    t = tr.arrival
    keep = t >= spec.start_s
    if spec.duration_s is not None:
        keep &= t < spec.start_s + spec.duration_s
    tr = tr.take(keep)
    if ctx.num_requests is not None:
        tr = tr.take(np.arange(min(ctx.num_requests, len(tr))))
    if not len(tr):
        raise ScenarioError(str(ctx.resolve(spec.path)), f"{ctx.field}.trace",
                            "no requests in the chosen window (start_s, duration_s)")
    t = rescale_times(tr.arrival, spec.time_scale, spec.rate)
    prompt = tr.prompt_len
    offsets = hashes = None
    if spec.format == "mooncake":
        offsets, hashes = block_hashes.mooncake_blocks(
            tr.hash_offsets, tr.hash_ids, prompt, spec.hash_block_size, ctx.block_size)
    traffic = StreamTraffic(t, prompt, tr.output_len, offsets, hashes, notes=tr.notes)
    traffic = _with_system_prompts(s, ctx, traffic)
    return _cut(traffic, None, ctx.duration_s)


def _generated(s, ctx: StreamContext) -> StreamTraffic:
    t = _arrivals(s, ctx, ctx.num_requests)
    n = len(t)
    notes = ((f"{ctx.field}.arrival: closed-loop requests all arrive at 0 in this simulation "
              "(placeholders); servesim loadgen and validate --endpoint run the loop",)
             if s.arrival.process == "closed" else ())
    traffic = StreamTraffic(t, _lengths(s, ctx, "prompt_len", n, ctx.rng(PROMPTS)),
                            _lengths(s, ctx, "output_len", n, ctx.rng(OUTPUTS)), notes=notes)
    return _with_system_prompts(s, ctx, traffic)


def _conversations(s, ctx: StreamContext) -> StreamTraffic:
    """Sessions start by the arrival process; their turns are cut to the stream's bounds.
    With ``num_requests`` = N, N sessions always hold the N earliest turns (each session's
    first turn is at its start), unless ``max_context`` drops first turns; then more
    sessions are generated until the earliest N turns are certain."""
    conv, prefix = s.conversations, s.shared_prefix
    empirical = {f: _empirical(spec, f"{ctx.field}.{f}", ctx)
                 for f, spec in (("prompt_len", s.prompt_len), ("output_len", s.output_len),
                                 ("turns", conv.turns))}
    n = num_sessions = ctx.num_requests
    for _ in range(MAX_DOUBLINGS):
        start = _arrivals(s, ctx, num_sessions)
        system = _pick_system_prompts(prefix, len(start), ctx)
        system_len = np.full(len(start), prefix.length if prefix else 0, dtype=np.int64)
        turns = conversation_turns(
            conv, start, system_len, prompt_spec=s.prompt_len, output_spec=s.output_len,
            turns_rng=ctx.rng(TURNS), think_rng=ctx.rng(THINK_TIMES),
            prompt_rng=ctx.rng(PROMPTS), output_rng=ctx.rng(OUTPUTS), empirical=empirical)
        exhausted = num_sessions is None or len(start) < num_sessions  # e.g. a short trace
        if exhausted or (len(turns.arrival) >= n
                         and np.sort(turns.arrival)[n - 1] <= start[-1]):
            break
        num_sessions *= 2
    else:
        turns = None
    if turns is None or len(turns.arrival) == 0:
        raise ScenarioError(ctx.source, f"{ctx.field}.conversations.max_context",
                            f"{conv.max_context} tokens leave (almost) no turns: most first "
                            "turns' prompt + output already exceed it; expected a larger limit")
    keep = np.argsort(turns.arrival, kind="stable")
    keep = keep[:count_within(turns.arrival[keep], ctx.num_requests, ctx.duration_s)]
    session = turns.session[keep]
    prompt = turns.prompt_len[keep]
    offsets, hashes = block_hashes.conversation_blocks(
        ctx.class_index, session,
        system[session] if system is not None else np.full(len(keep), -1, dtype=np.int64),
        prefix.length // ctx.block_size if prefix else 0, prompt // ctx.block_size)
    return StreamTraffic(turns.arrival[keep], prompt, turns.output_len[keep], offsets, hashes,
                         session)


# -- pieces ----------------------------------------------------------------------------------
def _arrivals(s, ctx: StreamContext, num_requests: int | None) -> np.ndarray:
    a = s.arrival
    if a.process == "closed":
        # Placeholder times (0): a closed loop's sends depend on completions. The load
        # generator and endpoint validation run it (issue 14); the simulator's own closed
        # loop replaces this on main.
        if num_requests is None:
            raise ScenarioError(ctx.source, f"{ctx.field}.num_requests",
                                "a closed loop needs num_requests")
        return np.zeros(num_requests)
    if a.process == "trace":
        tr = read_trace(a, ctx.resolve(a.path), f"{ctx.field}.arrival.path")
        t = rescale_times(tr.arrival, a.time_scale, a.rate)
        if ctx.duration_s is not None:
            t = t[t < ctx.duration_s]
        if num_requests is not None:
            t = t[:num_requests]
        return t
    return arrival_times(a.process, a.rate, ctx.rng(ARRIVALS), num_requests=num_requests,
                         duration_s=ctx.duration_s, cv=getattr(a, "cv", 1.0))


def _empirical(spec, field: str, ctx: StreamContext) -> np.ndarray | None:
    if spec.dist != "empirical":
        return None
    tr: Trace = read_trace(spec, ctx.resolve(spec.path), f"{field}.path")
    return tr.prompt_len if spec.column in ("ContextTokens", "prompt_len") else tr.output_len


def _lengths(s, ctx: StreamContext, field: str, n: int, rng: np.random.Generator) -> np.ndarray:
    spec = getattr(s, field)
    return sample_lengths(spec, n, rng, _empirical(spec, f"{ctx.field}.{field}", ctx))


def _pick_system_prompts(prefix, n: int, ctx: StreamContext) -> np.ndarray | None:
    """Which system prompt each of ``n`` requests (or sessions) starts with."""
    if prefix is None:
        return None
    rng = ctx.rng(SYSTEM_PROMPTS)
    if prefix.popularity == "uniform":
        return rng.integers(0, prefix.num_prompts, n, dtype=np.int64)
    weights = 1.0 / np.arange(1, prefix.num_prompts + 1) ** prefix.zipf_s
    return rng.choice(prefix.num_prompts, n, p=weights / weights.sum()).astype(np.int64)


def _with_system_prompts(s, ctx: StreamContext, traffic: StreamTraffic) -> StreamTraffic:
    """Prepend one of the shared system prompts to every request (``shared_prefix``)."""
    prefix = s.shared_prefix
    if prefix is None:
        return traffic
    n = len(traffic)
    system = _pick_system_prompts(prefix, n, ctx)
    offsets, hashes = block_hashes.system_prompt_blocks(
        ctx.class_index, system, prefix.length // ctx.block_size, prefix.num_prompts)
    return StreamTraffic(traffic.arrival, traffic.prompt_len + prefix.length, traffic.output_len,
                         offsets, hashes, traffic.session, traffic.notes)


def count_within(arrival: np.ndarray, num_requests: int | None, duration_s: float | None
                  ) -> int:
    """How many of the sorted ``arrival`` are among the first ``num_requests`` and arrive
    before ``duration_s``."""
    n = len(arrival)
    if duration_s is not None:
        n = int(np.searchsorted(arrival, duration_s, side="left"))
    if num_requests is not None:
        n = min(n, num_requests)
    return n


def _cut(traffic: StreamTraffic, num_requests: int | None, duration_s: float | None
         ) -> StreamTraffic:
    """The first ``num_requests`` requests arriving before ``duration_s`` (sorted traffic)."""
    n = count_within(traffic.arrival, num_requests, duration_s)
    return traffic if n == len(traffic) else traffic.take(np.arange(n))

