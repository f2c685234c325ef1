"""What servers publish about themselves, read the same way for every engine
(``endpoint/server_info.py``): from answers recorded off real servers, and live from the fake
server in each engine's shape."""

import json
from pathlib import Path

import pytest

from endpoint.server_info import from_answers, read
from endpoint.server_metrics import RUNNING, WAITING, parse
from tests.endpoint.fake_server import Cost, FakeServer

ANSWERS = Path(__file__).parent / "data" / "server_answers"


def recorded(name: str) -> dict:
    """A real server's answers (``benchmarks/record_server_answers.py`` wrote them)."""
    return json.loads((ANSWERS / f"{name}.json").read_text())


def test_a_recorded_vllm_server():
    rec = recorded("vllm-cpu")
    info = from_answers(rec["url"], rec["answers"])
    facts = rec["facts"]  # the server's own flags, written down when it was recorded
    assert info.engine == "vllm" and info.version == facts["version"]
    assert info.context_per_seq == facts["max_model_len"]
    assert info.block_size == facts["block_size"]
    assert info.kv_tokens == facts["num_gpu_blocks"] * facts["block_size"] == facts["kv_cache_size_tokens"]
    assert info.sources["kv_tokens"] == "vllm:cache_config_info kv_cache_size_tokens"
    assert info.kv_blocks(facts["block_size"]) == facts["num_gpu_blocks"]
    assert info.kv_layout == "paged"
    assert info.max_seqs is None and info.token_budget is None  # vLLM publishes neither
    assert info.sources["context_per_seq"] == "/v1/models max_model_len"
    assert not info.problems


def test_a_recorded_llama_cpp_server():
    rec = recorded("llama-server")
    info = from_answers(rec["url"], rec["answers"])
    facts = rec["facts"]
    assert info.engine == "llama.cpp"
    assert info.max_seqs == facts["parallel"]  # its slots
    assert info.context_per_seq == facts["ctx_size"] // facts["parallel"]  # each slot's share of -c
    assert info.kv_layout == "slots" and info.kv_tokens == info.max_seqs * info.context_per_seq
    assert info.version and info.sources["version"] == "/props build_info"
    m = parse(rec["answers"]["/metrics"])
    assert m.value(RUNNING) is not None and m.value(WAITING) is not None  # llamacpp:* names read
    assert not info.problems


@pytest.mark.parametrize("flavor", ["vllm", "llama.cpp", "sglang"])
def test_each_engine_publishes_its_limits_in_its_own_places(tokenizer_json, flavor):
    cost = Cost(max_seqs=3, n_ctx=640, budget=96, kv_blocks=300, block_size=16)
    with FakeServer(cost, root=str(tokenizer_json.parent), flavor=flavor) as url:
        info = read(url)
    assert info.engine == flavor and info.context_per_seq == 640 and info.metrics
    if flavor == "vllm":
        assert (info.max_seqs, info.token_budget, info.kv_tokens, info.kv_layout) == (None, None, 300 * 16, "paged")
        assert info.sources["kv_tokens"] == "vllm:cache_config_info num_gpu_blocks × block_size"
    elif flavor == "llama.cpp":
        assert (info.max_seqs, info.kv_tokens, info.kv_layout) == (3, 3 * 640, "slots")
        assert info.sources["max_seqs"] == "/props total_slots"
        assert info.sources["context_per_seq"] == "/props default_generation_settings.n_ctx"
        assert info.version == "b0-fake"
    else:
        assert (info.max_seqs, info.token_budget, info.kv_tokens, info.block_size) == (3, 96, 300 * 16, 1)
        assert info.sources["max_seqs"] == "/get_server_info internal_states[0].max_running_requests"
        assert info.sources["token_budget"] == "/get_server_info chunked_prefill_size"
        assert info.version == "fake-0.5"


def test_what_makes_no_sense_is_a_problem_and_not_a_limit():
    info = from_answers("http://x", {"/props": {"total_slots": 0, "default_generation_settings": {"n_ctx": "big"}},
                                     "/slots": [{"n_ctx": 512}, {"n_ctx": 256}]})
    assert info.engine == "llama.cpp"
    assert info.max_seqs == 2 and info.sources["max_seqs"] == "/slots (one entry per slot)"
    assert info.context_per_seq is None and info.kv_tokens is None
    assert [p.split(" = ")[0] for p in info.problems] == [
        "the server publishes /props total_slots", "the server publishes /props default_generation_settings.n_ctx"]
    info = from_answers("http://x", {"/props": {"total_slots": 2}, "/v1/models": {"data": [
        {"id": "m", "owned_by": "llamacpp", "meta": {"n_ctx": 700, "n_ctx_train": 8192}}]}})
    assert info.context_per_seq == 700 and info.sources["context_per_seq"] == "/v1/models meta.n_ctx"
    info = from_answers("http://x", {"/props": {"total_slots": 2}, "/slots": [{"n_ctx": 512}, {"n_ctx": 256}]})
    assert info.context_per_seq == 512 and info.notes == ["/slots: slots of different contexts [256, 512]; the first "
                                                          "is used"]


def test_sglang_chunked_prefill_off_is_no_budget():
    info = from_answers("http://x", {"/get_server_info": {"context_length": 4096, "chunked_prefill_size": -1,
                                                          "max_running_requests": 48, "page_size": 1}})
    assert info.engine == "sglang" and info.token_budget is None and info.max_seqs == 48
    assert "token_budget" not in info.sources and not info.problems


def test_nothing_published_is_nothing_known():
    info = from_answers("http://x/v1", {})
    assert info.url == "http://x" and info.engine == "unknown" and not info.metrics
    assert all(getattr(info, k) is None for k in ("context_per_seq", "max_seqs", "token_budget", "kv_tokens"))
    assert read("http://127.0.0.1:9").metrics is False


def test_the_kv_cache_in_blocks():
    vllm = from_answers("http://x", {"/metrics": 'vllm:cache_config_info{block_size="16",num_gpu_blocks="300"} 1.0\n'})
    assert vllm.kv_blocks(16) == 300
    # llama.cpp: 3 slots of 1000 tokens hold 3 requests of up to 1000 tokens in blocks of 16 (63 each)
    slots = from_answers("http://x", {"/props": {"total_slots": 3, "default_generation_settings": {"n_ctx": 1000}}})
    assert slots.kv_tokens == 3000 and slots.kv_blocks(16) == 3 * 63
    assert from_answers("http://x", {}).kv_blocks(16) is None
