"""A small OpenAI-compatible streaming server with a known scheduler and step cost, for tests.

One asyncio engine loop: each step takes decodes first, then prefill chunks up to a token
budget, at most ``max_seqs`` running, and lasts ``c0 + c_tok·tokens + c_seq·seqs`` seconds; a
request reaches the engine ``overhead`` seconds after it is received. It serves
``/v1/models``, streaming ``/v1/completions`` (prompt as token ids; usage at the end),
``/version`` and a vLLM-like ``/metrics`` — enough to calibrate and validate against it; as
llama.cpp's server (``flavor="llama.cpp"``: ``/props``, ``/slots``, ``llamacpp:*`` metrics, no
``/version``) or SGLang (``/get_server_info``), it publishes its limits as they do. A request
longer than ``n_ctx`` is refused with HTTP 400, as the engines refuse it.

``FakeServer.fault(mode, every)`` makes every ``every``-th completion request hostile (see
``FAULTS``); ``close-reused`` instead drops every request that arrives on a kept-alive
connection, without an answer (as a server does that closed it while the client reused it).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Cost:
    c0: float = 0.006
    c_tok: float = 0.0001
    c_seq: float = 0.001
    budget: int = 128
    max_seqs: int = 6
    overhead: float = 0.004
    block_size: int = 16
    kv_blocks: int = 4096
    n_ctx: int = 1024  # tokens one sequence (llama.cpp: one slot) may hold


FAULTS = {
    "null": "a token, then `data: null`",
    "string": 'a token, then `data: "x"`',
    "not-json": "a token, then `data: {oops`",
    "bad-usage": "every token, then usage.completion_tokens = \"many\"",
    "no-done": "half the tokens, then the stream ends (no usage, no [DONE])",
    "http-500": "HTTP 500 with an error body",
    "error-event": "a token, then an `error:` event (llama.cpp) and the end of the stream",
    "stall": "a token, then nothing until the server stops",
    "disconnect": "a token, then the connection is cut",
    "empty-final": "every token, then an empty chunk with finish_reason (llama.cpp), usage and [DONE]",
    "close-reused": "a request on a reused keep-alive connection: the connection closed, no answer",
    "close-after": "every token, then the kept-alive connection closed right after the answer",
}


@dataclass
class Faults:
    mode: str | None = None
    every: int = 1
    models: object = None  # /v1/models's answer instead of the model (a hostile listing)
    seen: int = 0  # completion requests so far
    connections: set = field(default_factory=set)  # transports that carried a request

    def pick(self, transport) -> str | None:
        """The fault of this request (None: served normally)."""
        reused = transport in self.connections
        self.connections.add(transport)
        if self.mode == "close-reused":
            return self.mode if reused else None
        self.seen += 1
        return self.mode if self.mode and self.seen % self.every == 0 else None


def _event(data) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def _token(k: int) -> bytes:
    return _event({"choices": [{"index": 0, "text": f" t{k}", "finish_reason": None}], "usage": None})


@dataclass
class Req:
    prompt: int
    max_tokens: int
    done_prefill: int = 0
    generated: int = 0
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)


class FakeEngine:
    def __init__(self, cost: Cost):
        self.cost = cost
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.wake = asyncio.Event()
        self.iterations: list[int] = []
        self.fail_next = False

    async def loop(self) -> None:
        c = self.cost
        while True:
            if not self.waiting and not self.running:
                self.wake.clear()
                await self.wake.wait()
            while self.waiting and len(self.running) < c.max_seqs:
                self.running.append(self.waiting.popleft())
            budget, rows = c.budget, []
            for r in self.running:  # decodes first
                if r.done_prefill == r.prompt and budget > 0:
                    rows.append((r, 1))
                    budget -= 1
            for r in self.running:
                if r.done_prefill < r.prompt and budget > 0:
                    q = min(budget, r.prompt - r.done_prefill)
                    rows.append((r, q))
                    budget -= q
            tokens = sum(q for _, q in rows)
            await asyncio.sleep(c.c0 + c.c_tok * tokens + c.c_seq * len(rows))
            self.iterations.append(tokens)
            for r, q in rows:
                if r.done_prefill < r.prompt:
                    r.done_prefill += q
                    if r.done_prefill < r.prompt:
                        continue
                r.generated += 1
                r.queue.put_nowait(r.generated)
                if r.generated >= r.max_tokens:
                    self.running.remove(r)

    def metrics_llama_cpp(self) -> str:
        """llama.cpp's names (``--metrics``): requests processing (in a slot) and deferred."""
        return "\n".join(["# TYPE llamacpp:requests_processing gauge",
                          f"llamacpp:requests_processing {len(self.running)}",
                          "# TYPE llamacpp:requests_deferred gauge",
                          f"llamacpp:requests_deferred {len(self.waiting)}",
                          f"llamacpp:n_decode_total {len(self.iterations)}"]) + "\n"

    def metrics(self) -> str:
        c = self.cost
        lines = [f'vllm:num_requests_running{{engine="0"}} {len(self.running)}',
                 f'vllm:num_requests_waiting{{engine="0"}} {len(self.waiting)}',
                 'vllm:kv_cache_usage_perc{engine="0"} 0.0',
                 f'vllm:cache_config_info{{block_size="{c.block_size}",num_gpu_blocks="{c.kv_blocks}"}} 1.0']
        edges = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
        for e in edges:
            lines.append(f'vllm:iteration_tokens_total_bucket{{le="{float(e)}"}} '
                         f"{sum(1 for t in self.iterations if t <= e)}")
        lines.append(f'vllm:iteration_tokens_total_bucket{{le="+Inf"}} {len(self.iterations)}')
        lines.append(f"vllm:iteration_tokens_total_count {len(self.iterations)}")
        lines.append(f"vllm:iteration_tokens_total_sum {sum(self.iterations)}")
        return "\n".join(lines) + "\n"


