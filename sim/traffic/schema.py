"""The traffic half of the scenario schema: arrivals, lengths, traces, classes, shared prefixes.

A *stream* is one kind of traffic (an arrival process with length distributions, or a replayed
trace, optionally with shared system prompts or multi-turn conversations). ``workload`` is
either one stream (the single-class fields at its top level) or a list of ``classes``, each a
named stream with its own SLO and priority.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

# Every schema model (scenario, study): unknown fields are errors, values keep their YAML type
# (``true`` is not 1, ``"8"`` is not 8; an int is a valid float) and floats are finite.
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Strict(BaseModel):
    model_config = STRICT


MAX_COUNT = 2**31 - 1  # tokens, sizes and counts beyond this are typos, and overflow arrays
MAX_REQUESTS = 100_000_000  # requests in one run (about 12 GB of state)
PositiveInt = Annotated[int, Field(gt=0, le=MAX_COUNT)]
MAX_SYSTEM_PROMPTS = 1_000_000
NumRequests = Annotated[int, Field(gt=0, le=MAX_REQUESTS)]
TokenMean = Annotated[float, Field(gt=0, le=MAX_COUNT)]


LogSigma = Annotated[float, Field(gt=0, le=10)]  # log-space; beyond 10 the draws over/underflow


def _list_to_tuple(v):
    return tuple(v) if isinstance(v, list) else v


AsTuple = BeforeValidator(_list_to_tuple)  # YAML has lists; strict tuples would refuse them


# -- trace files -----------------------------------------------------------------------------
TraceFormat = Literal["azure", "burstgpt", "mooncake", "csv", "jsonl"]
GENERIC_FORMATS = ("csv", "jsonl")


class ColumnMap(Strict):
    """Which column (CSV) or key (JSONL) of a generic trace holds each quantity."""

    arrival: str
    prompt_len: str
    output_len: str


class TraceFile(Strict):
    """A trace file and how to read it.

    ``azure``: ``TIMESTAMP,ContextTokens,GeneratedTokens`` (absolute datetimes).
    ``burstgpt``: ``Timestamp`` (s), ``Model``, ``Request tokens``, ``Response tokens``, …;
    ``model`` keeps one model's rows. ``mooncake``: JSONL with ``timestamp`` (ms),
    ``input_length``, ``output_length``, ``hash_ids``. ``csv``/``jsonl``: any file, with
    ``columns`` naming the fields, timestamps in ``time_unit`` or as datetimes.
    """

    path: str
    format: TraceFormat = "azure"
    model: str | None = None  # burstgpt: keep only this model's requests (e.g. ChatGPT, GPT-4)
    columns: ColumnMap | None = None  # csv/jsonl
    time_unit: Literal["s", "ms", "us"] = "s"  # csv/jsonl numeric timestamps
    datetime: bool = False  # csv/jsonl: the arrival column holds datetimes

    # Fields that mean something only for some formats.
    FORMAT_ONLY: ClassVar[dict[str, tuple[str, ...]]] = {
        "columns": GENERIC_FORMATS, "time_unit": GENERIC_FORMATS, "datetime": GENERIC_FORMATS,
        "model": ("burstgpt",)}

    @model_validator(mode="after")
    def _fields_fit_the_format(self):
        if self.format in GENERIC_FORMATS and self.columns is None:
            raise ValueError(f"format {self.format} needs 'columns': "
                             "{arrival: ..., prompt_len: ..., output_len: ...}")
        for name, formats in self.FORMAT_ONLY.items():
            if name in self.model_fields_set and self.format not in formats:
                raise ValueError(f"'{name}' applies only to format {' or '.join(formats)}, "
                                 f"not {self.format}")
        return self


def _one_scaling(spec):
    if spec.rate is not None and "time_scale" in spec.model_fields_set:
        raise ValueError("give time_scale or rate, not both: rate rescales the trace to a mean "
                         "rate and would override time_scale")
    return spec


# -- rates that change over time ------------------------------------------------------------
MAX_BURSTS = 10_000


class RateSegment(Strict):
    """``duration_s`` seconds at ``rate`` requests/s, or ramping linearly from ``rate`` to
    ``ramp_to`` over the segment."""

    duration_s: PositiveFloat
    rate: NonNegativeFloat
    ramp_to: NonNegativeFloat | None = None


class Diurnal(Strict):
    """A daily (or any periodic) curve: ``mean + amplitude·cos(2π(t − phase_s)/period_s)``
    requests/s, at its peak at ``phase_s`` (and every period after)."""

    mean: PositiveFloat
    amplitude: NonNegativeFloat
    period_s: PositiveFloat = 86_400.0
    phase_s: NonNegativeFloat = 0.0

    @model_validator(mode="after")
    def _never_negative(self):
        if self.amplitude > self.mean:
            raise ValueError(f"amplitude ({self.amplitude:g}) must be ≤ mean ({self.mean:g}): "
                             "the rate cannot go below 0")
        return self


BURST_TEXT = re.compile(r"^\s*[x×]\s*([0-9.eE+-]+)\s+for\s+([0-9.eE+-]+)\s*s\s+at\s+([0-9.eE+-]+)\s*s\s*$")


def _burst_from_text(v):
    """``"x2 for 60 s at 120 s"`` (or ``×2``) as a burst's fields."""
    if isinstance(v, str):
        m = BURST_TEXT.match(v)
        if not m:
            raise ValueError("expected a burst like 'x2 for 60 s at 120 s' or "
                             "{factor: 2, duration_s: 60, at_s: 120}")
        try:
            return {"factor": float(m[1]), "duration_s": float(m[2]), "at_s": float(m[3])}
        except ValueError:
            raise ValueError(f"expected numbers in a burst like 'x2 for 60 s at 120 s', got {v!r}") from None
    return v


