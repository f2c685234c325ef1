"""The engine's speed beside its roofline: ``python -m engine.bench --out FILE.json``.

Times whole steps of ``EngineExecutor.run`` (input preparation, forward, sampling, host sync)
with calibration's timer (``engine.plan_timer``), as ``servesim execute`` sees them, after a full
warm-up:

* decode steps per batch and context, each beside its floor: weights and the batch's KV read
  once at the HBM bandwidth, or its FLOPs at peak, whichever is longer;
* one-row prefills per length, with tokens/s and the same kind of floor;
* the coefficient of variation (std / mean) of one decode step run 100 times.

The floors come from the GPU catalog (``sim.scenario.specs.gpus``) for a known GPU, else from a short
measurement on the device (a large copy and a large matmul: on a CPU, what it reaches, not a
datasheet); ``--hbm-gbps`` / ``--tflops`` override them. Points whose KV does not fit the
cache are reported with ``step_s: null`` and the reason.

    python -m engine.bench --out benchmarks/results/engine-h100.json     # Llama-3-8B on CUDA
    python -m engine.bench --model tiny-llama-12m --device cpu --out benchmarks/results/engine-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.plan_timer import PlanTimer, Row, decode_rows
from sim.scenario.specs import ModelSpec, get_gpu, get_model

MiB = 1024**2
CPU_DEFAULTS = {"batch": [1, 8, 32], "context": [256, 1024], "prefill": [128, 256, 512, 1024],
                "repeats": 5, "cv_batch": 8, "cv_context": 256}
CUDA_DEFAULTS = {"batch": [1, 8, 32, 128], "context": [1024, 8191],  # 8191 + 1: an 8k model's longest
                 "prefill": [512, 1024, 2048, 4096, 8192], "repeats": 20, "cv_batch": 32,
                 "cv_context": 1024}
_GPU_NAMES = [("H200", "H200"), ("H100", "H100-SXM"), ("A100-SXM4-40GB", "A100-40GB"),
              ("A100", "A100-80GB"), ("L40S", "L40S"), ("B200", "B200")]


@dataclass(frozen=True)
class Roofline:
    bytes_per_s: float
    flops: float
    source: str

    def floor(self, nbytes: float, flops: float) -> float:
        return max(nbytes / self.bytes_per_s, flops / self.flops)


def decode_cost(spec: ModelSpec, dtype: str, batch: int, context: int) -> tuple[float, float]:
    """(bytes, FLOPs) of one decode step: every weight read once, each row's KV read."""
    kv = batch * (context + 1) * spec.kv_bytes_per_token(dtype)
    matmul = spec.num_params - spec.vocab_size * spec.hidden_size  # the embedding is a gather
    attn = 4 * batch * (context + 1) * spec.num_layers * spec.q_size
    return spec.weight_bytes(dtype) + kv, 2 * matmul * batch + attn


def prefill_cost(spec: ModelSpec, dtype: str, tokens: int) -> tuple[float, float]:
    """(bytes, FLOPs) of a one-row prefill of ``tokens`` (causal attention, one sampled row)."""
    layers = spec.num_layers * (sum(spec.params_per_layer().values()) - 2 * spec.hidden_size)
    attn = 2 * spec.num_layers * spec.q_size * tokens * tokens  # QK^T and PV, causal half
    flops = 2 * layers * tokens + attn + 2 * spec.vocab_size * spec.hidden_size
    return spec.weight_bytes(dtype) + tokens * spec.kv_bytes_per_token(dtype), flops


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    n = torch.get_num_threads()
    return f"cpu ({platform.processor() or platform.machine()}, {n} thread{'s' if n > 1 else ''})"


def catalog_gpu(name: str) -> str | None:
    """The catalog entry of a CUDA device name (``torch.cuda.get_device_name``), if any."""
    if "PCIe" in name:  # the catalog's H100 and A100 figures are the SXM parts'
        return None
    return next((entry for key, entry in _GPU_NAMES if key in name), None)


