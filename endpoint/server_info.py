"""What a server says about itself, read the same way for every engine.

Each engine publishes its limits in its own places:

- **vLLM**: ``/version``; ``/v1/models`` (``max_model_len``: the context of one sequence);
  ``/metrics``' ``vllm:cache_config_info`` (``block_size``, ``num_gpu_blocks``: a paged pool
  shared by every sequence). It does not publish its sequence limit or token budget.
- **llama.cpp** (``llama-server``): ``/props`` (``total_slots``, ``default_generation_settings.n_ctx``:
  the context of one slot, ``build_info``); ``/slots`` (each slot's ``n_ctx``, when the server
  allows it); ``/v1/models`` (``meta``: ``n_ctx_train`` — the model's, not the server's);
  ``/metrics`` with ``--metrics`` (``llamacpp:requests_processing``, ``llamacpp:requests_deferred``);
  ``/v1/models``' ``meta.n_ctx`` is a slot's context too.
  Each slot holds its own context: fixed per-slot contexts, not a shared pool.
- **SGLang**: ``/get_server_info`` (its server arguments: ``context_length``,
  ``chunked_prefill_size``, ``max_running_requests``, ``page_size``; the pool's
  ``max_total_num_tokens``, at the top or under ``internal_states``; ``version``).

:func:`read` asks each place once; :func:`from_answers` turns the answers into a
:class:`ServerInfo`, whose ``sources`` name where each limit came from (a limit nobody
publishes stays None, for calibration to infer).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field

from endpoint.server_metrics import CACHE_INFO, Metrics, base_url, get, parse

PATHS = ("/version", "/v1/models", "/props", "/slots", "/get_server_info", "/metrics")


@dataclass
class ServerInfo:
    url: str
    engine: str = "unknown"  # vllm | llama.cpp | sglang | unknown
    version: str | None = None
    models: list[dict] = field(default_factory=list)  # id, root, max_model_len, owned_by
    context_per_seq: int | None = None  # tokens one sequence may hold (prompt + output)
    max_seqs: int | None = None  # sequences (llama.cpp: slots) served at once
    token_budget: int | None = None  # tokens one step may process
    kv_tokens: int | None = None  # tokens the whole KV cache holds
    block_size: int | None = None
    kv_layout: str | None = None  # "paged" (one pool, shared) or "slots" (a fixed context each)
    metrics: bool = False
    cache_config: dict = field(default_factory=dict)  # vLLM's cache_config_info labels
    sources: dict[str, str] = field(default_factory=dict)  # field -> where it was read
    problems: list[str] = field(default_factory=list)  # values published that make no sense (refused)
    notes: list[str] = field(default_factory=list)  # what else the reading found

    def as_dict(self) -> dict:
        return asdict(self)

    def context_for(self, model: str | None) -> int | None:
        """Tokens one sequence of ``model`` may hold: its own ``max_model_len`` where the listing
        gives one, else the server's."""
        for m in self.models:
            if m.get("id") == model and isinstance(m.get("max_model_len"), int) and m["max_model_len"] > 0:
                return m["max_model_len"]
        return self.context_per_seq

    def kv_blocks(self, block_size: int) -> int | None:
        """The KV cache in blocks of ``block_size`` tokens (the server's own block size where it
        publishes one)."""
        if self.kv_tokens is None:
            return None
        if self.kv_layout == "slots" and self.max_seqs and self.context_per_seq:
            # every slot's whole context: as many requests as slots, none longer than a slot, always fit
            return self.max_seqs * -(-self.context_per_seq // block_size)
        return self.kv_tokens // block_size


def identity(url: str) -> dict:
    """What the server says it is, as a plain dict (url, engine, version, models, metrics,
    cache config, the limits it publishes and where each was read)."""
    return read(url).as_dict()


def read(url: str, timeout: float = 5.0) -> ServerInfo:
    """Ask the server every place an engine publishes itself."""
    answers: dict[str, object] = {}
    for path in PATHS:
        body = get(url, path, timeout)
        if body is None:
            continue
        text = body.decode("utf-8", "replace")
        if path == "/metrics":
            answers[path] = text
            continue
        with contextlib.suppress(json.JSONDecodeError):
            answers[path] = json.loads(text)
    return from_answers(url, answers)


def from_answers(url: str, answers: dict[str, object]) -> ServerInfo:
    """The server's description from its answers (path -> parsed JSON, or ``/metrics``' text)."""
    info = ServerInfo(url=base_url(url))
    metrics = parse(answers["/metrics"]) if isinstance(answers.get("/metrics"), str) else None
    info.metrics = metrics is not None
    info.engine = _engine(answers, metrics)
    info.models = _models(answers.get("/v1/models"))
    _version(info, answers)
    if info.engine == "llama.cpp":
        _llama_cpp(info, answers)
    elif info.engine == "sglang":
        _sglang(info, answers.get("/get_server_info"))
    else:
        _vllm(info, metrics)
    return info


def _engine(answers: dict, metrics: Metrics | None) -> str:
    props = answers.get("/props")
    if isinstance(props, dict) and ("total_slots" in props or "default_generation_settings" in props):
        return "llama.cpp"
    models = answers.get("/v1/models")
    if isinstance(models, dict) and any(isinstance(m, dict) and m.get("owned_by") == "llamacpp"
                                        for m in models.get("data") or []):
        return "llama.cpp"
    if isinstance(answers.get("/get_server_info"), dict):
        return "sglang"
    if metrics is not None:
        names = metrics.samples
        for prefix, engine in (("vllm:", "vllm"), ("sglang:", "sglang"), ("llamacpp:", "llama.cpp")):
            if any(k.startswith(prefix) for k in names):
                return engine
    if isinstance(models, dict) and any(isinstance(m, dict) and m.get("owned_by") == "vllm"
                                        for m in models.get("data") or []):
        return "vllm"
    return "unknown"


def _models(answer) -> list[dict]:
    if not isinstance(answer, dict):
        return []
    out = []
    for m in answer.get("data") or []:
        if isinstance(m, dict):
            out.append({k: m.get(k) for k in ("id", "root", "max_model_len", "owned_by")})
    return out


def _version(info: ServerInfo, answers: dict) -> None:
    v = answers.get("/version")
    if isinstance(v, dict) and v.get("version") is not None:
        info.version, info.sources["version"] = str(v["version"]), "/version"
    props = answers.get("/props")
    if info.version is None and isinstance(props, dict) and props.get("build_info"):
        info.version, info.sources["version"] = str(props["build_info"]), "/props build_info"
    gsi = answers.get("/get_server_info")
    if info.version is None and isinstance(gsi, dict) and gsi.get("version"):
        info.version, info.sources["version"] = str(gsi["version"]), "/get_server_info version"


def _count(info: ServerInfo, name: str, value, where: str) -> int | None:
    """A positive whole number the server publishes as ``name``; anything else is noted as a
    problem (and not used), None when it is not published."""
    if value is None:
        return None
    try:
        n = int(value)
        ok = not isinstance(value, bool) and n > 0 and n == float(value)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        info.problems.append(f"the server publishes {where} = {value!r}, not a positive whole number")
        return None
    info.sources[name] = where
    return n


def _vllm(info: ServerInfo, metrics: Metrics | None) -> None:
    lens = [m.get("max_model_len") for m in info.models if m.get("max_model_len") is not None]
    if lens:
        info.context_per_seq = _count(info, "context_per_seq", lens[0], "/v1/models max_model_len")
    if metrics is None:
        return
    cache = metrics.labels(CACHE_INFO)
    info.cache_config = cache
    if cache:
        info.kv_layout, info.sources["kv_layout"] = "paged", "/metrics vllm:cache_config_info"
        info.block_size = _count(info, "block_size", cache.get("block_size"), "vllm:cache_config_info block_size")
        if cache.get("kv_cache_size_tokens") not in (None, "None"):  # its own count (hybrid models too)
            info.kv_tokens = _count(info, "kv_tokens", cache["kv_cache_size_tokens"],
                                    "vllm:cache_config_info kv_cache_size_tokens")
            return
        blocks = _count(info, "kv_tokens", cache.get("num_gpu_blocks"), "vllm:cache_config_info num_gpu_blocks")
        if blocks and info.block_size:
            info.kv_tokens = blocks * info.block_size
            info.sources["kv_tokens"] = "vllm:cache_config_info num_gpu_blocks × block_size"


def _llama_cpp(info: ServerInfo, answers: dict) -> None:
    props = answers.get("/props") if isinstance(answers.get("/props"), dict) else {}
    gen = props.get("default_generation_settings") or {}
    slots = answers.get("/slots")
    info.max_seqs = _count(info, "max_seqs", props.get("total_slots"), "/props total_slots")
    ctx = gen.get("n_ctx") if isinstance(gen, dict) else None
    where = "/props default_generation_settings.n_ctx"
    slot_ctx = [s.get("n_ctx") for s in slots if isinstance(s, dict)] if isinstance(slots, list) else []
    if ctx is None and slot_ctx:
        ctx, where = slot_ctx[0], "/slots n_ctx"
    if ctx is None:  # its model listing's meta.n_ctx: a slot's context too (n_ctx_train is the model's)
        models = answers.get("/v1/models")
        metas = [m.get("meta") for m in (models.get("data") or []) if isinstance(m, dict)] \
            if isinstance(models, dict) else []
        found = [m["n_ctx"] for m in metas if isinstance(m, dict) and "n_ctx" in m]
        if found:
            ctx, where = found[0], "/v1/models meta.n_ctx"
    info.context_per_seq = _count(info, "context_per_seq", ctx, where)
    if slot_ctx and len(set(slot_ctx)) > 1:
        info.notes.append(f"/slots: slots of different contexts {sorted(set(slot_ctx))}; the first is used")
    if info.max_seqs is None and slot_ctx:
        info.max_seqs = len(slot_ctx)
        info.sources["max_seqs"] = "/slots (one entry per slot)"
    # every slot keeps its own context of n_ctx tokens (a request longer than a slot is refused)
    info.kv_layout, info.sources["kv_layout"] = "slots", "llama.cpp: a fixed context per slot"
    if info.max_seqs and info.context_per_seq:
        info.kv_tokens = info.max_seqs * info.context_per_seq
        info.sources["kv_tokens"] = f"{info.sources['max_seqs']} × {info.sources['context_per_seq']}"


def _sglang(info: ServerInfo, gsi) -> None:
    if not isinstance(gsi, dict):
        return
    states = gsi.get("internal_states")
    inner = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}

    def pick(key: str):
        for src, d in (("", gsi), ("internal_states[0].", inner)):
            if d.get(key) is not None:
                return d[key], f"/get_server_info {src}{key}"
        return None, None

    for name, key in (("context_per_seq", "context_length"), ("max_seqs", "max_running_requests"),
                      ("token_budget", "chunked_prefill_size"), ("kv_tokens", "max_total_num_tokens"),
                      ("block_size", "page_size")):
        value, where = pick(key)
        if where is not None:
            if name == "token_budget" and isinstance(value, (int, float)) and value <= 0:
                continue  # chunked prefill off (-1): the budget is not this
            setattr(info, name, _count(info, name, value, where))
    if info.context_per_seq is None:
        lens = [m.get("max_model_len") for m in info.models if m.get("max_model_len") is not None]
        if lens:
            info.context_per_seq = _count(info, "context_per_seq", lens[0], "/v1/models max_model_len")
    info.kv_layout, info.sources["kv_layout"] = "paged", "SGLang: one token pool (radix cache)"
