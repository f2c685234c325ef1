"""The load generator: replay requests against an OpenAI-compatible server, streaming.

Open loop sends each request at its arrival time (relative to the start); closed loop runs
``concurrency`` users, each sending the next request (in order) ``think_time_s`` after its
previous one finished. Every request streams (``stream: true`` with
``stream_options.include_usage``) from ``/v1/completions`` (prompt as token ids) or
``/v1/chat/completions`` (prompt as text), asks for an exact output length where the server
allows it (``ignore_eos`` and ``min_tokens`` = ``max_tokens``) and is timed as ``vllm bench
serve`` times it: TTFT at the first chunk that carries a choice, one inter-token gap per
later such chunk, E2E at the last such chunk; token counts from ``usage``.

The client's own overhead is measured beside: how late each request was sent against its
schedule, how late the event loop woke from a short sleep (a loop busy parsing responses
delays every timestamp it takes), and the process's CPU time per request and per chunk.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.errors import InputError


@dataclass
class Request:
    request_id: int
    arrival: float  # seconds after the start (open loop)
    prompt: list[int] | str  # token ids (completions) or text (chat)
    prompt_len: int
    max_tokens: int


@dataclass
class Record:
    """One request as measured; times in seconds after the run's start."""

    request_id: int
    scheduled: float
    prompt_len: int
    max_tokens: int
    sent: float = float("nan")
    first_token: float = float("nan")
    last_token: float = float("nan")
    gaps: list[float] = field(default_factory=list)  # one per chunk after the first
    prompt_tokens: int | None = None  # from usage
    output_tokens: int | None = None
    cached_tokens: int | None = None
    chunks: int = 0
    error: str = ""


@dataclass
class Options:
    url: str  # base URL, e.g. http://127.0.0.1:8000
    model: str
    api: str = "completions"  # or chat
    exact_output: bool = True  # ignore_eos + min_tokens
    temperature: float = 0.0
    timeout_s: float = 600.0
    extra_body: dict = field(default_factory=dict)


@dataclass
class LoadResult:
    records: list[Record]
    start_wall: float  # time.time() at the start
    duration_s: float
    client: dict[str, float]  # the client's own overhead
    mode: str  # open or closed


def completions_url(opts: Options) -> str:
    base = opts.url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    return base + ("/v1/chat/completions" if opts.api == "chat" else "/v1/completions")


def payload(req: Request, opts: Options) -> dict:
    body: dict = {"model": opts.model, "max_tokens": int(req.max_tokens), "stream": True,
                  "stream_options": {"include_usage": True}, "temperature": opts.temperature}
    if opts.api == "chat":
        text = req.prompt if isinstance(req.prompt, str) else str(req.prompt)
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = [int(i) for i in req.prompt] if not isinstance(req.prompt, str) else req.prompt
    if opts.exact_output:
        body["ignore_eos"] = True
        body["min_tokens"] = int(req.max_tokens)
    body.update(opts.extra_body)
    return body


def _has_choice(data: dict, chat: bool) -> bool:
    choices = data.get("choices")
    return bool(choices)


async def send(session, url: str, req: Request, opts: Options, rec: Record, t0: float,
               stats: dict) -> None:
    """Stream one request; fill ``rec`` (times relative to ``t0``, a perf_counter value)."""
    import aiohttp

    body = payload(req, opts)
    chat = opts.api == "chat"
    st = time.perf_counter()
    rec.sent = st - t0
    last = st
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                text = (await resp.text())[:300]
                rec.error = f"HTTP {resp.status}: {text}"
                return
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue  # blank separators, SSE comments
                now = time.perf_counter()
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                p0 = time.perf_counter()
                msg = json.loads(data)
                stats["parse_s"] += time.perf_counter() - p0
                stats["chunks"] += 1
                if _has_choice(msg, chat):
                    if rec.chunks == 0:
                        rec.first_token = now - t0
                    else:
                        rec.gaps.append(now - last)
                    last = now
                    rec.chunks += 1
                usage = msg.get("usage")
                if usage:
                    rec.prompt_tokens = usage.get("prompt_tokens")
                    rec.output_tokens = usage.get("completion_tokens")
                    details = usage.get("prompt_tokens_details") or {}
                    rec.cached_tokens = details.get("cached_tokens")
                if msg.get("error"):
                    rec.error = str(msg["error"])[:300]
        if rec.chunks:
            rec.last_token = last - t0
        elif not rec.error:
            rec.error = "no token in the stream"
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:  # incl. bad JSON, long lines
        rec.error = f"{type(e).__name__}: {e}"[:300]


