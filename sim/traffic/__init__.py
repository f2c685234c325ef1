"""Workloads: arrival times, prompt/output lengths and, where traffic shares prefixes, the ids
of the prompt blocks requests may share, as numpy arrays, seeded."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sim.traffic.ragged import concat_rows, take_rows
from sim.traffic.streams import StreamContext, StreamTraffic, build_stream, count_within
from sim.traffic.trace_formats import read_trace
from sim.traffic.traces import Trace, read_azure_trace, rescale_times


@dataclass(frozen=True)
class Workload:
    """The requests of a scenario, sorted by arrival (ties: class order, then stream order).

    The optional fields stay None where the scenario does not use the feature:
    per-class fields without ``classes``, prefix ids without ``shared_prefix``,
    ``conversations`` or a Mooncake trace, ``session_id`` without ``conversations``.
    """

    arrival: np.ndarray  # float64 seconds, sorted
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    class_id: np.ndarray | None = None  # int16 [n], index into class_names
    class_names: tuple[str, ...] = ("default",)
    priority: np.ndarray | None = None  # int16 [n], lower is served first
    slo_ttft: np.ndarray | None = None  # float64 [n], the class's limits (NaN = none)
    slo_tpot: np.ndarray | None = None
    slo_e2e: np.ndarray | None = None
    # Request i's shareable block ids are prefix_hashes[prefix_offsets[i]:prefix_offsets[i+1]]:
    # ids of its leading full prompt blocks (block_size tokens each), equal for two blocks
    # exactly when the tokens of the block and all before it are equal.
    prefix_offsets: np.ndarray | None = None  # int64 [n+1]
    prefix_hashes: np.ndarray | None = None  # int64
    session_id: np.ndarray | None = None  # int64 [n] for conversations (-1 none)
    notes: tuple[str, ...] = ()  # what trace readers dropped, worth telling the user
    closed_loop: tuple[int, float] | None = None  # (users, think time): arrivals set as the run goes
    traces: tuple[dict, ...] = ()  # each trace file used: path, sha256, rows used, scaling
    # (start, end, factor) of each burst of a rate schedule, in the run's seconds (after rate_scale)
    bursts: tuple[tuple[float, float, float], ...] = ()
    # what ended the arrivals: {"by": "num_requests" | "duration_s" | "traffic", and the bounds given}
    ended_by: dict | None = None

    def __len__(self) -> int:
        return len(self.arrival)

    def block_ids(self, i: int) -> np.ndarray:
        """Request ``i``'s shareable block ids (empty without prefix ids)."""
        if self.prefix_offsets is None:
            return np.empty(0, dtype=np.int64)
        return self.prefix_hashes[self.prefix_offsets[i]:self.prefix_offsets[i + 1]]


def build_workload(scenario, *, block_size: int | None = None) -> Workload:
    """Generate (or replay) the scenario's traffic. Every stream has independent random
    streams for arrivals, prompts, outputs, etc., so changing one distribution leaves the
    others' draws unchanged; class k's draws depend only on the seed and k.
    Prefix ids are for KV blocks of ``block_size`` tokens (default: the scheduler's).
    ``workload.rate_scale`` then compresses all arrival times (every class's rate × scale)."""
    w = _build(scenario, block_size)
    spec = scenario.workload
    a = spec.arrival
    if spec.classes is None and a.process == "closed":
        return replace(w, closed_loop=(a.concurrency, a.think_time_s))
    scale = spec.rate_scale
    n, duration = bounds(spec)
    w = replace(w, bursts=tuple((b.at_s / scale, b.end_s / scale, b.factor) for b in bursts_of(spec)),
                ended_by=ended_by(w.arrival, n, duration))
    return w if scale == 1.0 else replace(w, arrival=w.arrival / scale)


def bounds(w) -> tuple[int | None, float | None]:
    """The workload's own (num_requests, duration_s), as they bound its arrivals: a trace
    replays whole unless num_requests is given; ``duration_s`` given without ``num_requests``
    runs for the duration (the default num_requests does not cut it short); both given: the
    first reached ends the arrivals."""
    given = w.model_fields_set
    n = w.num_requests if "num_requests" in given else None
    if n is None and w.classes is None and w.trace is None and "duration_s" not in given:
        n = w.num_requests  # the default count
    return n, w.duration_s


