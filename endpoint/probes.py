"""Designed probes of a black-box server, sent through the load generator.

Each probe isolates one quantity:

- ``ttft``: one request at a time, prompts of P tokens, one output token: TTFT(P) is the
  per-request overhead plus the prefill step(s). The server's per-iteration token counter
  (``vllm:iteration_tokens_total``) tells how many steps each prompt took, hence the token
  budget per step (chunk size).
- ``decode``: b requests at once with a context of c tokens: once all of them decode, every
  gap between tokens is one step of b decodes.
- ``mixed``: b requests decoding, then one prompt of P tokens arrives: the decodes' gap that
  spans its prefill is one step of b decodes plus a P-token chunk (chunked-prefill
  interference).
- ``max_seqs``: many short requests at once while ``/metrics`` is polled: running requests
  plateau at the scheduler's limit.
- ``saturation``: a closed loop at full concurrency: the throughput the server sustains (a
  check of the fitted model, not an input to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from endpoint.failures import check, kind_of
from endpoint.loadgen import LoadResult, Options, Record, Request, run_async
from endpoint.prompts import PromptBuilder
from endpoint.server_metrics import ITER_COUNT, ITER_TOKENS, RUNNING, Sampler, scrape
from sim.errors import InputError


@dataclass
class TtftPoint:
    prompt: int
    ttft: float
    steps: int | None  # iterations the server counted for this request (None: no metrics)
    itl: float = float("nan")


@dataclass
class GapPoint:
    kind: str  # decode | mixed
    batch: int  # decoding requests
    context: float  # Σ context_len of the decoding rows (cached + the new token)
    prompt: int  # the chunk's tokens (mixed), 0 for decode
    seconds: float
    n: int = 1  # gaps behind the median


@dataclass
class ProbeData:
    ttft: list[TtftPoint] = field(default_factory=list)
    gaps: list[GapPoint] = field(default_factory=list)
    chunks: list[tuple[int, int | None]] = field(default_factory=list)  # prompt, prefill steps
    max_running: float | None = None
    max_seqs_sent: int = 0
    saturation: dict = field(default_factory=dict)
    phases_s: dict[str, float] = field(default_factory=dict)


class Prober:
    """Sends the probes. Every probe request must succeed: a failed one stops the measurement
    with what the server did (``endpoint.failures.ServerFailure``, exit 2); ``time_limit_s``
    bounds all probes together (``--time-limit``)."""

    def __init__(self, opts: Options, builder: PromptBuilder, tick=lambda n=1: None, metrics: bool = True,
                 time_limit_s: float | None = None, who: str = "calibration"):
        self.opts, self.builder, self.tick, self.metrics = opts, builder, tick, metrics
        self.next_id = 1_000_000  # unique prompts: no prefix-cache hit between probes
        self.time_limit_s, self.who, self.phase = time_limit_s, who, ""
        self.deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
        self.context: int | None = None  # tokens one sequence may hold on the server (None: not known)

    def _during(self) -> str:
        return f" during {self.phase!r}" if self.phase else ""

    def _out_of_time(self) -> InputError:
        return InputError("--time-limit", None, f"{self.who} did not finish within {self.time_limit_s:g} s "
                                                f"(stopped{self._during()})")

    def left(self) -> float | None:
        """Seconds left of the time limit (None: no limit); none left: stop."""
        if self.deadline is None:
            return None
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise self._out_of_time()
        return left

    def check(self, records: list[Record], what: str) -> None:
        if any(kind_of(r.error) == "time limit" for r in records if r.error):
            raise self._out_of_time()
        check(self.opts.url, f"{self.who} probe ({what})", records)

    async def send(self, reqs: list[Request], what: str, **kw) -> LoadResult:
        """``reqs`` through the load generator within the time left; every one must succeed."""
        res = await run_async(reqs, self.opts, time_limit_s=self.left(), **kw)
        self.check(res.records, what)
        return res

    def request(self, prompt: int, out: int, arrival: float = 0.0) -> Request:
        if self.context is not None and prompt + out > self.context:  # never a probe the server must refuse
            raise InputError("--endpoint", self.opts.url,
                             f"{self.who} would send a probe of {prompt} + {out} tokens{self._during()}, more than "
                             f"the {self.context} one sequence may hold on this server")
        self.next_id += 1
        ids = self.builder.prompt(self.next_id, prompt)
        return Request(self.next_id, arrival, [int(i) for i in ids], prompt, out)

    def iterations(self) -> float | None:
        if not self.metrics:
            return None
        m = scrape(self.opts.url)
        if m is None:
            return None
        h = m.histogram(ITER_TOKENS)
        return h[0] if h is not None else m.value(ITER_COUNT)

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Until the server runs nothing (``/metrics``; a cancelled request may still run on a
        server that does not abort on disconnect)."""
        if not self.metrics:
            return
        left = self.left()
        timeout_s = timeout_s if left is None else min(timeout_s, left)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout_s:
            m = scrape(self.opts.url)
            running = m.value(RUNNING) if m else None
            if not running:
                return
            time.sleep(0.1)

    # -- probes ------------------------------------------------------------------------------
    def ttft(self, prompts: list[int], repeats: int, rng: np.random.Generator) -> list[TtftPoint]:
        order = [p for p in prompts for _ in range(repeats)]
        rng.shuffle(order)
        out = []
        for p in order:
            before = self.iterations()
            rec = asyncio.run(self.send([self.request(p, 2)], f"a lone {p}-token prompt")).records[0]
            after = self.iterations()
            self.tick()
            steps = None if before is None or after is None else round(after - before) - 1
            out.append(TtftPoint(p, rec.first_token - rec.sent, steps, rec.gaps[0] if rec.gaps else float("nan")))
        return out

    def decode(self, batch: int, context: int, out_tokens: int) -> GapPoint | None:
        reqs = [self.request(context, out_tokens) for _ in range(batch)]
        recs = asyncio.run(self.send(reqs, f"{batch} decodes of {context}-token prompts")).records
        self.tick()
        return steady_gaps(recs, context, batch)

    def mixed(self, batch: int, context: int, prompt: int, out_tokens: int) -> GapPoint | None:
        async def go():
            decodes = [self.request(context, out_tokens) for _ in range(batch)]
            late = self.request(prompt, 1)
            watch: list[Record] = []
            what = f"{batch} decodes and a {prompt}-token prompt among them"
            task = asyncio.create_task(self.send(decodes, what, records=watch))
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 120 and not task.done():
                await asyncio.sleep(0.02)
                if len(watch) == batch and all(r.chunks >= 3 for r in watch):
                    break
            late_res = await run_async([late], self.opts, time_limit_s=self.left())
            res = await task
            self.check(late_res.records, what)
            return res, late_res

        res, late_res = asyncio.run(go())
        self.tick()
        lr = late_res.records[0]
        # the prefill's first token in the decodes' clock
        t_first = late_res.start_wall + lr.first_token - res.start_wall
        t_sent = late_res.start_wall + lr.sent - res.start_wall
        spans = []
        ctx = []
        for r in res.records:
            times = r.first_token + np.concatenate([[0.0], np.cumsum(r.gaps)])
            # the gap that ends first after the prefill was sent and within its TTFT
            k = np.flatnonzero((times[1:] > t_sent) & (times[1:] <= t_first + 0.02))
            if len(k) == 0 or times[0] > t_sent:
                continue
            j = k[np.argmax(np.asarray(r.gaps)[k])]
            spans.append(r.gaps[j])
            ctx.append(context + j + 2)
        if len(spans) < max(1, batch // 2):
            return None
        return GapPoint("mixed", batch, float(np.mean(ctx)) * batch, prompt, float(np.median(spans)), len(spans))

    def chunks(self, prompt: int, out_tokens: int) -> int | None:
        """Steps a lone ``prompt`` took while one request decodes: the decode's gaps that span
        the prefill and are clearly longer than its plain decode gaps. The decode (up to
        ``out_tokens``) is cancelled a few tokens after the prompt's first token."""
        async def go():
            watch: list[Record] = []
            start: list[float] = []
            task = asyncio.create_task(run_async([self.request(16, out_tokens)], self.opts, records=watch,
                                                 on_start=start.append, time_limit_s=self.left()))
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 60 and not task.done():
                await asyncio.sleep(0.02)
                if watch and watch[0].chunks >= 8:
                    break
            late = await run_async([self.request(prompt, 1)], self.opts, time_limit_s=self.left())
            seen = watch[0].chunks if watch else 0
            t1 = time.perf_counter()
            while not task.done() and watch[0].chunks < seen + 3 and time.perf_counter() - t1 < 30:
                await asyncio.sleep(0.02)
            if not task.done():
                task.cancel()  # the decode has served its purpose: not a failure
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.check(watch + late.records, f"a {prompt}-token prompt while one request decodes")
            return watch[0], start[0], late

        r, start_wall, late = asyncio.run(go())
        self.wait_idle()
        self.tick()
        lr = late.records[0]
        if not r.gaps:
            return None
        t_sent = late.start_wall + lr.sent - start_wall
        t_first = late.start_wall + lr.first_token - start_wall
        gaps = np.asarray(r.gaps)
        ends = r.first_token + np.cumsum(gaps)
        before = gaps[ends <= t_sent]
        if len(before) < 3 or ends[-1] < t_first:
            return None
        base = float(np.median(before))
        # every step between the prompt's arrival and its first token carries one of its
        # chunks (the decode takes one token of the budget, the chunk the rest); the steps
        # before the engine got it are plain decodes: count the gaps clearly above one
        span = (ends > t_sent) & (ends <= t_first + 0.5 * base)
        return int(np.count_nonzero(span & (gaps > 2.0 * base)))

    def max_seqs(self, n: int, prompt: int = 16, out_tokens: int = 48) -> float | None:
        async def go():
            sampler = Sampler(self.opts.url, period=0.05)
            sampler.start()
            try:
                await self.send([self.request(prompt, out_tokens) for _ in range(n)],
                                f"{n} short requests at once")
            finally:
                await sampler.stop()
            return sampler.max_running()

        got = asyncio.run(go()) if self.metrics else None
        self.tick()
        return got

    def saturation(self, concurrency: int, n: int, prompt: int, out_tokens: int) -> tuple[list[Record], float]:
        reqs = [self.request(prompt, out_tokens) for _ in range(n)]
        res = asyncio.run(self.send(reqs, f"a closed loop of {concurrency}", closed=concurrency,
                                    on_done=lambda _r: self.tick()))
        return res.records, res.duration_s


def steady_gaps(recs: list[Record], context: int, batch: int) -> GapPoint | None:
    """The median gap while every request of the batch decodes (after the last first token,
    before the first last token)."""
    if any(r.error or not r.gaps for r in recs):
        return None
    start = max(r.first_token for r in recs)
    end = min(r.last_token for r in recs)
    gaps, ks = [], []
    for r in recs:
        ends = r.first_token + np.cumsum(r.gaps)
        keep = (ends - np.asarray(r.gaps) >= start - 1e-6) & (ends <= end + 1e-6)
        gaps += list(np.asarray(r.gaps)[keep])
        ks += list(np.flatnonzero(keep) + 1)
    if len(gaps) < batch * 3:
        return None
    # the step that writes token k+1 reads a context of prompt + k tokens and adds one
    return GapPoint("decode", batch, float(batch * (context + np.mean(ks) + 1)), 0,
                    float(np.median(gaps)), len(gaps))
