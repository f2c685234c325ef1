"""The server's Prometheus ``/metrics`` and identity (``/version``, ``/v1/models``).

vLLM and SGLang expose running and waiting requests, KV-cache use and per-iteration token
counts; vLLM also its cache configuration (block size, number of KV blocks) as an info
gauge. Names differ by engine and version, so lookups try each known spelling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from sim.errors import InputError

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
ITER_TOKENS = ("vllm:iteration_tokens_total",)
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


def identity(url: str) -> dict:
    """What the server says it is: version, models (id, root, max_model_len), cache config."""
    out: dict = {"url": base_url(url)}
    v = get(url, "/version")
    if v:
        with contextlib.suppress(json.JSONDecodeError, AttributeError):
            out["version"] = json.loads(v).get("version")
    models = get(url, "/v1/models")
    if models:
        with contextlib.suppress(json.JSONDecodeError, AttributeError, TypeError):
            out["models"] = [{k: m.get(k) for k in ("id", "root", "max_model_len", "owned_by")}
                             for m in json.loads(models).get("data") or [] if isinstance(m, dict)]
    m = scrape(url)
    out["metrics"] = m is not None
    if m is not None:
        info = m.labels(CACHE_INFO)
        if info:
            out["cache_config"] = info
        out["engine"] = "vllm" if any(k.startswith("vllm:") for k in m.samples) else \
            "sglang" if any(k.startswith("sglang:") for k in m.samples) else "unknown"
    return out


def published_int(url: str, name: str, value) -> int | None:
    """A count the server publishes (None: not published); anything but a positive whole
    number is refused by name."""
    if value is None:
        return None
    try:
        n = int(value)
        ok = n > 0 and n == float(value)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InputError("--endpoint", url, f"the server publishes {name} = {value!r}, not a positive whole number")
    return n


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