class Burst(Strict):
    """The rate times ``factor`` for ``duration_s`` seconds from ``at_s`` (write it as
    ``"x2 for 60 s at 120 s"`` or as these fields)."""

    factor: Annotated[float, Field(gt=0, le=1e6)]
    duration_s: PositiveFloat
    at_s: NonNegativeFloat

    @property
    def end_s(self) -> float:
        return self.at_s + self.duration_s


class RateSchedule(Strict):
    """An arrival rate that changes over time: a constant ``base``, piecewise ``segments``
    (the last segment's final rate holds after it) or a ``diurnal`` curve, with optional
    ``bursts`` multiplying it. Arrivals follow it by a time change of the process (see
    ``sim.traffic.rates``)."""

    base: PositiveFloat | None = None
    segments: Annotated[tuple[RateSegment, ...], AsTuple, Field(min_length=1, max_length=100_000)] | None = None
    diurnal: Diurnal | None = None
    bursts: Annotated[tuple[Annotated[Burst, BeforeValidator(_burst_from_text)], ...], AsTuple,
                      Field(max_length=MAX_BURSTS)] = ()

    @model_validator(mode="after")
    def _one_curve(self):
        given = [k for k in ("base", "segments", "diurnal") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a rate schedule needs exactly one of base (req/s), segments "
                             "([{duration_s: 60, rate: 10}, {duration_s: 60, rate: 10, ramp_to: 20}]) "
                             "or diurnal ({mean, amplitude, period_s, phase_s})"
                             + (f"; got {' and '.join(given)}" if given else ""))
        if self.segments is not None and not any(
                max(s.rate, s.ramp_to or 0.0) > 0 for s in self.segments):
            raise ValueError("segments: every rate is 0, so no request would ever arrive")
        ordered = sorted(self.bursts, key=lambda b: b.at_s)
        for a, b in itertools.pairwise(ordered):
            if b.at_s < a.end_s:
                raise ValueError(f"bursts overlap: the one at {b.at_s:g} s starts before the one at "
                                 f"{a.at_s:g} s ends ({a.end_s:g} s); merge them into one")
        return self


def _rate_or_schedule(v):
    """A mapping goes on to the schedule (whose errors are then the ones shown); anything else
    must be a positive number of requests per second."""
    if isinstance(v, dict | RateSchedule):
        return v
    try:
        return _PLAIN_RATE.validate_python(v)
    except ValidationError as e:
        err = e.errors()[0]
        raise PydanticCustomError(err["type"], err["msg"] + " (requests/s), or a schedule such as {base: 10, "
                                  "bursts: ['x2 for 60 s at 120 s']}, {segments: [...]} or {diurnal: "
                                  "{mean, amplitude, period_s, phase_s}}") from None


