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
from types import SimpleNamespace

import numpy as np

from endpoint.failures import error
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
    chunks: int = 0  # chunks that carried a token (``emits_token``)
    error: str = ""  # "KIND: what happened" (endpoint.failures); empty: finished
    done: bool = False  # the client is through with it (answered or failed)
    retries: int = 0  # sent again on a new connection (the kept-alive one was closed)


@dataclass
class Options:
    url: str  # base URL, e.g. http://127.0.0.1:8000
    model: str
    api: str = "completions"  # or chat
    exact_output: bool = True  # ignore_eos + min_tokens
    temperature: float = 0.0
    timeout_s: float = 600.0  # per request, from send to [DONE]
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


class StreamError(Exception):
    """Something the server sent that the client cannot take: ``error`` is the record's."""

    def __init__(self, kind: str, detail: str):
        super().__init__(error(kind, detail))


def _count(usage: dict, key: str) -> int | None:
    v = usage.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or int(v) != v:
        raise StreamError("malformed event", f"usage.{key} is {json.dumps(v)[:40]}, not a count of tokens")
    return int(v)


def _read_usage(rec: Record, usage) -> None:
    if not isinstance(usage, dict):
        raise StreamError("malformed event", f"usage is {json.dumps(usage)[:60]}, not an object")
    rec.prompt_tokens = _count(usage, "prompt_tokens")
    rec.output_tokens = _count(usage, "completion_tokens")
    details = usage.get("prompt_tokens_details")
    rec.cached_tokens = _count(details, "cached_tokens") if isinstance(details, dict) else None


def _event(data: bytes) -> dict:
    try:
        msg = json.loads(data)
    except ValueError:
        raise StreamError("malformed event", f"data: {data[:60].decode('utf-8', 'replace')} is not JSON") from None
    if not isinstance(msg, dict):
        raise StreamError("malformed event", f"data: {data[:60].decode('utf-8', 'replace')} is not a JSON object")
    return msg


def emits_token(choices) -> bool:
    """Whether a chunk's choices carry a token as the server emits it: text (a chat delta's
    content), or an empty text mid-stream (a special token, as ``vllm bench serve`` counts
    it); not an empty closing chunk that only gives the finish reason (llama.cpp), nor a chat
    delta that only announces the role."""
    if not isinstance(choices, list):
        raise StreamError("malformed event", f"choices is {json.dumps(choices)[:60]}, not a list")
    for c in choices:
        if not isinstance(c, dict):
            raise StreamError("malformed event", f"a choice is {json.dumps(c)[:60]}, not an object")
        delta = c.get("delta")
        if isinstance(delta, dict):
            if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                return True
            if "role" in delta:
                continue
        elif c.get("text"):
            return True
        if c.get("finish_reason") is None:
            return True
    return False


async def _stream(session, url: str, body: dict, rec: Record, t0: float, stats: dict, ctx) -> None:
    """One attempt: stream the answer into ``rec``; a fault of the server raises."""
    async with session.post(url, json=body, trace_request_ctx=ctx) as resp:
        ctx.answered = True
        if resp.status != 200:
            text = (await resp.text(errors="replace"))[:300]
            rec.error = error("HTTP", f"HTTP {resp.status}: {text}")
            return
        last = t0 + rec.sent
        done = False
        async for raw in resp.content:
            line = raw.strip()
            if line.startswith(b"error:") and not rec.error:  # llama.cpp's error event
                rec.error = error("server error", line[6:].strip().decode("utf-8", "replace"))
            if not line.startswith(b"data:"):
                continue  # blank separators, SSE comments
            now = time.perf_counter()
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            p0 = time.perf_counter()
            msg = _event(data)
            stats["parse_s"] += time.perf_counter() - p0
            stats["chunks"] += 1
            if msg.get("choices") and emits_token(msg["choices"]):
                if rec.chunks == 0:
                    rec.first_token = now - t0
                else:
                    rec.gaps.append(now - last)
                last = now
                rec.chunks += 1
            if msg.get("usage") is not None:
                _read_usage(rec, msg["usage"])
            if msg.get("error") and not rec.error:
                rec.error = error("server error", str(msg["error"]))
        if rec.chunks:
            rec.last_token = last - t0
        if rec.error:
            return
        if not done:
            raise StreamError("ended early", f"the stream ended without [DONE] after {rec.chunks} token(s)")
        if not rec.chunks:
            rec.error = error("no token", "the stream finished without a token")


