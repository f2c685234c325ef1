"""Build the requests of one stream (the single-class workload, or one class): arrivals,
lengths, and the ids of the prompt blocks it may share with other requests."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim import inputs
from sim.errors import ScenarioError
from sim.traffic import block_hashes
from sim.traffic.arrivals import arrival_times, expected_arrivals
from sim.traffic.conversations import TooManyTurns, conversation_turns
from sim.traffic.lengths import sample_lengths
from sim.traffic.ragged import take_rows
from sim.traffic.rates import rate_text
from sim.traffic.schema import MAX_REQUESTS
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
    traces: dict[str, dict] = dataclasses.field(default_factory=dict)  # what each trace file gave, by field

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
    rows_read = len(tr)
    tr = tr.take(_window(tr.arrival, spec))
    if ctx.num_requests is not None and not spec.loop:
        tr = tr.take(np.arange(min(ctx.num_requests, len(tr))))
    if not len(tr):
        raise ScenarioError(str(ctx.resolve(spec.path)), f"{ctx.field}.trace",
                            "no requests in the chosen window (start_s, duration_s)")
    closed = s.arrival.process == "closed"  # users send the trace's requests in order
    t = np.zeros(len(tr)) if closed else _rescaled(tr.arrival, spec, ctx, f"{ctx.field}.trace")
    if spec.loop:  # copies of the slice back to back, each copy's rows in turn
        t = np.zeros(ctx.num_requests) if closed else looped(t, ctx.num_requests, ctx.duration_s)
        tr = tr.take(np.resize(np.arange(len(tr)), len(t)))
    prompt = tr.prompt_len
    offsets = hashes = None
    if spec.format == "mooncake":
        offsets, hashes = block_hashes.mooncake_blocks(
            tr.hash_offsets, tr.hash_ids, prompt, spec.hash_block_size, ctx.block_size)
    traffic = StreamTraffic(t, prompt, tr.output_len, offsets, hashes, notes=tr.notes)
    traffic = _cut(_with_system_prompts(s, ctx, traffic), None, ctx.duration_s)
    end = None if spec.duration_s is None else spec.start_s + spec.duration_s
    _record(ctx, f"{ctx.field}.trace", spec, rows_read, traffic.arrival, window_s=[spec.start_s, end],
            time_scale=spec.time_scale, rate=spec.rate)
    return traffic


def _generated(s, ctx: StreamContext) -> StreamTraffic:
    t = _arrivals(s, ctx, ctx.num_requests)
    n = len(t)
    traffic = StreamTraffic(t, _lengths(s, ctx, "prompt_len", n, ctx.rng(PROMPTS)),
                            _lengths(s, ctx, "output_len", n, ctx.rng(OUTPUTS)))
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
        try:
            turns = conversation_turns(
                conv, start, system_len, prompt_spec=s.prompt_len, output_spec=s.output_len,
                turns_rng=ctx.rng(TURNS), think_rng=ctx.rng(THINK_TIMES),
                prompt_rng=ctx.rng(PROMPTS), output_rng=ctx.rng(OUTPUTS), empirical=empirical)
        except TooManyTurns as e:
            raise ScenarioError(ctx.source, f"{ctx.field}.conversations.turns", str(e)) from None
        exhausted = num_sessions is None or len(start) < num_sessions  # e.g. a short trace
        if exhausted or (len(turns.arrival) >= n
                         and np.sort(turns.arrival)[n - 1] <= start[-1]):
            break
        if num_sessions * 2 > MAX_REQUESTS:  # no room to draw more sessions: keep these
            turns = turns if len(turns.arrival) >= n else None
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
    if a.process == "closed":  # sent when users are ready: the loop sets the times
        return np.zeros(num_requests)
    if a.process == "trace":
        tr = read_trace(a, ctx.resolve(a.path), f"{ctx.field}.arrival.path")
        sliced = tr.take(_window(tr.arrival, a))
        if not len(sliced):
            raise ScenarioError(str(ctx.resolve(a.path)), f"{ctx.field}.arrival",
                                "no requests in the chosen window (start_s, duration_s)")
        t = _rescaled(sliced.arrival, a, ctx, f"{ctx.field}.arrival")
        if a.loop:
            t = looped(t, num_requests, ctx.duration_s)
        if ctx.duration_s is not None:
            t = t[t < ctx.duration_s]
        if num_requests is not None:
            t = t[:num_requests]
        _record(ctx, f"{ctx.field}.arrival", a, len(tr), t, time_scale=a.time_scale, rate=a.rate)
        return t
    expected = expected_arrivals(a.rate, ctx.duration_s) if num_requests is None else 0.0
    if expected > MAX_REQUESTS:
        raise ScenarioError(ctx.source, f"{ctx.field}.duration_s",
                            f"{ctx.duration_s:g} s at {rate_text(a.rate)} is about "
                            f"{expected:,.0f} requests; at most {MAX_REQUESTS:,} fit in one run")
    return arrival_times(a.process, a.rate, ctx.rng(ARRIVALS), num_requests=num_requests,
                         duration_s=ctx.duration_s, cv=getattr(a, "cv", 1.0))


def _window(arrival: np.ndarray, spec) -> np.ndarray:
    """Which of a trace's (sorted, from 0) arrivals lie in its slice [start_s, start_s + duration_s)."""
    keep = arrival >= spec.start_s
    if spec.duration_s is not None:
        keep &= arrival < spec.start_s + spec.duration_s
    return keep