_PLAIN_RATE = TypeAdapter(PositiveFloat, config=STRICT)
# the schedule first: a mapping's errors are the schedule's, not "Input should be a valid number"
Rate = Annotated[RateSchedule | PositiveFloat, Field(union_mode="left_to_right"),
                 BeforeValidator(_rate_or_schedule)]


# -- arrivals --------------------------------------------------------------------------------
class PoissonArrivals(Strict):
    process: Literal["poisson"]
    rate: Rate  # requests per second, or a schedule


class GammaArrivals(Strict):
    """Bursty arrivals: gamma inter-arrival times with a coefficient of variation (1 = Poisson)."""

    process: Literal["gamma"]
    rate: Rate
    cv: Annotated[float, Field(ge=1e-3, le=1e3)]  # below 0.001, use process: constant


class ConstantArrivals(Strict):
    process: Literal["constant"]
    rate: Rate


class TraceArrivals(TraceFile):
    """Arrival times replayed from a trace file (lengths come from the length distributions):
    the slice [``start_s``, ``start_s + duration_s``) of the file, time-scaled, and with
    ``loop`` replayed back to back until the stream's num_requests or duration_s ends it."""

    process: Literal["trace"]
    time_scale: PositiveFloat = 1.0  # >1 stretches time (lower rate)
    rate: PositiveFloat | None = None  # rescale to this mean rate (instead of time_scale)
    start_s: NonNegativeFloat = 0.0  # the slice replayed, in the file's own seconds
    duration_s: PositiveFloat | None = None
    loop: bool = False

    @model_validator(mode="after")
    def _one_scaling(self):
        return _one_scaling(self)


class ClosedArrivals(Strict):
    """Closed loop: ``concurrency`` users, each sending its next request when its previous one
    is done (finished or rejected) and ``think_time_s`` has passed; the requests (generated,
    or a trace's, whose timestamps are then ignored) go out in order. This is how
    ``vllm bench serve --max-concurrency``, genai-perf and most published benchmarks drive a
    server."""

    process: Literal["closed"]
    concurrency: PositiveInt
    think_time_s: NonNegativeFloat = 0.0


def needs_tag(tag: str, examples: dict[str, str]):
    """A validator run before a tagged union: a block without a known ``tag`` is refused with
    what to write (pydantic would say only that it cannot extract the tag)."""
    def check(v):
        if isinstance(v, dict) and isinstance(v.get(tag), str) and v[tag] in examples:
            return v
        # pydantic's message adds the value given, except for a mapping: say what it lacks
        got = ((f" (got {tag}: {v.get(tag)!r})" if tag in v else f" (got no '{tag}')")
               if isinstance(v, dict) else "")
        raise ValueError(f"expected {tag}: one of {', '.join(examples)}; for example "
                         + "; ".join(examples.values()) + got)
    return BeforeValidator(check)


ARRIVAL_EXAMPLES = {
    "poisson": "{process: poisson, rate: 4}",
    "gamma": "{process: gamma, rate: 4, cv: 2}",
    "constant": "{process: constant, rate: 4}",
    "trace": "{process: trace, path: trace.csv, format: azure}",
    "closed": "{process: closed, concurrency: 16}",
}
Arrivals = Annotated[
    PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals | ClosedArrivals,
    Field(discriminator="process"), needs_tag("process", ARRIVAL_EXAMPLES),
]


# -- lengths ---------------------------------------------------------------------------------
class FixedLength(Strict):
    dist: Literal["fixed"]
    value: PositiveInt


class UniformLength(Strict):
    dist: Literal["uniform"]
    min: PositiveInt
    max: PositiveInt

    @model_validator(mode="after")
    def _ordered(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be ≤ max ({self.max})")
        return self


class ClippedLength(Strict):
    """A continuous length distribution, rounded and clipped to [min, max]."""

    mean: TokenMean
    min: PositiveInt = 1
    max: PositiveInt | None = None

    @model_validator(mode="after")
    def _ordered(self):
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be ≤ max ({self.max})")
        return self


class NormalLength(ClippedLength):
    dist: Literal["normal"]
    std: NonNegativeFloat


class LognormalLength(ClippedLength):
    """Lognormal with the given mean and log-space sigma, clipped to [min, max]."""

    dist: Literal["lognormal"]
    sigma: LogSigma


class EmpiricalLength(TraceFile):
    """Lengths drawn (with replacement) from a trace column: the prompt lengths
    (``ContextTokens`` or ``prompt_len``) or the output lengths (``GeneratedTokens`` or
    ``output_len``), whatever the file's format."""

    dist: Literal["empirical"]
    column: Literal["ContextTokens", "GeneratedTokens", "prompt_len", "output_len"]


LENGTH_EXAMPLES = {
    "fixed": "{dist: fixed, value: 512}",
    "uniform": "{dist: uniform, min: 16, max: 512}",
    "normal": "{dist: normal, mean: 600, std: 200}",
    "lognormal": "{dist: lognormal, mean: 600, sigma: 0.9}",
    "empirical": "{dist: empirical, path: trace.csv, column: ContextTokens}",
}
Length = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength | EmpiricalLength,
    Field(discriminator="dist"), needs_tag("dist", LENGTH_EXAMPLES),
]


