"""Measuring a scenario on an OpenAI-compatible server: the server and model checked, the
scenario's requests replayed through the load generator.

Shared by ``servesim loadgen``, ``validate --endpoint`` (``endpoint.validate``) and the
benchmarks.
"""

from __future__ import annotations

import contextlib
from urllib.parse import urlparse

from sim.errors import InputError


def check_url(url: str) -> str:
    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InputError("--endpoint", url, "expected a URL like http://127.0.0.1:8000")
    from endpoint.server_metrics import get

    if get(url, "/v1/models") is None:
        raise InputError("--endpoint", url, "no OpenAI-compatible server answers there "
                         "(GET /v1/models failed)")
    return url


def served_model(url: str, model: str | None, field: str = "--model") -> str:
    """``model`` if the server serves it (``field``: the option that named it), else the
    server's first model."""
    from endpoint.server_info import identity

    ids = [m["id"] for m in identity(url).get("models", []) if isinstance(m.get("id"), str)]
    if model is None:
        if not ids:
            raise InputError(field, None, f"the server lists no model; give {field}")
        return ids[0]
    if ids and model not in ids:
        raise InputError(field, model, f"the server serves {', '.join(ids)}")
    return model


@contextlib.contextmanager
def progress_bar(total: int, label: str, enabled: bool = True):
    from calibration.progress import ticker

    with ticker(enabled) as t:
        t.stage(label, total)
        yield t


def measure(scenario, url: str, model: str, *, tokenizer: str | None, api: str, exact: bool,
            source: str, progress: bool = True, label: str | None = None, seed: int | None = None,
            request_timeout: float = 600.0, time_limit: float | None = None):
    """Run the scenario's requests against the server; returns (plan, LoadResult). ``seed``:
    the prompts' words (default: the scenario's seed); lengths, arrivals and sharing stay.
    ``request_timeout`` bounds each request, ``time_limit`` the whole run (seconds)."""
    from endpoint.loadgen import Options, run
    from endpoint.replay import check_fits, load_vocab, plan
    from endpoint.server_info import read

    vocab = load_vocab(url, tokenizer)
    opts = Options(url=url, model=model, api=api, exact_output=exact, timeout_s=request_timeout)
    overhead = chat_overhead(opts) if api == "chat" else 0
    p = plan(scenario, vocab, api=api, chat_overhead=overhead, seed=seed)
    info = read(url)
    if info.problems:
        raise InputError("--endpoint", url, info.problems[0])
    check_fits(p, info.context_for(model), source, info.sources.get("context_per_seq", "max_model_len"))
    with progress_bar(len(p.requests), label or scenario.name, progress) as bar:
        result = run(p.requests, opts, closed=p.closed, think_time_s=p.think_time_s,
                     on_done=lambda _r: bar.tick(), time_limit_s=time_limit)
    return p, result


def chat_overhead(opts) -> int:
    """Tokens the chat template adds around a one-word user message."""
    from endpoint.loadgen import Request, run

    probe = Request(0, 0.0, " hello", 1, 1)
    rec = run([probe], opts).records[0]
    if rec.error or rec.prompt_tokens is None:
        raise InputError("--api", "chat", f"a chat request failed: {rec.error or 'no usage in the stream'}")
    return max(int(rec.prompt_tokens) - 1, 0)