def looped(t: np.ndarray, num_requests: int | None, duration_s: float | None) -> np.ndarray:
    """Arrival times ``t`` (sorted, from 0) replayed back to back: each copy starts one mean
    gap after the previous copy's last arrival (a single arrival: 1 s after), until
    ``num_requests`` or ``duration_s``, whichever comes first."""
    t = t - t[0]
    span = float(t[-1])
    period = span + (span / (len(t) - 1) if len(t) > 1 and span > 0 else 1.0)
    copies = []
    if num_requests is not None:
        copies.append(-(-num_requests // len(t)))
    if duration_s is not None:
        copies.append(int(np.ceil(duration_s / period)) + 1)
    n = min(min(copies), max(1, MAX_REQUESTS // len(t)))
    out = (t[None, :] + period * np.arange(n)[:, None]).ravel()
    return out if num_requests is None else out[:num_requests]


def _empirical(spec, field: str, ctx: StreamContext) -> np.ndarray | None:
    if spec.dist != "empirical":
        return None
    tr: Trace = read_trace(spec, ctx.resolve(spec.path), f"{field}.path")
    _record(ctx, field, spec, len(tr), None, column=spec.column)
    return tr.prompt_len if spec.column in ("ContextTokens", "prompt_len") else tr.output_len


def _rescaled(arrival: np.ndarray, spec, ctx: StreamContext, field: str) -> np.ndarray:
    """Trace times stretched by ``time_scale`` or rescaled to ``rate``; a rate needs a span."""
    if spec.rate is not None and (len(arrival) < 2 or arrival[-1] == arrival[0]):
        raise ScenarioError(str(ctx.resolve(spec.path)), f"{field}.rate",
                            f"the {len(arrival)} request(s) replayed all arrive at one instant, so "
                            "there is no rate to rescale; drop rate or replay more of the trace")
    return rescale_times(arrival, spec.time_scale, spec.rate)


def _record(ctx: StreamContext, where: str, spec, rows_read: int, arrival: np.ndarray | None,
            **applied) -> None:
    """Note what a trace file gave this stream, for the run's summary."""
    path = ctx.resolve(spec.path)
    entry = {"field": where, "path": str(path), "sha256": inputs.sha256(path), "format": spec.format,
             "rows_read": rows_read, **applied}
    if arrival is not None:
        span = float(arrival[-1] - arrival[0]) if len(arrival) else 0.0
        entry.update(rows_used=len(arrival), span_s=span,
                     mean_rate=(len(arrival) - 1) / span if span > 0 else None)
    else:
        entry["rows_used"] = "sampled with replacement"
    ctx.traces[where] = entry


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
        ctx.class_index, system, prefix.length // ctx.block_size)
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