async def _loop_lag(samples: list[float], stop: asyncio.Event, period: float = 0.01) -> None:
    """How late the event loop wakes from a ``period`` sleep (its own overhead under load)."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(period)
        samples.append(time.perf_counter() - t - period)


async def run_async(requests: Sequence[Request], opts: Options, *, closed: int | None = None,
                    think_time_s: float = 0.0, on_done: Callable[[Record], None] | None = None,
                    on_start: Callable[[float], None] | None = None,
                    records: list[Record] | None = None) -> LoadResult:
    """Send ``requests`` (open loop at their arrivals, or ``closed`` users); return records.
    ``records``: an empty list to fill as the run goes (to watch it from another task)."""
    import aiohttp

    url = completions_url(opts)
    if records is None:
        records = []
    records[:] = [Record(r.request_id, r.arrival, r.prompt_len, r.max_tokens) for r in requests]
    stats = {"parse_s": 0.0, "chunks": 0}
    lag: list[float] = []
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=opts.timeout_s)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        monitor = asyncio.create_task(_loop_lag(lag, stop))
        cpu0, wall0 = time.process_time(), time.time()
        t0 = time.perf_counter()
        if on_start:
            on_start(wall0)

        async def one(i: int) -> None:
            await send(session, url, requests[i], opts, records[i], t0, stats)
            if on_done:
                on_done(records[i])

        if closed is None:
            tasks = []
            for i, r in enumerate(requests):
                delay = t0 + r.arrival - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
        else:
            queue = iter(range(len(requests)))

            async def user() -> None:
                for i in queue:
                    records[i].scheduled = time.perf_counter() - t0
                    await one(i)
                    if think_time_s > 0:
                        await asyncio.sleep(think_time_s)

            await asyncio.gather(*(user() for _ in range(min(closed, len(requests)))))
        duration = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        stop.set()
        await monitor
    return LoadResult(records, wall0, duration, overhead(records, lag, cpu, stats, closed is None),
                      "open" if closed is None else "closed")


def overhead(records: Sequence[Record], lag: list[float], cpu_s: float, stats: dict,
             open_loop: bool) -> dict[str, float]:
    sent = np.array([r.sent - r.scheduled for r in records if np.isfinite(r.sent)])
    lag_a = np.asarray(lag) if lag else np.zeros(1)
    n = max(len(records), 1)
    chunks = max(stats["chunks"], 1)
    out = {"cpu_s": cpu_s, "cpu_per_request_ms": cpu_s / n * 1e3,
           "cpu_per_chunk_us": cpu_s / chunks * 1e6, "parse_per_chunk_us": stats["parse_s"] / chunks * 1e6,
           "chunks": float(stats["chunks"]),
           "loop_lag_p50_ms": float(np.percentile(lag_a, 50) * 1e3),
           "loop_lag_p99_ms": float(np.percentile(lag_a, 99) * 1e3),
           "loop_lag_max_ms": float(lag_a.max() * 1e3)}
    if open_loop and len(sent):
        out |= {"send_lag_p50_ms": float(np.percentile(sent, 50) * 1e3),
                "send_lag_p99_ms": float(np.percentile(sent, 99) * 1e3),
                "send_lag_max_ms": float(sent.max() * 1e3)}
    return out


def run(requests: Sequence[Request], opts: Options, **kw) -> LoadResult:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise InputError("--endpoint", opts.url, "the load generator needs aiohttp: "
                         "pip install 'servesim[endpoint]'") from None
    return asyncio.run(run_async(requests, opts, **kw))