# -- durations (think times) -----------------------------------------------------------------
class FixedDuration(Strict):
    dist: Literal["fixed"]
    value: NonNegativeFloat


class UniformDuration(Strict):
    dist: Literal["uniform"]
    min: NonNegativeFloat
    max: NonNegativeFloat

    @model_validator(mode="after")
    def _ordered(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be ≤ max ({self.max})")
        return self


class ExponentialDuration(Strict):
    dist: Literal["exponential"]
    mean: PositiveFloat


class LognormalDuration(Strict):
    """Lognormal seconds with the given mean and log-space sigma."""

    dist: Literal["lognormal"]
    mean: PositiveFloat
    sigma: LogSigma


DURATION_EXAMPLES = {
    "fixed": "{dist: fixed, value: 2}",
    "uniform": "{dist: uniform, min: 1, max: 5}",
    "exponential": "{dist: exponential, mean: 3}",
    "lognormal": "{dist: lognormal, mean: 3, sigma: 0.8}",
}
Duration = Annotated[
    FixedDuration | UniformDuration | ExponentialDuration | LognormalDuration,
    Field(discriminator="dist"), needs_tag("dist", DURATION_EXAMPLES),
]


# -- whole traces ----------------------------------------------------------------------------
class TraceWorkload(TraceFile):
    """Arrivals and lengths together, replayed from a trace."""

    time_scale: PositiveFloat = 1.0
    rate: PositiveFloat | None = None  # rescale to this mean rate (instead of time_scale)
    start_s: NonNegativeFloat = 0.0
    duration_s: PositiveFloat | None = None
    loop: bool = False  # replay the slice back to back until num_requests or duration_s
    hash_block_size: PositiveInt = 512  # mooncake: tokens per hash id

    FORMAT_ONLY: ClassVar[dict[str, tuple[str, ...]]] = {
        **TraceFile.FORMAT_ONLY, "hash_block_size": ("mooncake",)}

    @model_validator(mode="after")
    def _one_scaling(self):
        return _one_scaling(self)


# -- shared prefixes -------------------------------------------------------------------------
class SharedPrefix(Strict):
    """Every request starts with one of ``num_prompts`` system prompts of ``length`` tokens,
    chosen uniformly or by a Zipf law (prompt k has weight 1/(k+1)^zipf_s); its prompt length
    is ``length`` plus its own sampled length."""

    num_prompts: Annotated[int, Field(gt=0, le=MAX_SYSTEM_PROMPTS)]
    length: PositiveInt
    popularity: Literal["uniform", "zipf"] = "uniform"
    zipf_s: PositiveFloat = 1.1

    @model_validator(mode="after")
    def _zipf_s_needs_zipf(self):
        if "zipf_s" in self.model_fields_set and self.popularity != "zipf":
            raise ValueError("zipf_s applies only to popularity: zipf")
        return self


class Conversations(Strict):
    """Multi-turn sessions. The arrival process starts sessions; turn t's prompt is the whole
    previous context (turn t-1's prompt and output) plus a new user message drawn from
    ``prompt_len``. Open loop: turn t arrives ``think_time_s`` after turn t-1 *arrived*,
    whether or not turn t-1 has finished."""

    turns: Length  # turns per session
    think_time_s: Duration
    max_context: PositiveInt | None = None  # a session ends before a turn whose prompt + output exceed it


# -- streams and classes ---------------------------------------------------------------------
DEFAULT_ARRIVAL = PoissonArrivals(process="poisson", rate=4.0)
DEFAULT_PROMPT = LognormalLength(dist="lognormal", mean=512, sigma=0.8, max=4096)
DEFAULT_OUTPUT = LognormalLength(dist="lognormal", mean=192, sigma=0.8, max=1024)
STREAM_FIELDS = ("arrival", "prompt_len", "output_len", "trace", "shared_prefix", "conversations")


class Stream(Strict):
    """One stream of traffic: arrivals and lengths, or a trace; optionally shared prefixes."""

    num_requests: NumRequests | None = None
    duration_s: PositiveFloat | None = None  # stop generating arrivals after this time
    arrival: Arrivals = DEFAULT_ARRIVAL
    prompt_len: Length = DEFAULT_PROMPT
    output_len: Length = DEFAULT_OUTPUT
    trace: TraceWorkload | None = None
    shared_prefix: SharedPrefix | None = None
    conversations: Conversations | None = None

    def _check_stream(self, bounded_elsewhere: bool = False):
        closed = self.arrival.process == "closed"
        if closed and self.conversations is not None:
            raise ValueError("closed-loop arrivals send requests in order; 'conversations' need open-loop "
                             "think times between turns")
        if closed and self.num_requests is None and self.trace is None:
            raise ValueError("closed-loop arrivals need num_requests (there is no arrival rate to run for "
                             "duration_s)")
        if self.trace is not None:
            given = {"arrival", "prompt_len", "output_len"} & self.model_fields_set
            both = given - {"arrival"} if closed else given
            if both:
                raise ValueError(f"give either 'trace' or {sorted(both)}, not both")
            if self.conversations is not None:
                raise ValueError("'conversations' needs generated traffic, not a 'trace'")
            if closed and self.trace.loop and "num_requests" not in self.model_fields_set:
                raise ValueError("closed-loop arrivals with trace.loop need num_requests")
            if (self.trace.loop and not bounded_elsewhere and self.duration_s is None
                    and "num_requests" not in self.model_fields_set):
                raise ValueError("trace.loop replays the trace without end; give num_requests or duration_s")
            if self.shared_prefix is not None and self.trace.format == "mooncake":
                raise ValueError("'shared_prefix' cannot be combined with a mooncake trace, "
                                 "whose hash_ids already say which prefixes are shared")
        elif self.num_requests is None and self.duration_s is None and not bounded_elsewhere:
            raise ValueError("give num_requests or duration_s")
        return self


class Slo(Strict):
    """Service-level objectives: latency limits a request must meet (None: no limit)."""

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    e2e_s: PositiveFloat | None = None


class TrafficClass(Stream):
    """A named stream with its own service-level objectives and priority (lower = served
    first). Its random draws depend only on the scenario seed and its index in ``classes``."""

    name: str = Field(min_length=1)
    priority: int = Field(0, ge=-(2**15), lt=2**15)
    slo: Slo = Slo()


class WorkloadSpec(Stream):
    """Single-class traffic at the top level, or ``classes``. With classes, ``num_requests``
    and ``duration_s`` (when given) cut the merged traffic, and bound any class that sets
    neither itself. Both given: the first reached ends the arrivals; ``duration_s`` alone is
    not cut by the default ``num_requests`` (``sim.traffic.bounds``)."""

    rate_scale: PositiveFloat = 1.0  # multiplies every arrival rate (divides all arrival times)
    num_requests: NumRequests | None = 1000  # the default applies when neither bound is given
    classes: Annotated[tuple[TrafficClass, ...], AsTuple] | None = None

    @model_validator(mode="after")
    def _one_source(self):
        if self.classes is None:
            return self._check_stream()
        both = sorted(set(STREAM_FIELDS) & self.model_fields_set)
        if both:
            raise ValueError(f"give either 'classes' or {both}, not both; "
                             "with classes, put these fields inside each class")
        if not self.classes:
            raise ValueError("'classes' needs at least one class")
        if any(c.arrival.process == "closed" for c in self.classes):
            raise ValueError("closed-loop arrivals (process: closed) are for single-class workloads")
        names = [c.name for c in self.classes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"class names must be unique; repeated: {dup}")
        bounded = {"num_requests", "duration_s"} & self.model_fields_set
        for i, c in enumerate(self.classes):
            try:
                c._check_stream(bounded_elsewhere=bool(bounded))
            except ValueError as e:
                raise ValueError(f"classes[{i}] ({c.name}): {e}") from None
        return self