FLAVORS = ("vllm", "llama.cpp", "sglang")


def make_app(cost: Cost, model: str = "fake", root: str | None = None,
             faults: Faults | None = None, flavor: str = "vllm") -> tuple[web.Application, dict]:
    """``flavor``: whose identity and limits the server publishes, in that engine's places and
    shapes (``endpoint/server_info.py``); the engine behind them is the same."""
    holder: dict = {"faults": faults or Faults()}
    released = asyncio.Event()  # a stalled stream waits for the server's shutdown

    async def start(app):
        holder["engine"] = engine = FakeEngine(cost)
        holder["task"] = asyncio.create_task(engine.loop())

    async def stop(app):
        holder["task"].cancel()

    async def shutdown(app):
        released.set()

    async def models(request):
        if holder["faults"].models is not None:
            return web.json_response(holder["faults"].models)
        if flavor == "llama.cpp":  # no max_model_len; meta.n_ctx_train is the model's, not the server's
            return web.json_response({"object": "list", "data": [
                {"id": model, "object": "model", "owned_by": "llamacpp", "created": 0,
                 "meta": {"n_ctx": cost.n_ctx, "n_ctx_train": 8192, "n_vocab": 49152, "n_params": 134515008}}]})
        return web.json_response({"object": "list", "data": [
            {"id": model, "object": "model", "root": root, "max_model_len": cost.n_ctx,
             "owned_by": flavor}]})

    async def version(request):
        return web.json_response({"version": "fake-1"})

    async def metrics(request):
        if flavor == "llama.cpp":
            return web.Response(text=holder["engine"].metrics_llama_cpp())
        return web.Response(text=holder["engine"].metrics())

    async def props(request):
        return web.json_response({"default_generation_settings": {"n_ctx": cost.n_ctx, "params": {}},
                                  "total_slots": cost.max_seqs, "model_path": f"/models/{model}.gguf",
                                  "build_info": "b0-fake"})

    async def slots(request):
        return web.json_response([{"id": i, "n_ctx": cost.n_ctx, "is_processing": False}
                                  for i in range(cost.max_seqs)])

    async def server_info(request):
        return web.json_response({"model_path": model, "context_length": cost.n_ctx,
                                  "chunked_prefill_size": cost.budget, "max_running_requests": None,
                                  "page_size": 1, "version": "fake-0.5",
                                  "internal_states": [{"max_total_num_tokens": cost.kv_blocks * cost.block_size,
                                                       "max_running_requests": cost.max_seqs}]})

    async def completions(request):
        body = await request.json()
        if body.get("model") != model:
            return web.json_response({"error": {"message": "no such model"}}, status=404)
        prompt = body["prompt"]
        n = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        if n + int(body.get("max_tokens") or 0) > cost.n_ctx:  # as the engines refuse it
            return web.json_response({"error": {"code": 400, "type": "exceed_context_size_error",
                                                "message": "the request exceeds the available context size"}},
                                     status=400)
        fault = holder["faults"].pick(request.transport)
        if fault == "close-reused":
            request.transport.close()
            return web.Response()  # never reaches the client
        if fault == "http-500":
            return web.json_response({"error": {"message": "the engine died"}}, status=500)
        engine: FakeEngine = holder["engine"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(cost.overhead)
        max_tokens = int(body["max_tokens"])
        if fault in ("null", "string", "not-json", "stall", "disconnect", "error-event"):
            await resp.write(_token(1))
            if fault == "stall":
                await released.wait()
                return resp
            if fault == "disconnect":
                request.transport.abort()
                return resp
            if fault == "error-event":
                await resp.write(b'error: {"code": 500, "message": "slot unavailable"}\n\n')
                return resp
            await resp.write(_event({"null": "null", "string": '"x"', "not-json": "{oops"}[fault]))
            await resp.write(_event({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1}}))
            await resp.write(_event("[DONE]"))
            return resp
        if fault == "no-done":
            max_tokens = max(max_tokens // 2, 1)
        r = Req(n, max_tokens)
        engine.waiting.append(r)
        engine.wake.set()
        while True:
            k = await r.queue.get()
            await resp.write(_token(k))
            if k >= r.max_tokens:
                break
        if fault == "no-done":
            return resp
        if fault == "empty-final":
            await resp.write(_event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
        tokens = "many" if fault == "bad-usage" else r.generated
        await resp.write(_event({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": tokens}}))
        await resp.write(_event("[DONE]"))
        if fault == "close-after":
            await resp.write_eof()
            request.transport.close()
        return resp

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.on_shutdown.append(shutdown)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    if flavor == "vllm":
        app.router.add_get("/version", version)
    elif flavor == "llama.cpp":
        app.router.add_get("/props", props)
        app.router.add_get("/slots", slots)
    else:
        app.router.add_get("/get_server_info", server_info)
    app.router.add_post("/v1/completions", completions)
    return app, holder


class FakeServer:
    """Runs the app on 127.0.0.1 in a background thread (``with FakeServer(...) as url:``)."""

    def __init__(self, cost: Cost | None = None, root: str | None = None, fault: str | None = None,
                 every: int = 1, flavor: str = "vllm"):
        if flavor not in FLAVORS:
            raise ValueError(f"no flavor {flavor!r}: {', '.join(FLAVORS)}")
        self.flavor = flavor
        self.cost = cost or Cost()
        self.root = root
        self.faults = Faults()
        self.fault(fault, every)
        self.loop = asyncio.new_event_loop()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.ready = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app, self.holder = make_app(self.cost, root=self.root, faults=self.faults, flavor=self.flavor)
        self.runner = web.AppRunner(app, shutdown_timeout=5.0)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()

    def fault(self, mode: str | None, every: int = 1) -> None:
        """From now on, every ``every``-th completion request is hostile as ``mode`` says."""
        if mode is not None and mode not in FAULTS:
            raise ValueError(f"no fault {mode!r}: {', '.join(FAULTS)}")
        self.faults.mode, self.faults.every, self.faults.seen = mode, every, 0

    def __enter__(self) -> str:
        self.thread.start()
        self.ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
