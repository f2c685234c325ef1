"""The engine on the Triton kernels, run by Triton's CPU interpreter in a subprocess
(``TRITON_INTERPRET=1`` must be set before Triton is imported)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from engine_ref import commit, dense_greedy, dense_logits, make_executor, plan_for, table_for
from engine.executor import EngineExecutor
from engine.generate import generate
from engine.weights import random_model

model = random_model("tiny-llama", seed=1, impl="triton")
ref = random_model("tiny-llama", seed=1, impl="torch")
prompt = list(range(3, 32))
table = table_for([prompt])
ex = make_executor(model, [prompt])
got = []
for n in [8, 8, 11, 1, 1]:  # chunks, then decodes, through the paged cache
    plan = plan_for(table, 4, [(0, n)])
    got.append(ex.forward(plan, table, all_tokens=True))
    commit(table, plan)
err = float((torch.cat(got) - dense_logits(ref, prompt)).abs().max())
assert err < 1e-4, err

prompts = [prompt, [7, 1, 9, 200, 4, 4, 31]]  # a prefill chunk beside a decode, sampled
ex = EngineExecutor(model, num_blocks=32, block_size=4)
gens = generate(prompts, 4, executor=ex, policy="chunked-prefill", chunk_size=8,
                max_num_seqs=2)
for p, g in zip(prompts, gens):
    assert g.token_ids == dense_greedy(ref, p, 4), (g.token_ids, dense_greedy(ref, p, 4))
print("ok", err)
"""


def test_engine_on_triton_kernels_matches_dense():
    here = Path(__file__).parent
    root = here.parent.parent
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(root), str(here), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")
