"""A small OpenAI-compatible streaming server with a known scheduler and step cost, for tests.

One asyncio engine loop: each step takes decodes first, then prefill chunks up to a token
budget, at most ``max_seqs`` running, and lasts ``c0 + c_tok·tokens + c_seq·seqs`` seconds; a
request reaches the engine ``overhead`` seconds after it is received. It serves
``/v1/models``, streaming ``/v1/completions`` (prompt as token ids; usage at the end),
``/version`` and a vLLM-like ``/metrics`` — enough to calibrate and validate against it.
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


def make_app(cost: Cost, model: str = "fake", root: str | None = None) -> tuple[web.Application, FakeEngine]:
    holder: dict = {}

    async def start(app):
        holder["engine"] = engine = FakeEngine(cost)
        holder["task"] = asyncio.create_task(engine.loop())

    async def stop(app):
        holder["task"].cancel()

    async def models(request):
        return web.json_response({"object": "list", "data": [
            {"id": model, "object": "model", "root": root, "max_model_len": 1024}]})

    async def version(request):
        return web.json_response({"version": "fake-1"})

    async def metrics(request):
        return web.Response(text=holder["engine"].metrics())

    async def completions(request):
        body = await request.json()
        if body.get("model") != model:
            return web.json_response({"error": {"message": "no such model"}}, status=404)
        prompt = body["prompt"]
        n = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        engine: FakeEngine = holder["engine"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(cost.overhead)
        r = Req(n, int(body["max_tokens"]))
        engine.waiting.append(r)
        engine.wake.set()
        while True:
            k = await r.queue.get()
            chunk = {"choices": [{"index": 0, "text": f" t{k}"}], "usage": None}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if k >= r.max_tokens:
                break
        usage = {"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": r.generated}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    return app, holder


class FakeServer:
    """Runs the app on 127.0.0.1 in a background thread (``with FakeServer(...) as url:``)."""

    def __init__(self, cost: Cost | None = None, root: str | None = None):
        self.cost = cost or Cost()
        self.root = root
        self.loop = asyncio.new_event_loop()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.ready = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app, self.holder = make_app(self.cost, root=self.root)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> str:
        self.thread.start()
        self.ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
