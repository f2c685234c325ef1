"""Assemble the tiny random-weight models' folders for vLLM-CPU (``--load-format dummy``).

    python benchmarks/vllm_cpu/tiny_models/assemble.py [OUT] [--tokenizer DIR]

Each ``<name>/config.json`` here is a real Hugging Face architecture shrunk to tens of millions
of parameters with SmolLM2's vocabulary (49,152 tokens); this copies it into ``OUT/<name>/``
(default ``/work/vllm/tiny``) beside SmolLM2-135M's tokenizer files (from ``--tokenizer``,
default ``/work/vllm/smollm2-135m``, which ``benchmarks/vllm_cpu/install.sh`` writes). No
weights: vLLM draws them at random.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def names() -> list[str]:
    return sorted(p.parent.name for p in HERE.glob("*/config.json"))


def assemble(name: str, out: Path, tokenizer: Path, src: Path = HERE) -> Path:
    """``out/name`` with the config (``src/name/config.json``) and the tokenizer files; returns
    the folder."""
    dst = out / name
    dst.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / name / "config.json").read_text())
    if cfg.get("vocab_size") != 49152:
        raise ValueError(f"{name}: vocab_size {cfg.get('vocab_size')} is not SmolLM2's 49152")
    shutil.copy2(src / name / "config.json", dst / "config.json")
    for f in TOKENIZER_FILES:
        src = tokenizer / f
        if not src.is_file():
            raise FileNotFoundError(f"{src} (bash benchmarks/vllm_cpu/install.sh writes it)")
        shutil.copy2(src, dst / f)
    return dst


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", default="/work/vllm/tiny")
    p.add_argument("--tokenizer", default="/work/vllm/smollm2-135m")
    args = p.parse_args(argv)
    for n in names():
        print(assemble(n, Path(args.out), Path(args.tokenizer)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
