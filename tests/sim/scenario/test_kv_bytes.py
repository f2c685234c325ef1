"""What a request's KV cache weighs as the engines hold it (sim/scenario/specs/kv_bytes.py), against
hand arithmetic from each model's config.json: full-attention and MLA layers keep every token,
windowed layers their last window (+ a block, freed block by block as vLLM V1 does), linear /
SSM layers a fixed state per request."""

from __future__ import annotations

import pytest

from sim.scenario.specs import get_model
from sim.scenario.specs.kv_bytes import kv_bytes_held


def test_gemma_3_27b_holds_every_token_in_its_10_global_layers_and_a_window_in_the_52_others():
    m = get_model("gemma-3-27b")
    per_layer = 2 * 16 * 128 * 2  # K and V, 16 KV heads of 128, bf16
    assert m.kv_bytes_per_token_split() == (10 * per_layer, 52 * per_layer)
    # 5,000 tokens, W = 1024: the window skips 5000 - 1024 + 1 = 3977 tokens, 248 whole blocks of 16
    # (3968 tokens); the sliding layers hold the other 1032.
    assert m.kv_bytes_of_request(5000, 16) == 5000 * 10 * per_layer + 1032 * 52 * per_layer
    assert m.kv_bytes_of_request(1000, 16) == 1000 * 62 * per_layer  # within the window: every token
    assert m.kv_bytes_of_request(1024, 16) == 1024 * 62 * per_layer  # 1 token skipped: no whole block yet
    assert m.kv_bytes_of_request(1040, 16) == 1040 * 10 * per_layer + 1024 * 52 * per_layer  # 17 skipped: 1 block


def test_gpt_oss_120b_alternates_full_and_128_token_sliding_layers():
    m = get_model("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2  # 8 KV heads of 64, bf16
    assert m.kv_bytes_per_token_split() == (18 * per_layer, 18 * per_layer)
    # 1,000 tokens: 873 skipped, 54 blocks (864 tokens) freed, 136 held in the sliding layers
    assert m.kv_bytes_of_request(1000, 16) == (1000 + 136) * 18 * per_layer
    assert m.kv_bytes_of_request(1000, 16, "fp8") == (1000 + 136) * 18 * per_layer / 2
    assert m.kv_bytes_of_request(1000, 64) == (1000 + 1000 - 832) * 18 * per_layer  # 873 → 13 blocks of 64


def test_qwen3_next_sends_its_full_layers_and_its_linear_attention_state():
    m = get_model("qwen3-next-80b-a3b")
    per_layer = 2 * 2 * 256 * 2  # 12 full layers: 2 KV heads of 256
    # 36 gated-delta-net layers: 32 value heads × 128 × 128 state + (2·2048 + 4096) × 3 conv inputs
    state = 36 * (32 * 128 * 128 + 8192 * 3) * 2
    assert m.kv_bytes_of_request(3000, 16) == 3000 * 12 * per_layer + state
    assert m.kv_bytes_of_request(0, 16) == state  # the state does not grow with the context


def test_nemotron_h_sends_its_attention_layers_and_its_mamba_state():
    m = get_model("nemotron-h-56b")
    per_layer = 2 * 8 * 128 * 2
    inner = 256 * 64
    state = 54 * (inner * 256 + (inner + 2 * 8 * 256) * 3) * 2
    assert m.kv_bytes_of_request(2000, 16) == 2000 * 10 * per_layer + state


def test_a_plain_model_weighs_its_tokens_times_the_bytes_per_token():
    m = get_model("llama-3-8b")
    assert m.kv_bytes_of_request(777, 16) == 777 * m.kv_bytes_per_token()
    assert m.kv_bytes_per_token_split() == (m.kv_bytes_per_token(), 0.0)


@pytest.mark.parametrize("tokens", [1, 8191, 8192, 8193, 20000])
def test_chunked_local_attention_keeps_the_current_chunk(tokens):
    """Llama-4's chunked layers attend within chunks of 8192: the chunks before the current one
    are freed (whole blocks of them)."""
    current = tokens - (tokens // 8192) * 8192
    assert kv_bytes_held(tokens, 0.0, 1.0, 8192, True, 16, 0.0) == current
    m = get_model("llama-4-scout")
    full, windowed = m.kv_bytes_per_token_split()
    assert m.kv_bytes_of_request(tokens, 16) == tokens * full + current * windowed
