"""Writes mooncake-sample.jsonl: a small synthetic trace in Mooncake's JSONL format.

Requests share long prefixes (a few popular "documents" of 512-token hash blocks) followed by
their own blocks, like the Mooncake conversation trace. Rerun to regenerate (seeded).
"""

import json
from pathlib import Path

import numpy as np

rng = np.random.default_rng(2025)
docs = [list(range(d * 100, d * 100 + n)) for d, n in enumerate((4, 8, 12, 6))]  # hash ids
popularity = np.array([0.4, 0.3, 0.2, 0.1])
t_ms = 0.0
next_id = 10_000
lines = []
for _ in range(400):
    t_ms += rng.exponential(250.0)  # 4 requests per second
    doc = docs[rng.choice(len(docs), p=popularity)]
    own = int(rng.integers(1, 4))
    ids = doc + list(range(next_id, next_id + own))
    next_id += own
    tail = int(rng.integers(1, 512))
    lines.append({"timestamp": int(t_ms), "input_length": (len(ids) - 1) * 512 + tail,
                  "output_length": int(rng.integers(16, 400)), "hash_ids": ids})
out = Path(__file__).with_name("mooncake-sample.jsonl")
out.write_text("".join(json.dumps(x) + "\n" for x in lines))