def ended_by(arrival: np.ndarray, n: int | None, duration: float | None) -> dict:
    """Which bound ended the arrivals: ``num_requests`` (reached), ``duration_s``, or
    ``traffic`` (a trace or a schedule ran out first); with the bounds that were given."""
    by = ("num_requests" if n is not None and len(arrival) >= n
          else "duration_s" if duration is not None else "traffic")
    out: dict = {"by": by, "last_arrival_s": float(arrival[-1]) if len(arrival) else 0.0}
    if n is not None:
        out["num_requests"] = n
    if duration is not None:
        out["duration_s"] = duration
    return out


def bursts_of(w) -> list:
    """Every burst of the workload's rate schedules (each class's)."""
    streams = [w] if w.classes is None else list(w.classes)
    return [b for st in streams for b in getattr(getattr(st.arrival, "rate", None), "bursts", ())]


def _build(scenario, block_size: int | None) -> Workload:
    w = scenario.workload
    block_size = block_size or scenario.scheduler.block_size
    source = getattr(scenario, "source", "") or f"scenario {scenario.name!r}"
    explicit_n = w.num_requests if "num_requests" in w.model_fields_set else None
    if w.classes is None:
        n, _ = bounds(w)
        ctx = StreamContext(source, scenario.seed, (), 0, "workload", scenario.resolve,
                            block_size, n, w.duration_s)
        t = build_stream(w, ctx)
        return Workload(t.arrival, t.prompt_len, t.output_len, prefix_offsets=t.prefix_offsets,
                        prefix_hashes=t.prefix_hashes, session_id=t.session, notes=t.notes,
                        traces=tuple(ctx.traces.values()))

    parts, traces = [], []
    for k, c in enumerate(w.classes):
        ctx = StreamContext(
            source, scenario.seed, (k,), k, f"workload.classes[{k}]", scenario.resolve, block_size,
            c.num_requests if c.num_requests is not None else explicit_n,
            c.duration_s if c.duration_s is not None else w.duration_s)
        parts.append(build_stream(c, ctx))
        traces += ctx.traces.values()
    return replace(_merge(parts, w.classes, explicit_n, w.duration_s), traces=tuple(traces))


def _merge(parts: list[StreamTraffic], classes, num_requests: int | None,
           duration_s: float | None) -> Workload:
    """All classes' requests in one stream sorted by arrival (stable), then cut to the
    workload's own bounds."""
    sizes = [len(p) for p in parts]
    rows = np.arange(len(parts))

    def per_class(values, dtype) -> np.ndarray:
        return np.repeat(np.asarray(values, dtype=dtype)[rows], sizes)

    def nan_if_none(v) -> float:
        return np.nan if v is None else float(v)

    cols = {
        "arrival": np.concatenate([p.arrival for p in parts]),
        "prompt_len": np.concatenate([p.prompt_len for p in parts]),
        "output_len": np.concatenate([p.output_len for p in parts]),
        "class_id": per_class(rows, np.int16),
        "priority": per_class([c.priority for c in classes], np.int16),
        "slo_ttft": per_class([nan_if_none(c.slo.ttft_s) for c in classes], np.float64),
        "slo_tpot": per_class([nan_if_none(c.slo.tpot_s) for c in classes], np.float64),
        "slo_e2e": per_class([nan_if_none(c.slo.e2e_s) for c in classes], np.float64),
    }
    if any(p.session is not None for p in parts):
        sessions, base = [], 0
        for p in parts:
            if p.session is None:
                sessions.append(np.full(len(p), -1, dtype=np.int64))
            else:
                sessions.append(np.where(p.session >= 0, p.session + base, -1))
                base += int(p.session.max(initial=-1)) + 1
        cols["session_id"] = np.concatenate(sessions)
    offsets = hashes = None
    if any(p.prefix_offsets is not None for p in parts):
        offsets, hashes = concat_rows([
            (p.prefix_offsets, p.prefix_hashes) if p.prefix_offsets is not None
            else (np.zeros(len(p) + 1, dtype=np.int64), np.empty(0, dtype=np.int64))
            for p in parts])

    order = np.argsort(cols["arrival"], kind="stable")
    order = order[:count_within(cols["arrival"][order], num_requests, duration_s)]
    if offsets is not None:
        offsets, hashes = take_rows(offsets, hashes, order)
    return Workload(**{k: v[order] for k, v in cols.items()},
                    class_names=tuple(c.name for c in classes),
                    prefix_offsets=offsets, prefix_hashes=hashes,
                    notes=tuple(note for p in parts for note in p.notes))


__all__ = ["Trace", "Workload", "build_workload", "read_azure_trace", "read_trace",
           "rescale_times"]