def roofline(device: torch.device, dtype: str, hbm_gbps: float | None, tflops: float | None) -> Roofline:
    """Catalog figures for a known GPU, else measured; flags override either."""
    bw = flops = None
    source = "measured"
    catalog = catalog_gpu(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    if catalog is not None:
        gpu = get_gpu(catalog)
        bw, flops, source = gpu.hbm_bandwidth, gpu.peak_flops(dtype), f"catalog {catalog}"
    if bw is None or flops is None:
        bw, flops = _measure_bandwidth(device), _measure_flops(device, dtype)
    if hbm_gbps or tflops:
        source = "flags" if (hbm_gbps and tflops) else source + " + flags"
    return Roofline(hbm_gbps * 1e9 if hbm_gbps else bw, tflops * 1e12 if tflops else flops, source)


def _best(fn, device: torch.device, repeats: int = 5) -> float:
    """Shortest of ``repeats`` timed calls of ``fn`` (after one untimed call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _measure_bandwidth(device: torch.device) -> float:
    """Bytes/s of a large copy (read + write)."""
    n = (1024 if device.type == "cuda" else 256) * MiB // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)

    return 2 * src.numel() * 4 / _best(lambda: dst.copy_(src), device)


def _measure_flops(device: torch.device, dtype: str) -> float:
    n = 8192 if device.type == "cuda" else 1024
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)

    return 2 * n**3 / _best(lambda: torch.mm(a, b), device)


def bench(args: argparse.Namespace) -> dict:
    from engine.executor import EngineExecutor

    device = torch.device(args.device)
    defaults = CUDA_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    spec = get_model(args.model)
    dtype = args.dtype or (spec.dtype if device.type == "cuda" else "fp32")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    kv_bytes = args.kv_mib * MiB if args.kv_mib else None
    ex = EngineExecutor.load(spec, dtype=dtype, device=device, kv_memory_bytes=kv_bytes,
                             keep_tokens=False, graphs=args.graphs)
    roof = roofline(device, dtype, args.hbm_gbps, args.tflops)
    warm = ex.warmup(max_num_seqs=max(*args.batch, args.cv_batch), max_num_tokens=max(args.prefill))
    timer = PlanTimer(ex)
    out = {"gpu": device_name(device), "model": spec.name, "device": device.type, "dtype": dtype,
           "graphs": ex.graph_mode, "warmup_s": warm.seconds,
           "roofline": {"hbm_bytes_per_s": roof.bytes_per_s, "flops": roof.flops, "source": roof.source},
           "kv_cache_tokens": ex.num_blocks * ex.block_size, "decode": [], "prefill": []}
    for batch in args.batch:
        for context in args.context:
            rows = decode_rows(batch, context)
            point = {"batch": batch, "context": context, "step_s": None,
                     "floor_s": roof.floor(*decode_cost(spec, dtype, batch, context))}
            if timer.fits(rows):
                point["step_s"] = timer.median(rows, args.repeats)
            else:
                point["skipped"] = (f"{batch} x {context + 1} tokens do not fit the KV cache "
                                    f"({out['kv_cache_tokens']} tokens) or the model's length")
            out["decode"].append(point)
            _progress(args, "decode", point)
    for tokens in args.prefill:
        rows = [Row(0, tokens)]
        point = {"tokens": tokens, "step_s": None, "floor_s": roof.floor(*prefill_cost(spec, dtype, tokens))}
        if timer.fits(rows):
            point["step_s"] = timer.median(rows, args.repeats)
            point["tokens_per_s"] = tokens / point["step_s"]
            point["floor_tokens_per_s"] = tokens / point["floor_s"]
        else:
            point["skipped"] = f"{tokens} tokens exceed the KV cache or the model's length"
        out["prefill"].append(point)
        _progress(args, "prefill", point)
    cv_rows = decode_rows(args.cv_batch, args.cv_context)
    times = [timer.run(cv_rows) for _ in range(args.cv_steps)] if timer.fits(cv_rows) else []
    out["step_cv"] = statistics.pstdev(times) / statistics.fmean(times) if times else None
    out["step_cv_shape"] = {"batch": args.cv_batch, "context": args.cv_context, "steps": len(times),
                            "mean_s": statistics.fmean(times) if times else None}
    out["host_load_1min"] = os.getloadavg()[0]  # other processes on the host skew the CV
    out["steps_from_graphs"] = ex.step_counts["graph"]
    out["steps_eager"] = ex.step_counts["eager"]
    if device.type == "cpu":
        out["note"] = ("measured on a CPU: a sample of the bench, not a GPU figure; the floors are "
                       "this machine's measured copy bandwidth and matmul rate")
    return out


def _progress(args: argparse.Namespace, kind: str, point: dict) -> None:
    if args.quiet:
        return
    what = (f"batch {point['batch']:>4} context {point['context']:>6}" if kind == "decode"
            else f"{point['tokens']:>6} tokens")
    step = "skipped" if point["step_s"] is None else f"{point['step_s'] * 1e3:9.3f} ms"
    print(f"{kind:<8}{what}: {step}  (floor {point['floor_s'] * 1e3:.3f} ms)", file=sys.stderr)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    cuda = torch.cuda.is_available()
    p.add_argument("--model", default=None, help="catalog model (default llama-3-8b on CUDA, "
                   "tiny-llama-12m on a CPU)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if cuda else "cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default=None,
                   help="default: the model's on CUDA, fp32 on a CPU")
    p.add_argument("--batch", type=int, nargs="+", default=None, help="decode batches (CUDA: 1 8 32 128)")
    p.add_argument("--context", type=int, nargs="+", default=None,
                   help="decode contexts, cached tokens before the step's one (CUDA: 1024 8191)")
    p.add_argument("--prefill", type=int, nargs="+", default=None, help="prefill lengths (CUDA: 512 .. 8192)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per point, median kept")
    p.add_argument("--cv-steps", type=int, default=100)
    p.add_argument("--cv-batch", type=int, default=None)
    p.add_argument("--cv-context", type=int, default=None)
    p.add_argument("--graphs", choices=["auto", "cuda", "pad", "off"], default="auto")
    p.add_argument("--kv-mib", type=float, default=None, help="KV cache size (default: 90%% of free "
                   "GPU memory, 256 MiB on a CPU)")
    p.add_argument("--threads", type=int, default=1, help="torch threads on a CPU")
    p.add_argument("--hbm-gbps", type=float, default=None, help="memory bandwidth for the floors")
    p.add_argument("--tflops", type=float, default=None, help="peak TFLOP/s for the floors")
    p.add_argument("--out", default=None, help="JSON file (default: print it)")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    if a.device == "cuda" and not cuda:
        p.error("--device cuda: no CUDA device is available")
    a.model = a.model or ("llama-3-8b" if a.device == "cuda" else "tiny-llama-12m")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    result = bench(args)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        if not args.quiet:
            print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
