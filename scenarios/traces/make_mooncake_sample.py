"""Writes mooncake-sample.jsonl.gz: a synthetic trace in Mooncake's JSONL format, gzipped.

Requests share long prefixes (a few popular "documents" of 512-token hash blocks) followed by
their own blocks, like the Mooncake conversation trace: 50,000 requests at 4 per second.
Rerun to regenerate (seeded; the same bytes every time). ``--requests N --out FILE`` writes a
longer or shorter trace with the same statistics (the same first lines; plain JSONL unless the
name ends in .gz), e.g. to time a larger replay:

    python scenarios/traces/make_mooncake_sample.py --requests 200000 --out /tmp/mooncake-200k.jsonl
    servesim bench --scenarios scenarios/mooncake-trace.yaml --set workload.trace.path=/tmp/mooncake-200k.jsonl
"""

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--requests", type=int, default=50_000)
parser.add_argument("--out", type=Path, default=Path(__file__).with_name("mooncake-sample.jsonl.gz"))
args = parser.parse_args()

rng = np.random.default_rng(2025)
docs = [list(range(d * 100, d * 100 + n)) for d, n in enumerate((4, 8, 12, 6))]  # hash ids
popularity = np.array([0.4, 0.3, 0.2, 0.1])
t_ms = 0.0
next_id = 10_000
lines = []
for _ in range(args.requests):
    t_ms += rng.exponential(250.0)  # 4 requests per second
    doc = docs[rng.choice(len(docs), p=popularity)]
    own = int(rng.integers(1, 4))
    ids = doc + list(range(next_id, next_id + own))
    next_id += own
    tail = int(rng.integers(1, 512))
    lines.append(json.dumps({"timestamp": int(t_ms), "input_length": (len(ids) - 1) * 512 + tail,
                             "output_length": int(rng.integers(16, 400)), "hash_ids": ids}) + "\n")
data = "".join(lines).encode()
if args.out.suffix == ".gz":  # no name or time in the header: the same bytes every run
    with args.out.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                   compresslevel=9) as f:
        f.write(data)
else:
    args.out.write_bytes(data)
