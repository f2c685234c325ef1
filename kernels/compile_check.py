"""Compile every Triton kernel ahead of time for a CUDA target, no GPU needed.

The interpreter used by the CPU tests runs kernels as plain Python, so it cannot catch
errors that only the compiler sees (loop-carried type changes, unsupported control flow,
shared-memory overflow, ptxas failures). This lowers each kernel, in its main
specialisations, to a cubin for ``--arch`` (default sm_90 = H100/H200):

    python -m kernels.compile_check --arch 90

Must run with ``TRITON_INTERPRET`` unset or 0 (the interpreter replaces ``@triton.jit``).
"""

import argparse
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _cases():
    """(kernel, pointer/scalar types, constexprs) for the specialisations we ship."""
    from kernels import activation, attention, kv_cache, norm, rotary, sampling

    def ptrs(t, *names):
        return {n: f"*{t}" for n in names}

    yield (
        norm._rms_norm_kernel,
        {**ptrs("bf16", "x_ptr", "res_ptr", "w_ptr", "out_ptr", "res_out_ptr"), "eps": "fp32"},
        {"HAS_RES": True, "BLOCK": 8192},
    )
    yield activation._silu_and_mul_kernel, ptrs("bf16", "x_ptr", "out_ptr"), {"BLOCK": 1024}
    for interleaved in (False, True):
        yield (
            rotary._rope_kernel,
            {**ptrs("bf16", "x_ptr", "out_ptr"), "pos_ptr": "*i64", "cache_ptr": "*fp32"},
            {"HALF": 64, "BLOCK_H": 32, "BLOCK_HALF": 64, "INTERLEAVED": interleaved},
        )
    yield (
        kv_cache._write_kv_kernel,
        {**ptrs("bf16", "k_ptr", "v_ptr", "kc_ptr", "vc_ptr"), "slot_ptr": "*i64"},
        {"BLOCK": 1024},
    )
    ws = {"ws_m_ptr": "*fp32", "ws_l_ptr": "*fp32", "ws_acc_ptr": "*fp32"}
    meta = {"bt_ptr": "*i32", "qsl_ptr": "*i32", "sl_ptr": "*i32", "scale_log2": "fp32"}
    for dtype, prec, split, block_m in [
        ("bf16", "tf32", False, 16),
        ("bf16", "tf32", True, 16),
        ("bf16", "tf32", False, 64),
        ("fp16", "tf32", False, 64),
        ("fp32", "ieee", False, 16),
    ]:
        yield (
            attention._paged_attention_kernel,
            {**ptrs(dtype, "q_ptr", "kc_ptr", "vc_ptr", "out_ptr"), **ws, **meta},
            {"D": 128, "G": 4, "BLOCK_Q": block_m // 4, "BLOCK_M": block_m, "BLOCK_N": 64,
             "BLOCK_D": 128, "DOT_PREC": prec, "SPLIT": split},
        )  # fmt: skip
    for block_s in attention.SPLIT_CHOICES[1:]:
        yield (
            attention._combine_splits_kernel,
            {**ws, "out_ptr": "*bf16"},
            {"D": 128, "BLOCK_D": 128, "BLOCK_S": block_s},
        )
    yield (
        sampling._sample_kernel,
        {"logits_ptr": "*bf16", "gumbel_ptr": "*fp32", "temp_ptr": "*fp32", "topk_ptr": "*i64",
         "topp_ptr": "*fp32", "out_ptr": "*i64"},
        {"BLOCK": 4096},
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Compile all cases; print one line each; exit 1 on the first failure."""
    p = argparse.ArgumentParser(description="AOT-compile the Triton kernels (no GPU needed)")
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability, e.g. 80, 90")
    a = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("compile_check: unset TRITON_INTERPRET (the interpreter skips compilation)")
        return 2
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", a.arch, 32)
    for fn, types, constexprs in _cases():
        sig = {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in fn.arg_names}
        t0 = time.perf_counter()
        try:
            compiled = triton.compile(ASTSource(fn, sig, constexprs), target=target)
        except Exception as e:  # report which specialisation broke
            print(f"FAIL {fn.__name__} {constexprs}: {type(e).__name__}: {e}")
            return 1
        print(
            f"ok   {fn.__name__:<26} sm_{a.arch} shared={compiled.metadata.shared:>6}B {time.perf_counter() - t0:.1f}s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