def _failure(e: BaseException, rec: Record, opts: Options) -> str:
    import aiohttp

    got = f"after {rec.chunks} token(s)"
    if isinstance(e, StreamError):
        return str(e)
    if isinstance(e, asyncio.TimeoutError):
        what = f"the stream stalled {got}" if rec.chunks else "no answer"
        return error("timeout", f"{what}: the request timeout of {opts.timeout_s:g} s ran out")
    if isinstance(e, aiohttp.ClientPayloadError):
        return error("connection", f"the connection was cut mid-stream {got}: {e}")
    if isinstance(e, aiohttp.ClientConnectorError):
        return error("connection", f"cannot connect: {e}")
    if isinstance(e, (aiohttp.ClientError, OSError)):
        return error("connection", f"{type(e).__name__} {got}: {e}")
    if isinstance(e, ValueError):  # an event longer than the client reads
        return error("malformed event", f"{type(e).__name__}: {e}")
    return error("client", f"{type(e).__name__}: {e}")


async def send(session, url: str, req: Request, opts: Options, rec: Record, t0: float,
               stats: dict) -> None:
    """Stream one request; fill ``rec`` (times relative to ``t0``, a perf_counter value).
    Every fault ends up in ``rec.error``. A request that failed on a kept-alive connection
    before any answer (the server had closed it) is sent once more on a new connection."""
    import aiohttp

    body = payload(req, opts)
    rec.sent = time.perf_counter() - t0
    for attempt in range(2):
        ctx = SimpleNamespace(reused=False, answered=False)
        try:
            if attempt == 0:
                await _stream(session, url, body, rec, t0, stats, ctx)
            else:  # a new connection: the pool's other idle ones may have been closed as well
                async with aiohttp.ClientSession(timeout=session.timeout,
                                                 connector=aiohttp.TCPConnector(force_close=True)) as fresh:
                    await _stream(fresh, url, body, rec, t0, stats, ctx)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            if attempt == 0 and ctx.reused and not ctx.answered:
                rec.retries += 1
                continue
            rec.error = _failure(e, rec, opts)
        except Exception as e:  # every fault is the request's: the run goes on
            rec.error = _failure(e, rec, opts)
        break
    rec.done = True


def _trace_reuse():
    """Marks a request's context ``reused`` when it goes out on a kept-alive connection."""
    import aiohttp

    async def on_reuse(session, ctx, params) -> None:
        if ctx.trace_request_ctx is not None:
            ctx.trace_request_ctx.reused = True

    tc = aiohttp.TraceConfig()
    tc.on_connection_reuseconn.append(on_reuse)
    return tc


async def _loop_lag(samples: list[float], stop: asyncio.Event, period: float = 0.01) -> None:
    """How late the event loop wakes from a ``period`` sleep (its own overhead under load)."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(period)
        samples.append(time.perf_counter() - t - period)


async def run_async(requests: Sequence[Request], opts: Options, *, closed: int | None = None,
                    think_time_s: float = 0.0, on_done: Callable[[Record], None] | None = None,
                    on_start: Callable[[float], None] | None = None,
                    records: list[Record] | None = None, time_limit_s: float | None = None) -> LoadResult:
    """Send ``requests`` (open loop at their arrivals, or ``closed`` users); return records.
    ``records``: an empty list to fill as the run goes (to watch it from another task).
    ``time_limit_s``: the run's longest time; then requests in flight are cancelled and
    recorded as such, with those never sent."""
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
    tasks: list[asyncio.Task] = []
    async with aiohttp.ClientSession(timeout=timeout, connector=connector,
                                     trace_configs=[_trace_reuse()]) as session:
        monitor = asyncio.create_task(_loop_lag(lag, stop))
        cpu0, wall0 = time.process_time(), time.time()
        t0 = time.perf_counter()
        if on_start:
            on_start(wall0)

        async def one(i: int) -> None:
            await send(session, url, requests[i], opts, records[i], t0, stats)
            if on_done:
                on_done(records[i])

        async def drive() -> None:
            if closed is None:
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

                tasks.extend(asyncio.create_task(user()) for _ in range(min(closed, len(requests))))
                await asyncio.gather(*tasks)

        driver = asyncio.create_task(drive())
        try:
            await asyncio.wait({driver}, timeout=time_limit_s)
            limited = not driver.done()
        finally:  # the time limit, or the caller cancelled this run: the requests go with it
            if not driver.done():
                for t in (driver, *tasks):
                    t.cancel()
                await asyncio.gather(driver, *tasks, return_exceptions=True)
                stop.set()
        if limited:
            _stopped(records, time_limit_s)
        elif driver.exception() is not None:
            raise driver.exception()
        duration = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        stop.set()
        await monitor
    return LoadResult(records, wall0, duration, overhead(records, lag, cpu, stats, closed is None),
                      "open" if closed is None else "closed")


def _stopped(records: Sequence[Record], limit: float | None) -> None:
    """Mark what the time limit cut short."""
    for r in records:
        if r.done:
            continue
        if np.isfinite(r.sent):
            r.error = error("time limit", f"cancelled after {r.chunks} token(s): the run's time limit of "
                            f"{limit:g} s was reached")
        else:
            r.error = error("time limit", f"not sent: the run's time limit of {limit:g} s was reached first")
        r.done = True


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
