"""The server's Prometheus ``/metrics`` (its identity and limits: ``endpoint/server_info.py``).

vLLM, SGLang and llama.cpp (``--metrics``) expose running and waiting requests (llama.cpp:
processing and deferred), KV-cache use and, vLLM, per-iteration token counts and its cache
configuration (block size, number of KV blocks) as an info gauge. Names differ by engine and
version, so lookups try each known spelling.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio")
ITER_TOKENS = ("vllm:iteration_tokens_total",)
ITER_COUNT = ("llamacpp:n_decode_total",)  # a counter of steps (llama_decode calls), where no histogram is
CACHE_INFO = ("vllm:cache_config_info",)


@dataclass
class Metrics:
    """Parsed samples: name -> list of (labels, value)."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def first(self, names, default=None):
        for n in names:
            if n in self.samples:
                return self.samples[n]
        return default

    def value(self, names, default: float | None = None) -> float | None:
        """The sum over label sets (one engine: its one value)."""
        s = self.first(names)
        return default if s is None else float(sum(v for _, v in s))

    def labels(self, names) -> dict[str, str]:
        s = self.first(names)
        return dict(s[0][0]) if s else {}

    def histogram(self, names) -> tuple[float, float, list[tuple[float, float]]] | None:
        """(count, sum, [(upper bound, cumulative count)]) of a histogram, over label sets."""
        for n in names:
            if f"{n}_count" in self.samples:
                count = sum(v for _, v in self.samples[f"{n}_count"])
                total = sum(v for _, v in self.samples.get(f"{n}_sum", []))
                buckets: dict[float, float] = {}
                for lab, v in self.samples.get(f"{n}_bucket", []):
                    le = float(lab.get("le", "inf").replace("+Inf", "inf"))
                    buckets[le] = buckets.get(le, 0.0) + v
                return count, total, sorted(buckets.items())
        return None


def parse(text: str) -> Metrics:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        out.setdefault(m.group(1), []).append((labels, value))
    return Metrics(out)


def base_url(url: str) -> str:
    base = url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def get(url: str, path: str, timeout: float = 5.0) -> bytes | None:
    try:
        with urllib.request.urlopen(base_url(url) + path, timeout=timeout) as r:
            return r.read() if r.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def scrape(url: str) -> Metrics | None:
    body = get(url, "/metrics")
    return None if body is None else parse(body.decode("utf-8", "replace"))


class Sampler:
    """Polls ``/metrics`` every ``period`` seconds inside an asyncio run: running and waiting
    requests and KV use over time."""

    def __init__(self, url: str, period: float = 0.1):
        self.url, self.period = url, period
        self.rows: list[tuple[float, float, float, float]] = []  # t, running, waiting, kv
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            m = await loop.run_in_executor(None, scrape, self.url)
            if m is not None:
                self.rows.append((time.time(), m.value(RUNNING, float("nan")),
                                  m.value(WAITING, float("nan")), m.value(KV_USAGE, float("nan"))))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.period)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task:
            await self._task

    def max_running(self) -> float | None:
        vals = [r[1] for r in self.rows if r[1] == r[1]]
        return max(vals) if vals else None
