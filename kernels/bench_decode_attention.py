"""Micro-benchmark: Triton decode paged attention vs the HBM roofline.

A decode step reads every cached K and V byte once, so its floor is
``bytes(K/V read) / HBM bandwidth``. This times ``paged_attention`` (Triton path) on a
pure-decode batch (q_len = 1 per sequence, shuffled cache blocks) and prints achieved GB/s
and the fraction of the HBM bandwidth: the GPU catalog's for a card it knows (H100 SXM 3350,
H200 4800 GB/s), else ``--hbm-gbps``, which overrides either.

By default each call is replayed from a CUDA graph, as the engine's decode steps are: timed
from Python, a batch-1 call measures the launches (tens of microseconds), not the kernel.
The split-KV count is the engine's rule (``choose_num_splits``) unless ``--num-splits``.

    python -m kernels.bench_decode_attention --batch 1 8 64 --context 1024 8192 --hbm-gbps 3350
"""

import argparse
import math
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32, 128])
    p.add_argument("--context", type=int, nargs="+", default=[1024, 8192], help="tokens/seq")
    p.add_argument("--num-q-heads", type=int, default=32)
    p.add_argument("--num-kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16, help="KV cache page size (tokens)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--hbm-gbps", type=float, default=None,
                   help="peak HBM bandwidth, GB/s (default: the GPU catalog's for the card at hand)")
    p.add_argument("--num-splits", type=int, default=None, help="force split-KV count")
    p.add_argument("--no-check", action="store_true", help="skip the check vs the reference")
    p.add_argument("--no-graph", action="store_true", help="time eager calls (launches included)")
    return p.parse_args(argv)


def catalog_hbm_gbps(device_name: str) -> float | None:
    """The catalog's HBM bandwidth (GB/s) of a CUDA device name, or None for a card it lacks."""
    from engine.bench import catalog_gpu
    from sim.scenario.specs import get_gpu

    entry = catalog_gpu(device_name)
    return None if entry is None else get_gpu(entry).hbm_bandwidth / 1e9


def _case(batch: int, context: int, a: argparse.Namespace, dtype: torch.dtype):
    dev = "cuda"
    bs = a.block_size
    blocks_per_seq = math.ceil(context / bs)
    num_blocks = batch * blocks_per_seq
    shape = (num_blocks, bs, a.num_kv_heads, a.head_dim)
    k_cache = torch.randn(shape, device=dev, dtype=dtype)
    v_cache = torch.randn(shape, device=dev, dtype=dtype)
    perm = torch.randperm(num_blocks, device=dev, dtype=torch.int32)
    block_tables = perm.view(batch, blocks_per_seq)
    q = torch.randn(batch, a.num_q_heads, a.head_dim, device=dev, dtype=dtype)
    qsl = torch.arange(batch + 1, device=dev, dtype=torch.int32)
    seq_lens = torch.full((batch,), context, device=dev, dtype=torch.int32)
    return q, k_cache, v_cache, block_tables, qsl, seq_lens


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; returns a process exit code."""
    a = _parse(argv)
    if not torch.cuda.is_available():
        print(
            "bench_decode_attention: CUDA is not available (no NVIDIA GPU / CUDA build of "
            "torch); this benchmark only measures the Triton kernel on a GPU.",
            file=sys.stderr,
        )
        return 2
    import triton.testing

    from kernels.attention import (
        choose_num_splits,
        num_programs,
        paged_attention_torch,
        paged_attention_triton,
        query_block,
        sm_count,
    )

    if a.hbm_gbps is None:
        a.hbm_gbps = catalog_hbm_gbps(torch.cuda.get_device_name())
        if a.hbm_gbps is None:
            print(f"bench_decode_attention: {torch.cuda.get_device_name()} is not in the GPU catalog; "
                  "give its bandwidth with --hbm-gbps", file=sys.stderr)
            return 2
    dtype = DTYPES[a.dtype]
    esize = torch.empty((), dtype=dtype).element_size()
    scale = 1.0 / math.sqrt(a.head_dim)
    print(
        f"# {torch.cuda.get_device_name()}  dtype={a.dtype} Hq={a.num_q_heads} "
        f"Hk={a.num_kv_heads} D={a.head_dim} block={a.block_size} roofline={a.hbm_gbps} GB/s"
    )
    group = a.num_q_heads // a.num_kv_heads
    print(f"{'batch':>6} {'context':>8} {'splits':>6} {'KV MB':>9} {'time us':>9} {'GB/s':>8} {'%roof':>6}")
    for batch in a.batch:
        for context in a.context:
            args = _case(batch, context, a, dtype)

            bm = query_block(batch, batch, group)
            splits = a.num_splits or choose_num_splits(
                num_programs(batch, batch, a.num_kv_heads, bm, group), context, sm_count(args[0].device))

            def run(args=args, splits=splits):
                return paged_attention_triton(*args, scale, num_splits=splits)

            if not a.no_check:
                n = min(batch, 4)  # the reference loops in Python: check a few sequences
                sub = (args[0][:n], args[1], args[2], args[3][:n], args[4][: n + 1], args[5][:n])
                err = (run()[:n].float() - paged_attention_torch(*sub, scale).float()).abs().max()
                if err.item() > 2e-2:
                    print(f"MISMATCH vs reference: max abs err {err.item():.3g}", file=sys.stderr)
                    return 1
            if a.no_graph:
                ms = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")
            else:
                run()  # compile before capturing
                ms = triton.testing.do_bench_cudagraph(run, rep=200, return_mode="median")
            kv_bytes = 2 * batch * context * a.num_kv_heads * a.head_dim * esize
            io_bytes = 2 * batch * a.num_q_heads * a.head_dim * esize  # q in, out
            gbps = (kv_bytes + io_bytes) / (ms * 1e-3) / 1e9
            print(
                f"{batch:>6} {context:>8} {splits:>6} {kv_bytes / 1e6:>9.1f} {ms * 1e3:>9.1f} "
                f"{gbps:>8.0f} {100 * gbps / a.hbm_gbps:>5.1f}%"
            )
            del args
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
