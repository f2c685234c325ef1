"""A small profile in Vidur's CSV format (times in ms, per layer), with known formulas."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

STATS = ("min", "max", "mean", "median", "std")
MLP_OPS = {  # op -> (ms at 0 tokens, ms per token)
    "emb": (0.002, 1e-5), "input_layernorm": (0.005, 2e-5), "attn_pre_proj": (0.03, 4e-4),
    "attn_rope": (0.004, 1e-5), "attn_post_proj": (0.02, 3e-4),
    "post_attention_layernorm": (0.005, 2e-5), "mlp_up_proj": (0.1, 1.5e-3),
    "mlp_act": (0.006, 3e-5), "mlp_down_proj": (0.05, 8e-4), "add": (0.002, 1e-5),
}
TOKENS = (1, 2, 4, 8, 16, 64, 256, 512)


def _stats(prefix: str, ms: float) -> dict[str, float]:
    return {f"time_stats.{prefix}.{s}": (0.0 if s == "std" else ms) for s in STATS}


def mlp_ms(op: str, tokens: float, tp: int = 2) -> float:
    base, per = MLP_OPS[op]
    return base + per * tokens / tp


def write_mlp(path: Path, *, n_embd: int = 4096, tps=(1, 2)) -> Path:
    rows = []
    for tp in tps:
        for t in TOKENS:
            row = {}
            for op in MLP_OPS:
                row.update(_stats(op, mlp_ms(op, t, tp)))
            row.update(n_head=32, n_kv_head=32, n_embd=n_embd, n_expanded_embd=11008,
                       vocab_size=32768, use_gated_mlp=True, num_tokens=t,
                       num_tensor_parallel_workers=tp)
            rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def prefill_ms(q: int, kv: int) -> float:
    return 0.01 + 2e-7 * q * (kv + q)


def decode_ms(batch: int, kv: int) -> float:
    return 0.01 + 1e-5 * batch + 1e-7 * batch * (kv + 1)


def write_attention(path: Path, tp: int = 2) -> Path:
    rows = []
    common = {"n_embd": 4096, "n_q_head": 32, "n_kv_head": 32, "block_size": 16,
              "num_tensor_parallel_workers": tp, "max_model_len": 4096,
              "attention_backend": "AttentionBackend.FLASH_ATTENTION",
              "profile_method": "ProfileMethod.KINETO"}
    nan = float("nan")
    for q in (64, 128, 256, 512):
        for kv in (0, 128, 512, 1024):
            rows.append({**_stats("attn_input_reshape", 0.0), **_stats("attn_decode", nan),
                         **_stats("attn_output_reshape", 0.0), **_stats("attn_prefill", prefill_ms(q, kv)),
                         **common, "batch_size": 1, "prefill_chunk_size": q, "kv_cache_size": kv,
                         "is_prefill": True})
    for b in (1, 4, 16, 64):
        for kv in (32, 256, 1024, 2048):
            rows.append({**_stats("attn_input_reshape", 0.0), **_stats("attn_decode", decode_ms(b, kv)),
                         **_stats("attn_output_reshape", 0.0), **_stats("attn_prefill", nan),
                         **common, "batch_size": b, "prefill_chunk_size": 0, "kv_cache_size": kv,
                         "is_prefill": False})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def allreduce_ms(size: int) -> float:
    return 0.02 + size / 100e6  # 20 µs + 100 GB/s (in ms)


def write_allreduce(path: Path) -> Path:
    rows = []
    for workers in (2, 4):
        for size in (2048, 65536, 1048576, 16777216):
            for rank in range(2):
                rows.append({**_stats("all_reduce", allreduce_ms(size)), "rank": rank,
                             "num_workers": workers, "size": size, "collective": "all_reduce",
                             "devices_per_node": workers, "max_devices_per_node": 8})
    pd.DataFrame(rows).to_csv(path)  # Vidur writes the index as an unnamed first column
    return path
